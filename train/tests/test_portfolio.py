"""The preference portfolio: the table from tune records (means by hand, the tune-only and
completeness rules), and the agent's choice for `auto` flows equal to the Python one."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from ccp_train.harness.runner import ROOT
from ccp_train.portfolio import (
    PortfolioError,
    accept,
    candidates,
    choose,
    compare,
    table,
    table_algs,
)

AGENT = ROOT / "target" / "release" / "ccp-agent"

# two tune scenarios of ops/eval/preferences.toml: a constant link and a trace
LINK, TRACE = "60M-50ms-1bdp", "att-lte-60ms-2bdp"


def rec(alg: str, scen: str, seed: int, o: list[float], w: list[float] | None = None,
        split: str = "tune") -> dict:
    return {"run_id": f"{alg}-{scen}-{seed}-{w}", "suite": "preferences", "scenario": scen,
            "split": split, "alg": alg, "seed": seed, "w": w, "metrics": {"objectives": o}}


def records() -> list[dict]:
    out = []
    for seed, d in ((1, 0.0), (2, 0.1)):
        out += [rec("cubic", LINK, seed, [0.8 + d, 0.6, 1.0]),
                rec("cubic", TRACE, seed, [0.6 + d, 0.4, 0.9]),
                rec("mocc", LINK, seed, [0.5, 0.9, 1.0], w=[0.1, 0.8, 0.1]),
                rec("mocc", TRACE, seed, [0.3, 0.7, 1.0], w=[0.1, 0.8, 0.1]),
                rec("mocc", LINK, seed, [0.9, 0.5, 1.0], w=[0.8, 0.1, 0.1]),
                rec("mocc", TRACE, seed, [0.7, 0.3, 1.0], w=[0.8, 0.1, 0.1])]
    return out


def test_corpus_runs_are_the_whole_cellular_class_and_stay_out_of_the_default() -> None:
    from ccp_train.harness.matrix import load_matrix

    corpus = [s for s in load_matrix(suites=["corpus"]) if s.split == "tune"][:2]
    recs = records()
    for seed in (1, 2):
        for i, sc in enumerate(corpus):
            for alg, w, o in (("cubic", None, [0.5, 0.5, 0.5]),
                              ("mocc", [0.1, 0.8, 0.1], [0.2 + 0.1 * i, 0.9, 1.0]),
                              ("mocc", [0.8, 0.1, 0.1], [0.6, 0.6, 0.9])):
                r = rec(alg, sc.name, seed, o, w=w)
                r["suite"] = "corpus"
                recs.append(r)
    t = table(recs)
    cell = {(e["alg"], tuple(e["w"] or ())): e for e in t["classes"]["cellular"]}
    # the corpus alone: not the preferences suite's trace (0.6-0.7 throughput)
    assert cell[("cubic", ())]["o"] == pytest.approx([0.5, 0.5, 0.5])
    assert cell[("mocc", (0.1, 0.8, 0.1))]["o"] == pytest.approx([0.25, 0.9, 1.0])
    # the default class and the links class are the preferences suite's, as before
    plain = table(records())
    assert t["classes"]["all"] == plain["classes"]["all"]
    assert t["classes"]["links"] == plain["classes"]["links"]
    # a gap in the corpus runs is an error like any other
    with pytest.raises(PortfolioError, match="no run of"):
        table(recs[:-1])


def test_the_candidates_are_the_registrys_and_cover_the_shipped_table(tmp_path: Path) -> None:
    from ccp_train import _native
    from ccp_train.harness.matrix import default_algs

    kinds = dict(_native.algorithms())
    # no models: the built-in algorithms, in registry order
    assert candidates(tmp_path) == tuple(n for n, k in _native.algorithms() if k == "builtin")
    # a learned one joins with its model
    learned = _native.learned_algorithms()[0]
    (tmp_path / f"{learned}.onnx").write_bytes(b"")
    assert learned in candidates(tmp_path)
    assert candidates() == default_algs()
    # the shipped table was built from registered algorithms that still run without a flag
    shipped = json.loads((ROOT / "models" / "portfolio.json").read_text())
    assert table_algs(shipped) == ("bbr", "cubic", "iris", "mocc", "owl", "reno")
    assert set(table_algs(shipped)) <= set(candidates()), kinds


def test_the_table_holds_mean_objectives_per_class() -> None:
    t = table(records())
    assert t["version"] == 1 and t["default_class"] == "all"
    cubic = next(e for e in t["classes"]["all"] if e["alg"] == "cubic")
    # per seed the mean over the two scenarios (0.7, 0.8 throughput), then over seeds
    assert cubic["w"] is None and cubic["runs"] == 4
    assert cubic["o"] == pytest.approx([0.75, 0.5, 0.95])
    assert next(e for e in t["classes"]["links"] if e["alg"] == "cubic")["o"] == \
        pytest.approx([0.85, 0.6, 1.0])
    assert next(e for e in t["classes"]["cellular"] if e["alg"] == "cubic")["o"] == \
        pytest.approx([0.65, 0.4, 0.9])
    moccs = [e for e in t["classes"]["all"] if e["alg"] == "mocc"]
    assert sorted(e["w"] for e in moccs) == [[0.1, 0.8, 0.1], [0.8, 0.1, 0.1]]


def test_choices_score_w_against_the_nearest_landmark() -> None:
    t = table(records())
    # latency-heavy: mocc@(0.1,0.8,0.1) 0.04+0.64+0.1 = 0.78 beats cubic 0.075+0.4+0.095 = 0.57
    assert choose(t, [0.1, 0.8, 0.1]) == ("mocc", pytest.approx(0.78))
    # throughput-heavy: mocc's throughput landmark 0.64+0.04+0.1 = 0.78 vs cubic 0.745
    assert choose(t, [0.8, 0.1, 0.1])[0] == "mocc"
    # loss-heavy: nearest mocc landmark is a tie in L1 (1.4 each): the first kept; cubic
    # 0.075+0.05+0.76 = 0.885 vs mocc@(0.1,0.8,0.1) 0.04+0.08+0.8 = 0.92
    assert choose(t, [0.1, 0.1, 0.8])[0] == "mocc"
    assert choose(t, [0.1, 0.8, 0.1], "cellular")[0] == "mocc"


def test_choices_are_the_agents_own_rule() -> None:
    """One implementation: the choice comes from the agent's code through the bindings, so a
    table the agent would refuse is refused here too, with its reason."""
    t = hand_table()
    assert choose(t, [0.1, 0.8, 0.1])[0] == "mocc"
    with pytest.raises(PortfolioError, match="version 2"):
        choose(dict(t, version=2), [0.1, 0.8, 0.1])
    with pytest.raises(PortfolioError, match="entries"):
        choose(dict(t, classes={"all": []}), [0.1, 0.8, 0.1])


def test_the_table_refuses_eval_incomplete_auto_and_failed_runs() -> None:
    with pytest.raises(PortfolioError, match="tune runs only"):
        table(records() + [rec("bbr", "35M-120ms-2bdp", 1, [1, 1, 1], split="eval")])
    with pytest.raises(PortfolioError, match="no run of att-lte-60ms-2bdp seed 2"):
        table([r for r in records() if not (r["alg"] == "cubic" and r["seed"] == 2
                                              and r["scenario"] == TRACE)])
    with pytest.raises(PortfolioError, match="`auto` runs"):
        table(records() + [rec("auto", LINK, 1, [1, 1, 1], w=[0.8, 0.1, 0.1])])
    bad = records()
    bad[0] = dict(bad[0], error="boom")
    with pytest.raises(PortfolioError, match="failed run"):
        table(bad)
    with pytest.raises(PortfolioError, match="no 'preferences' runs"):
        table([dict(r, suite="links") for r in records()])


def hand_table() -> dict:
    """A table whose choices differ per preference (bbr, iris, reno, mocc)."""
    return {"version": 1, "default_class": "all", "objectives": ["throughput", "latency", "loss"],
            "classes": {"all": [
                {"alg": "bbr", "w": None, "o": [0.95, 0.5, 0.90]},
                {"alg": "iris", "w": None, "o": [0.70, 0.8, 0.97]},
                {"alg": "reno", "w": None, "o": [0.60, 0.6, 1.00]},
                {"alg": "mocc", "w": [0.1, 0.8, 0.1], "o": [0.50, 0.95, 0.98]},
                {"alg": "mocc", "w": [0.8, 0.1, 0.1], "o": [0.90, 0.40, 0.90]}]}}


@pytest.mark.skipif(not AGENT.is_file(), reason="needs target/release/ccp-agent")
def test_the_agent_gives_auto_flows_the_tables_choice(tmp_path: Path) -> None:
    models = tmp_path / "models"
    shutil.copytree(ROOT / "models", models)
    tab = hand_table()
    (models / "portfolio.json").write_text(json.dumps(tab))
    ws = [[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8], [0.4, 0.5, 0.1], [0.6, 0.2, 0.2]]
    want = [choose(tab, w)[0] for w in ws]
    assert len(set(want)) >= 3, want  # the table is built to make different choices
    flows = "".join(f'[[flow]]\nrtt_ms = 40\nalg = "{"ccp_auto" if i % 2 else "auto"}"\n'
                    f"w = {w}\n" for i, w in enumerate(ws))
    scen = tmp_path / "s.toml"
    scen.write_text(f"duration_s = 2\nseed = 1\n[link]\nrate_mbps = 20\nbuffer_bdp = 1.0\n{flows}")
    log = tmp_path / "flows.jsonl"
    p = subprocess.run([str(AGENT), "--sim", str(scen), "--json", "--models", str(models),
                        "--flow-log", str(log)], capture_output=True, text=True, check=True)
    got = [f["alg"] for f in json.loads(p.stdout)["flows"]]
    assert got == want
    creates = [json.loads(x) for x in log.read_text().splitlines() if '"create"' in x]
    assert sorted(c["alg"] for c in creates) == sorted(want)
    for c in creates:
        # the flow log says why: the score of the chosen entry and the runner-up
        w = c["w"]
        assert c["choice"]["score"] == pytest.approx(choose(tab, w)[1])
        assert c["choice"]["runner_up"]["score"] <= c["choice"]["score"]
    # without a table an auto flow runs --alg; `--alg auto` without one is refused
    (models / "portfolio.json").unlink()
    p = subprocess.run([str(AGENT), "--sim", str(scen), "--json", "--models", str(models),
                        "--alg", "reno"], capture_output=True, text=True, check=True)
    assert {f["alg"] for f in json.loads(p.stdout)["flows"]} == {"reno"}
    p = subprocess.run([str(AGENT), "--sim", str(scen), "--models", str(models), "--alg", "auto"],
                       capture_output=True, text=True, check=False)
    assert p.returncode == 2 and "needs a portfolio table" in p.stderr
    # a bad table is refused at start-up, naming the file and the fix
    (models / "portfolio.json").write_text('{"version": 1, "default_class": "x", "classes": {}}')
    p = subprocess.run([str(AGENT), "--sim", str(scen), "--models", str(models)],
                       capture_output=True, text=True, check=False)
    assert p.returncode == 2 and "portfolio.json" in p.stderr and "ccp_train.portfolio" in p.stderr


def test_compare_pairs_auto_with_each_fixed_algorithm_by_seed() -> None:
    def r(alg: str, seed: int, ubw: dict, w: list[float] | None = None) -> dict:
        return {"suite": "preferences", "alg": alg, "seed": seed, "w": w,
                "metrics": {"utility_by_w": ubw}}

    recs = []
    for s, d in ((1, 0.0), (2, 0.2)):
        recs.append(r("bbr", s, {"0.8,0.1,0.1": 0.9, "0.1,0.8,0.1": 0.5 + d}))
        recs.append(r("auto", s, {"0.8,0.1,0.1": 0.9}, w=[0.8, 0.1, 0.1]))
        recs.append(r("auto", s, {"0.1,0.8,0.1": 0.8}, w=[0.1, 0.8, 0.1]))
    out = compare(recs)
    # seed 1: auto 0.85 vs bbr 0.70; seed 2: 0.85 vs 0.80
    assert "auto - bbr: +0.1000 (per seed +0.0500 to +0.1500, 2/2 seeds above 0)" in out
    with pytest.raises(PortfolioError, match="every seed"):
        compare(recs[:-1])


def test_accept_counts_cases_where_auto_is_at_least_cubic_and_bbr() -> None:
    w1, w2 = [0.8, 0.1, 0.1], [0.1, 0.8, 0.1]

    def r(alg: str, scen: str, o: list[float], w: list[float] | None = None) -> dict:
        d = rec(alg, scen, 1, o, w=w, split="eval")
        d["suite"] = "corpus"
        return d

    recs = []
    for scen, (cub, bbr) in {"cellular-a": ([0.8, 0.5, 1.0], [0.9, 0.3, 0.9]),
                             "5g-b": ([0.6, 0.6, 1.0], [0.7, 0.4, 1.0])}.items():
        recs += [r("cubic", scen, cub), r("bbr", scen, bbr),
                 # auto is bbr for throughput and a little below cubic for latency
                 r("auto", scen, bbr, w1), r("auto", scen, [0.5, 0.55, 1.0], w2)]
    out = accept(recs)
    lines = out.splitlines()
    # w1: auto = bbr on both scenarios (0.84, 0.70): equal to bbr, so not above every one
    assert lines[2].split() == ["0.8,0.1,0.1", "0.770", "0.770", "0.715", "no"], out
    # w2: auto 0.59 on both, cubic 0.58 and 0.64, bbr 0.42 and 0.49
    assert lines[1].split() == ["0.1,0.8,0.1", "0.590", "0.455", "0.610", "no"], out
    assert "auto >= cubic in 3/4 cases (75.0%), >= bbr in 4/4" in out, out
    assert "5g auto" in out and "cellular auto" in out, out
    with pytest.raises(PortfolioError, match="missing runs"):
        accept(recs[:-1])
    # a first-choice column whose algorithm did not run is named, not a crash
    table = {"version": 1, "default_class": "all",
             "classes": {"all": [{"alg": "reno", "w": None, "o": [0.9, 0.9, 0.9]}]}}
    with pytest.raises(PortfolioError, match="needs reno's run .*--no-first"):
        accept(recs, table)
