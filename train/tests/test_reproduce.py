"""Deterministic training and ``ccp_train.reproduce``: a tiny MOCC model trained twice, and a
fine-tune chain replayed from its card alone, give byte-identical ONNX files; curves are
written next to the card."""

import csv
import json
from pathlib import Path

import pytest
import torch

from ccp_train import mocc, reproduce

TINY = [
    "train", "--bootstrap-iters", "2", "--bootstrap-switch", "1", "--traverse-max-iters", "2",
    "--iters-per-landmark", "1", "--conv-scenarios", "1", "--eval-scenarios", "1",
    "--n-steps", "32", "--learners", "1,2", "--duration-s", "1.5,1.5", "--stagger-s", "0,0.5",
    "--num-minibatches", "2", "--update-epochs", "1",
]


@pytest.fixture(autouse=True)
def _restore_torch() -> object:
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(False)


def card(d: Path) -> dict:
    return json.loads((d / "mocc.json").read_text())


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    for name, seed in (("a", "3"), ("b", "3"), ("c", "4")):
        mocc.main([*TINY, "--seed", seed, "--out", str(tmp_path / name)])
    a, b, c = (card(tmp_path / n) for n in "abc")
    assert (tmp_path / "a/mocc.onnx").read_bytes() == (tmp_path / "b/mocc.onnx").read_bytes()
    assert a["sha256"] == b["sha256"] != c["sha256"]
    det = a["training"]["determinism"]
    assert det["threads"] == 1 and det["deterministic_algorithms"] is True
    assert det["torch"] == torch.__version__ and det["code"]
    assert a["training"]["wall_s"] > 0
    # curves next to the card: one row per iteration of the log
    rows = list(csv.DictReader((tmp_path / "a/mocc.curves.csv").open()))
    log = [json.loads(x) for x in (tmp_path / "a/mocc.train.jsonl").read_text().splitlines()]
    assert len(rows) == sum(1 for r in log if r["kind"] == "iteration") > 0
    assert {"iteration", "reward", "pg_loss", "v_loss", "entropy"} <= set(rows[0])
    assert (tmp_path / "a/mocc.curves.png").read_bytes()[:4] == b"\x89PNG"


def test_a_fine_tune_chain_replays_from_its_card(tmp_path, capsys):
    first = tmp_path / "first"
    mocc.main([*TINY, "--seed", "5", "--out", str(first)])
    tuned = tmp_path / "tuned"
    mocc.main([*TINY, "--seed", "5", "--bootstrap-iters", "0", "--init",
               str(first / "mocc.pt"), "--out", str(tuned)])
    cmd = card(tuned)["training"]["command"]
    assert cmd.count("&&") == 1, cmd
    # the fine-tune's curves are the chain's: the first part's rows, then its own
    first_rows = list(csv.DictReader((first / "mocc.curves.csv").open()))
    rows = list(csv.DictReader((tuned / "mocc.curves.csv").open()))
    n_own = sum(1 for x in (tuned / "mocc.train.jsonl").read_text().splitlines()
                if json.loads(x)["kind"] == "iteration")
    assert len(rows) == len(first_rows) + n_own and n_own > 0
    assert [r["part"] for r in rows] == ["1"] * len(first_rows) + ["2"] * n_own
    its = [int(r["iteration"]) for r in rows]
    assert its == sorted(its) and len(set(its)) == len(its)
    work = tmp_path / "work"
    assert reproduce.main([str(tuned / "mocc.json"), "--workdir", str(work)]) == 0
    assert "IDENTICAL" in capsys.readouterr().out
    # nothing was written to the original output folders' paths by the replay
    assert (work / "part1" / "mocc.pt").is_file() and (work / "part2" / "mocc.onnx").is_file()
    # the last part alone, from the starting point's checkpoint
    assert reproduce.main([str(tuned / "mocc.json"), "--workdir", str(tmp_path / "w1"),
                           "--from-checkpoint", str(first / "mocc.pt")]) == 0
    assert "IDENTICAL" in capsys.readouterr().out
    assert not (tmp_path / "w1" / "part1").exists()
    # a card whose bytes do not match is reported, exit 1
    bad = card(tuned)
    bad["sha256"] = "0" * 64
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    assert reproduce.main([str(tmp_path / "bad.json"), "--workdir", str(tmp_path / "w2")]) == 1
    assert "DIFFERENT" in capsys.readouterr().out


def test_replay_plan_moves_outputs_and_refuses_foreign_inits(tmp_path):
    runs, final = reproduce.plan(
        "python -m ccp_train.mocc train --out /tmp/x/a --seed 4 && "
        "python -m ccp_train.mocc train --out models --init /tmp/x/a/mocc.pt", tmp_path)
    assert runs[0] == ["-m", "ccp_train.mocc", "train", "--out", str(tmp_path / "part1"),
                       "--seed", "4"]
    assert runs[1][runs[1].index("--init") + 1] == str(tmp_path / "part1" / "mocc.pt")
    assert final == tmp_path / "part2"
    with pytest.raises(reproduce.ReplayError, match="earlier part"):
        reproduce.plan("python -m ccp_train.mocc train --init /elsewhere/mocc.pt", tmp_path)
    with pytest.raises(reproduce.ReplayError, match="not `python -m ccp_train"):
        reproduce.plan("rm -rf / && python -m ccp_train.mocc train", tmp_path)


def test_a_pre_corpus_card_replays_with_its_traces(tmp_path):
    """Cards trained before the trace corpus (no ``trace_source``) ran the then-default
    ``--traces``: the replay names them (and turns the corpus off), so the same episodes are
    drawn; a part naming ``--traces`` and a card recording its source are left alone."""
    from ccp_train import owl
    from ccp_train.rl.spec import Knobs

    root = Path(__file__).resolve().parents[2]
    legacy = ["--traces", "datapath/sim/scenarios/traces/ATT-LTE-driving-2016.down,"
              "datapath/sim/scenarios/traces/TMobile-UMTS-driving.down", "--trace-kinds", ""]
    shipped = {a: json.loads((root / f"models/{a}.json").read_text()) for a in ("mocc", "owl")}
    # MOCC's chain (issue 40) ends in a corpus part: its pre-corpus parts name their traces
    mocc_card = shipped.pop("mocc")
    ranges = mocc_card["training"]["scenario_ranges"]
    assert ranges["trace_source"]["source"] == "corpus train split"
    runs, _ = reproduce.plan(mocc_card["training"]["command"], tmp_path, ranges)
    assert len(runs) == 5
    assert all(r[-4:] == legacy and r.count("--traces") == 1 for r in runs[:4])
    assert "--traces" not in runs[4] and "--trace-kinds" not in runs[4]
    for alg, c in shipped.items():
        ranges = c["training"]["scenario_ranges"]
        assert "trace_source" not in ranges  # trained before the corpus
        runs, _ = reproduce.plan(c["training"]["command"], tmp_path, ranges)
        assert runs and all(r[-4:] == legacy for r in runs)
        # the replayed flags give the card's ranges back (trace source: the two files)
        parsed = (mocc.build_parser() if alg == "mocc" else owl.parser()).parse_args(runs[-1][2:])
        desc = (mocc.episodes_from_args(parsed, Knobs("mocc")).ranges.describe()
                if alg == "mocc" else owl.episodes_from_args(parsed, tmp_path).describe())
        assert desc["trace_source"]["source"] == "files"
        assert {k: v for k, v in desc.items() if k in ranges} == \
            {k: v for k, v in ranges.items() if k in desc}
    ranges = shipped["owl"]["training"]["scenario_ranges"]
    # a part that names --traces keeps them; without the card's ranges nothing is added
    runs, _ = reproduce.plan("python -m ccp_train.owl train --traces a.down --seed 2", tmp_path,
                             ranges)
    assert runs[0].count("--traces") == 1 and "--trace-kinds" not in runs[0]
    assert "--traces" not in reproduce.plan("python -m ccp_train.owl train", tmp_path)[0][0]
    # a card that records its trace source, or has no scenario ranges (nuwa hold): as written
    for other in ({**ranges, "trace_source": {"source": "corpus train split"}}, {}, None):
        assert "--traces" not in reproduce.plan("python -m ccp_train.owl train", tmp_path,
                                                other)[0][0]
    with pytest.raises(reproduce.ReplayError, match="gone.down"):
        reproduce.plan("python -m ccp_train.owl train", tmp_path,
                       {**ranges, "traces": ["gone.down"]})


def test_seed_choice_rule_and_command_rewrite():
    from ccp_train import seeds

    assert seeds.with_seed("python -m ccp_train.mocc train --seed 4 --out a && "
                           "python -m ccp_train.mocc train --init a/mocc.pt", 7) == (
        "python -m ccp_train.mocc train --seed 7 --out a && "
        "python -m ccp_train.mocc train --init a/mocc.pt --seed 7")
    assert seeds.choose({1: 0.5, 2: 0.9, 3: 0.7}) == 3  # the median
    assert seeds.choose({1: 0.5, 2: 0.9, 3: 0.7, 4: 0.1}) == 1  # lower median of four
    assert seeds.choose({5: 0.7, 2: 0.7, 9: 0.1}) == 2  # tie: the smaller seed
    recs = [{"split": "tune", "metrics": {"utility_by_w": {"0.4,0.5,0.1": 0.6}}},
            {"split": "tune", "metrics": {"utility_by_w": {"1,0,0": 0.8, "0,1,0": 0.4}}},
            {"split": "tune", "error": "x"}]
    assert seeds.tune_score(recs) == pytest.approx(0.6)


def test_seed_spread_end_to_end_on_a_tiny_recipe(tmp_path):
    from ccp_train import seeds

    base = tmp_path / "base"
    mocc.main([*TINY, "--seed", "3", "--out", str(base)])
    out = tmp_path / "spread"
    assert seeds.main([str(base / "mocc.json"), "--seeds", "1,2,3", "--out", str(out),
                       "--harness-seeds", "1", "--suites", "links", "--ship",
                       "--jobs", "2"]) == 0
    rep = json.loads((out / "spread.json").read_text())
    per = {int(k): v for k, v in rep["per_seed"].items()}
    assert set(per) == {1, 2, 3} and all(v["failed_runs"] == 0 for v in per.values())
    assert len({v["sha256"] for v in per.values()}) == 3  # three different draws
    assert rep["chosen_seed"] == seeds.choose({s: v["tune_score"] for s, v in per.items()})
    shipped = card(base)
    assert shipped["sha256"] == per[rep["chosen_seed"]]["sha256"]
    assert shipped["evaluation"]["seeds"]["chosen_seed"] == rep["chosen_seed"]
    assert "--seed" in shipped["training"]["command"]
    assert (out / "spread.md").read_text().count("(chosen)") == 1
    assert set(shipped["evaluation"]["seeds"]["per_seed"]) == {"1", "2", "3"}
    # shipping again from the report alone gives the same model and record
    (base / "mocc.json").unlink()
    assert seeds.main([str(base / "mocc.json"), "--out", str(out), "--ship-only"]) == 0
    assert card(base)["sha256"] == shipped["sha256"]
    assert card(base)["evaluation"]["seeds"] == shipped["evaluation"]["seeds"]


def test_chained_curves_continue_the_count_of_a_trainer_that_restarts_it(tmp_path):
    from ccp_train.rl import curves

    prior = tmp_path / "prior.csv"
    curves.write_csv([{"iteration": i, "reward": 0.1 * i} for i in (1, 2, 3)], prior)
    recs = curves.chained([{"iteration": 1, "reward": 5.0}, {"iteration": 2}], prior)
    assert [(r["part"], r["iteration"]) for r in recs] == [(1, 1), (1, 2), (1, 3), (2, 4), (2, 5)]
    assert recs[3]["reward"] == 5.0
    # no prior (the chain's first part): part 1, counts untouched
    assert curves.chained([{"iteration": 7}], None) == [{"iteration": 7, "part": 1}]


def test_only_the_exporters_version_string_may_differ(tmp_path):
    # the shipped MOCC was trained under torch 2.11 and replays here under another torch to
    # the same graph and weights; only ONNX's producer_version (the torch version) differs
    import onnx
    from onnx import TensorProto, helper

    from ccp_train.card import sha256_file
    from ccp_train.reproduce import same_but_producer

    def model(version: str, w: float) -> onnx.ModelProto:
        x = helper.make_tensor_value_info("obs", TensorProto.FLOAT, [1])
        y = helper.make_tensor_value_info("action", TensorProto.FLOAT, [1])
        k = helper.make_tensor("k", TensorProto.FLOAT, [1], [w])
        g = helper.make_graph([helper.make_node("Mul", ["obs", "k"], ["action"])], "g", [x],
                              [y], [k])
        return helper.make_model(g, producer_name="pytorch", producer_version=version)

    shipped, same, other = tmp_path / "m.onnx", tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(model("2.11.0", 0.5), shipped)
    onnx.save(model("2.15.0", 0.5), same)
    onnx.save(model("2.15.0", 0.25), other)
    want = sha256_file(shipped)
    assert sha256_file(same) != want
    assert same_but_producer(same, shipped, want) == "card: pytorch 2.11.0, here: 2.15.0"
    assert same_but_producer(other, shipped, want) is None  # a weight differs
    assert same_but_producer(same, shipped, "0" * 64) is None  # not the card's file
