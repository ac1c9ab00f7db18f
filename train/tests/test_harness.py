"""The evaluation harness: metrics against hand-computed series, the matrix files and the
tune/eval split, seeded run construction, and a tiny matrix end to end through the agent."""

import hashlib
import json
import math
import shutil
from pathlib import Path

import pytest

from ccp_train.harness import MatrixError, evaluate, load_matrix, select
from ccp_train.harness.matrix import SUITES, load_suite
from ccp_train.harness.metrics import (
    Series,
    capacity_at,
    convergence_time,
    jain,
    jain_bins,
    mean_ci95,
    percentile,
    run_metrics,
    utility,
)
from ccp_train.harness.runner import (
    ROOT,
    RunSpec,
    base_alg,
    check_alg_variant,
    rotated_trace,
    scenario_toml,
)

AGENT = ROOT / "target" / "release" / "ccp-agent"


def flat(t0: float, t1: float, mbps: float) -> tuple[list[float], list[float]]:
    n = round((t1 - t0) / 0.1)
    return [round(t0 + 0.1 * (i + 1), 6) for i in range(n)], [mbps] * n


# --- metrics ---------------------------------------------------------------------------


def test_jain_and_confidence_interval_by_hand():
    assert jain([5, 5, 5]) == 1.0
    assert jain([1, 0]) == pytest.approx(0.5)
    assert jain([3, 1]) == pytest.approx(16 / 20)
    assert jain([]) is None
    m, ci = mean_ci95([1.0, 2.0, 3.0])
    # sd = 1, t(0.975, 2) = 4.303: half-width 4.303 / sqrt(3)
    assert m == 2.0 and ci == pytest.approx(4.303 / math.sqrt(3))
    assert math.isnan(mean_ci95([4.0])[1]) and mean_ci95([4.0])[0] == 4.0
    assert percentile([1, 2, 3, 4, 5], 5) == pytest.approx(1.2)


def test_jain_bins_of_two_flows_by_hand():
    # flow a: 10 Mbit/s throughout; flow b: 0 for the first second, then 10
    ta, xa = flat(0, 3, 10.0)
    tb, xb = flat(0, 3, 10.0)
    xb = [0.0 if t <= 1.0 + 1e-9 else 10.0 for t in tb]
    jb = jain_bins([Series(ta, xa), Series(tb, xb)], 0.0, 3.0)
    # six 500 ms bins: two with (10, 0) -> 0.5, four equal -> 1
    assert jb == pytest.approx([0.5, 0.5, 1, 1, 1, 1])


def test_convergence_needs_five_seconds_inside_the_band():
    # fair share 10: the flow is at 5 until 4 s, at 9 (inside +-20 %) after
    t, x = flat(0, 20, 0.0)
    x = [5.0 if ti <= 4.0 + 1e-9 else 9.0 for ti in t]
    c = convergence_time([Series(t, x)], lambda _t: 10.0, 0.0, 20.0)
    assert c == pytest.approx(4.0)
    # a dip at 7 s restarts the hold: converged from 7.5 s
    x2 = [3.0 if 7.0 < ti <= 7.5 + 1e-9 else v for ti, v in zip(t, x, strict=True)]
    assert convergence_time([Series(t, x2)], lambda _t: 10.0, 0.0, 20.0) == pytest.approx(7.5)
    # never within 5 s of the end
    x3 = [5.0 if ti <= 16.0 + 1e-9 else 10.0 for ti in t]
    assert convergence_time([Series(t, x3)], lambda _t: 10.0, 0.0, 20.0) is None


def test_utility_is_mocc_eq2_with_true_capacity_and_base_rtt():
    # thr/C = 0.8, base/mean = 40/50, loss 1 %
    u = utility([0.5, 0.3, 0.2], 0.8, 40.0, 50.0, 0.01)
    assert u == pytest.approx(0.5 * 0.8 + 0.3 * 0.8 + 0.2 * 0.99)
    assert utility([0, 1, 0], 0.5, 40.0, float("nan"), 0.0) == 0.0


def test_owl_utility_is_eq7_with_the_sending_rate_in_capacity_units():
    from ccp_train.harness.metrics import owl_utility

    # utilization 0.8 at 1 % loss: λ = 0.8/0.99; RTT 50 over a 40 ms base
    lam = 0.8 / 0.99
    assert owl_utility(0.8, 0.01, 40.0, 50.0) == pytest.approx(
        lam - 0.5 * lam / 0.99 - 0.5 * math.log10(50 / 40))
    # one sender on a clean link: the delay term decides, a full queue costs
    assert owl_utility(1.0, 0.0, 40.0, 40.0) == pytest.approx(0.5)
    assert owl_utility(1.0, 0.0, 40.0, 80.0) < owl_utility(0.9, 0.0, 40.0, 42.0)
    # loss is bounded, no RTT sample is no figure
    assert math.isfinite(owl_utility(1.0, 1.0, 40.0, 50.0))
    assert math.isnan(owl_utility(1.0, 0.0, 40.0, float("nan")))


def test_capacity_schedule():
    link = {"rate_mbps": 50, "rate_schedule": [{"at_s": 10, "rate_mbps": 25}]}
    assert capacity_at(link, 9.99) == 50 and capacity_at(link, 10) == 25
    assert capacity_at({"trace": "x"}, 1.0) is None


def _flow(i: int, thr: float, **kw: float) -> dict:
    f = {"id": i, "alg": "cubic", "w": [0.4, 0.5, 0.1], "rtt_base_ms": 40.0, "start_s": 0.0,
         "stop_s": 20.0, "throughput_mbps": thr, "utilization": thr / 20.0,
         "rtt_p50_ms": 50.0, "rtt_p95_ms": 60.0, "rtt_mean_ms": 50.0,
         "queue_delay_p50_ms": 10.0, "queue_delay_p95_ms": 20.0, "queue_delay_mean_ms": 10.0,
         "loss_rate": 0.01, "packets_sent": 1000}
    f.update(kw)
    return f


def test_run_metrics_of_a_friendliness_run_by_hand():
    summary = {"utilization": 0.9, "flows": [_flow(0, 6.0), _flow(1, 12.0, loss_rate=0.0)]}
    t, x = flat(0, 20, 6.0)
    ser = {0: Series(t, x), 1: Series(t, [12.0] * len(t))}
    m = run_metrics(summary, ser, {"rate_mbps": 20}, [0], 20.0)
    assert m["friendliness_ratio"] == pytest.approx(0.5)
    assert m["share"] == pytest.approx(1 / 3)
    assert m["utilization"] == pytest.approx(0.3)  # the flow under test only
    assert m["loss_rate"] == pytest.approx(0.01)
    assert m["jain_mean"] == pytest.approx((18**2) / (2 * (36 + 144)))
    assert m["converged"] is False  # 6 and 12 vs a fair share of 10: never inside +-20 %
    assert "owl_nash_distance" not in m  # a competitor of another protocol: no eq. 9
    # the flow's own w, then a list of preferences
    assert m["utility_by_w"] == {"0.4,0.5,0.1": pytest.approx(0.4 * 0.3 + 0.5 * 0.8 + 0.1 * 0.99)}
    lam = 0.3 / 0.99  # eq. 7 of the flow under test
    assert m["owl_utility"] == pytest.approx(lam - 0.5 * lam / 0.99 - 0.5 * math.log10(50 / 40))
    m2 = run_metrics(summary, ser, {"rate_mbps": 20}, [0], 20.0, prefs=[(1, 0, 0), (0, 0, 1)])
    assert m2["utility_by_w"] == {"1,0,0": pytest.approx(0.3), "0,0,1": pytest.approx(0.99)}


def test_owl_nash_distance_is_eq9_by_hand():
    from ccp_train.harness.metrics import owl_nash_distance, owl_nash_rate

    # eq. 9 with n senders and every δ = 0.5: λ* = C/(δ(n + 1)); one sender gets C
    assert owl_nash_rate(1) == pytest.approx(1.0)
    assert owl_nash_rate(2) == pytest.approx(2 / 3) and owl_nash_rate(3) == pytest.approx(0.5)
    # sum of eq. 9's rates solves 2λ_i + Σ_{j≠i} λ_j = C/δ for n = 4
    n, lam = 4, owl_nash_rate(4)
    assert 2 * lam + (n - 1) * lam == pytest.approx(1 / 0.5)
    assert owl_nash_distance([2 / 3, 2 / 3]) == pytest.approx(0.0)
    assert owl_nash_distance([1 / 3, 1.0]) == pytest.approx(0.5)
    # in run_metrics: two flows each delivering 8 of 20 Mbit/s at 20 % loss send 0.5 C each
    summary = {"utilization": 0.8, "flows": [_flow(0, 8.0, loss_rate=0.2),
                                             _flow(1, 8.0, loss_rate=0.2, start_s=2.0)]}
    t, x = flat(0, 20, 8.0)
    m = run_metrics(summary, {0: Series(t, x), 1: Series(t, x)}, {"rate_mbps": 20}, [0, 1], 20.0)
    assert m["owl_nash_distance"] == pytest.approx(abs(0.5 - 2 / 3) / (2 / 3))
    # a trace link has no capacity to measure against
    m2 = run_metrics(summary, {0: Series(t, x), 1: Series(t, x)}, {"trace": "x"}, [0, 1], 20.0)
    assert "owl_nash_distance" not in m2


def test_step_convergence_per_step():
    # capacity 20 -> 10 at 10 s; the flow follows at 12 s
    link = {"rate_mbps": 20, "rate_schedule": [{"at_s": 10, "rate_mbps": 10}]}
    t, _ = flat(0, 30, 0)
    x = [20.0 if ti <= 10 + 1e-9 else (20.0 if ti <= 12 + 1e-9 else 10.0) for ti in t]
    summary = {"utilization": 0.9, "flows": [_flow(0, 12.0, stop_s=30.0)]}
    m = run_metrics(summary, {0: Series(t, x)}, link, [0], 30.0)
    assert m["step_convergence_s"] == pytest.approx([2.0])  # one step, at 10 s
    assert m["convergence_s"] == pytest.approx(2.0) and m["converged"]


# --- matrix and split --------------------------------------------------------------------


def test_shipped_matrix_has_every_suite_with_tune_eval_and_quick():
    scen = load_matrix()
    for s in SUITES:
        mine = [x for x in scen if x.suite == s]
        assert {x.split for x in mine} == {"tune", "eval"}, s
        assert select(mine, "eval", quick=True), f"{s} has no quick eval scenario"
    keys = [x.key for x in scen]
    assert len(keys) == len(set(keys))
    # the cellular suite covers every trace shipped, each at 2 RTTs x 2 buffers
    traces = [p for p in (ROOT / "datapath/sim/scenarios/traces").iterdir()
              if p.is_file() and p.name != "README"]
    assert len([x for x in scen if x.suite == "cellular"]) == 4 * len(traces)


def test_selection_refuses_eval(tmp_path):
    scen = load_matrix(suites=["links"])
    with pytest.raises(MatrixError, match="tune"):
        select(scen, "eval", purpose="selection")
    assert all(s.split == "tune" for s in select(scen, "tune", purpose="selection"))
    # the library entry point defaults to selection: eval is refused before anything runs
    with pytest.raises(MatrixError, match="tune"):
        evaluate(tmp_path / "x", split="eval", algs=["cubic"], seeds=[1], suites=["links"])
    assert not (tmp_path / "x").exists()


def write(p: Path, text: str) -> Path:
    p.write_text(text)
    return p


def test_bad_suite_files_name_the_problem(tmp_path):
    good = ('suite = "links"\ndescription = "x"\nduration_s = 5\n[[scenario]]\nname = "a"\n'
            'split = "eval"\nlink = { rate_mbps = 10 }\nflows = [{ rtt_ms = 20 }]\n')
    assert len(load_suite(write(tmp_path / "links.toml", good))) == 1
    cases = {
        'split = "eval"': ('split = "test"', "tune"),
        "rate_mbps = 10": ("rat_mbps = 10", "rat_mbps"),
        "{ rtt_ms = 20 }": ('{ rtt_ms = 20, alg = "cubic" }', "under test"),
        "rtt_ms = 20": ("rtt_ms = -1", "rtt_ms"),
        'name = "a"': ('name = "a/b"', "name"),
    }
    for old, (new, needle) in cases.items():
        with pytest.raises(MatrixError, match=needle):
            load_suite(write(tmp_path / "links.toml", good.replace(old, new)))
    with pytest.raises(MatrixError, match="file name"):
        load_suite(write(tmp_path / "links.toml", good.replace('"links"', '"other"')))


def test_cellular_trace_without_split_is_an_error(tmp_path):
    d = tmp_path / "traces"
    d.mkdir()
    (d / "a.down").write_text("1\n2\n")
    (d / "b.down").write_text("1\n")
    cell = write(tmp_path / "cellular.toml",
                 'suite = "cellular"\ndescription = "x"\nduration_s = 5\ntraces_dir = "traces"\n'
                 'rtts_ms = [40]\nbuffers_bdp = [1.0]\n[trace_split]\n"a.down" = "tune"\n')
    with pytest.raises(MatrixError, match="b.down"):
        load_suite(cell)
    # a user's folder: every trace takes --traces-split
    got = load_suite(cell, traces_dir=d, traces_split="tune")
    assert [s.split for s in got] == ["tune", "tune"]


# --- runs --------------------------------------------------------------------------------


def test_rotated_trace_keeps_period_and_opportunities(tmp_path):
    src = write(tmp_path / "t.down", "\n".join(["0", "3", "3", "7", "10"]) + "\n")
    out = rotated_trace(src, 0.35, tmp_path / "cache")
    times = [int(x) for x in out.read_text().split()]
    # starts at the opportunity at 3 ms: (t - 3) mod 10, 0 becomes the period
    assert times == sorted([7, 10, 10, 4, 7])
    assert times[-1] == 10 and len(times) == 5
    assert rotated_trace(src, 0.0, tmp_path / "cache") == src


def test_rotated_log_keeps_its_rates_and_period(tmp_path):
    # 1 s samples, period 4 s: rotating by 0.5 starts at the sample at 2 s
    src = write(tmp_path / "t.tput", "10 1\n11 2\n12 3\n13 4\n")
    out = rotated_trace(src, 0.5, tmp_path / "cache")
    rows = [line.split() for line in out.read_text().splitlines()]
    assert [(float(t), r) for t, r in rows] == [(0.0, "3"), (1.0, "4"), (2.0, "1"), (3.0, "2")]
    assert out.suffix == ".tput"
    assert rotated_trace(src, 0.0, tmp_path / "cache") == src
    # the capacity a closeup draws: 1, 2, 3, 4 Mbit/s a second each, then again
    from ccp_train.harness.closeup import _trace_capacity

    ts, cap = _trace_capacity(src, 5.0, 1.0)
    assert cap == pytest.approx([1.0, 2.0, 3.0, 4.0, 1.0])
    ts, cap = _trace_capacity(src, 1.0, 0.25)
    assert cap == pytest.approx([1.0] * 4)


def test_parallel_runs_share_a_rotated_trace_without_losing_one(tmp_path):
    # --jobs N runs threads of one process: runs of the same recording at the same start
    # wrote one temporary name (the pid's) and all but the first rename failed ("No such
    # file"), which failed runs of the corpus suite at 16 jobs. Each writer now has its own.
    import threading
    from concurrent.futures import ThreadPoolExecutor

    log = write(tmp_path / "t.tput", "".join(f"{i} {1 + i % 7}\n" for i in range(400)))
    down = write(tmp_path / "t.down", "".join(f"{i}\n" for i in range(0, 4000, 3)))
    go = threading.Barrier(16)

    def one(i: int) -> Path:
        go.wait()
        src = log if i % 2 else down
        return rotated_trace(src, 0.25 + 0.5 * (i % 4 >= 2), tmp_path / "cache")

    for _ in range(5):
        with ThreadPoolExecutor(16) as ex:
            outs = list(ex.map(one, range(16)))
        assert len(set(outs)) == 4 and all(o.is_file() for o in outs)
        for o in set(outs):
            o.unlink()
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.endswith(".tmp")]


def test_seeds_change_starts_and_loss_seed_deterministically(tmp_path):
    sc = [s for s in load_matrix(suites=["fairness"]) if s.split == "eval"][0]
    a = scenario_toml(RunSpec(sc, "cubic", 1), tmp_path)
    assert a == scenario_toml(RunSpec(sc, "cubic", 1), tmp_path)
    b = scenario_toml(RunSpec(sc, "cubic", 2), tmp_path)
    assert a != b and "seed = 2" in b
    assert a.count('alg = "cubic"') == 3


def test_rx_suffix_puts_nuwas_law_at_the_receiver_of_the_flows_under_test(tmp_path):
    sc = [s for s in load_matrix(suites=["fairness"]) if s.split == "tune"][0]
    plain = scenario_toml(RunSpec(sc, "nuwa", 1), tmp_path)
    rx = scenario_toml(RunSpec(sc, "nuwa+rx", 1), tmp_path)
    assert "receiver" not in plain and "+rx" not in rx
    # every flow under test gets the receiver, nothing else changes
    assert rx.count('receiver = "nuwa"') == len(sc.test_flows()) >= 1
    assert rx.replace('receiver = "nuwa"\n', "") == plain
    assert base_alg("nuwa+rx") == "nuwa"
    assert RunSpec(sc, "nuwa+rx", 1).run_id.endswith("--nuwa+rx--s1")
    check_alg_variant("nuwa+rx")
    rxk = scenario_toml(RunSpec(sc, "nuwa+rxk", 1), tmp_path)
    assert rxk.replace('receiver = "nuwa_kalman"\n', "") == plain
    assert base_alg("nuwa+rxk") == "nuwa" and base_alg("owl+stats") == "owl"
    with pytest.raises(ValueError, match="only nuwa\\+rx"):
        check_alg_variant("cubic+rx")
    with pytest.raises(ValueError, match="drop the \\+rx suffix"):
        evaluate(tmp_path / "x", split="tune", algs=["cubic+rx"], seeds=[1])


def test_stats_suffix_runs_the_base_algorithm_with_netstats(tmp_path):
    sc = [s for s in load_matrix(suites=["links"]) if s.split == "tune"][0]
    plain = scenario_toml(RunSpec(sc, "owl", 1), tmp_path)
    stats = scenario_toml(RunSpec(sc, "owl+stats", 1), tmp_path)
    assert "[netstats]" not in plain
    assert 'alg = "owl"' in stats and "owl+stats" not in stats
    assert stats.endswith("[netstats]\nperiod_s = 1.0\nknown_share = 1.0\n")
    # the same run otherwise: starts, seed and link
    assert stats.startswith(plain)
    assert RunSpec(sc, "owl+stats", 1).run_id.endswith("--owl+stats--s1")


@pytest.mark.skipif(not AGENT.is_file(), reason="needs target/release/ccp-agent "
                    "(ops/test.sh builds it)")
def test_tiny_matrix_end_to_end(tmp_path):
    m = tmp_path / "matrix"
    m.mkdir()
    write(m / "links.toml",
          'suite = "links"\ndescription = "x"\nduration_s = 6\n'
          '[[scenario]]\nname = "20M-20ms"\nsplit = "tune"\n'
          'link = { rate_mbps = 20, buffer_bdp = 1.0 }\nflows = [{ rtt_ms = 20 }]\n'
          '[[scenario]]\nname = "e"\nsplit = "eval"\n'
          'link = { rate_mbps = 20 }\nflows = [{ rtt_ms = 20 }]\n')
    write(m / "fairness.toml",
          'suite = "fairness"\ndescription = "x"\nduration_s = 12\n'
          '[[scenario]]\nname = "staggered-20M"\nsplit = "tune"\n'
          'link = { rate_mbps = 20, buffer_bdp = 1.0 }\n'
          'flows = [{ rtt_ms = 20 }, { rtt_ms = 20, start_s = 4 }]\n')
    write(m / "friendliness.toml",
          'suite = "friendliness"\ndescription = "x"\nduration_s = 6\n'
          '[[scenario]]\nname = "vs-cubic-20M"\nsplit = "tune"\n'
          'link = { rate_mbps = 20 }\nflows = [{ rtt_ms = 20 }, { rtt_ms = 20, alg = "cubic" }]\n')
    d = tmp_path / "traces"
    d.mkdir()
    shutil.copy(ROOT / "datapath/sim/scenarios/traces/ATT-LTE-driving-2016.down", d)
    write(m / "cellular.toml",
          'suite = "cellular"\ndescription = "x"\nduration_s = 6\ntraces_dir = "../traces"\n'
          'rtts_ms = [40]\nbuffers_bdp = [2.0]\n[trace_split]\n'
          '"ATT-LTE-driving-2016.down" = "tune"\n')
    write(m / "dynamics.toml",
          'suite = "dynamics"\ndescription = "x"\nduration_s = 20\n'
          '[[scenario]]\nname = "steps-20-10"\nsplit = "tune"\n'
          'link = { rate_mbps = 20, rate_schedule = [{ at_s = 8, rate_mbps = 10 }] }\n'
          'flows = [{ rtt_ms = 20 }]\n')
    write(m / "preferences.toml",
          'suite = "preferences"\ndescription = "x"\nduration_s = 6\n'
          'preference_algs = ["reno"]\nprefs = [[0.8, 0.1, 0.1], [0.1, 0.8, 0.1]]\n'
          '[[scenario]]\nname = "p"\nsplit = "tune"\n'
          'link = { rate_mbps = 20 }\nflows = [{ rtt_ms = 20 }]\n')
    # a corpus of two recordings: a throughput log in tune (it runs), one in train (never)
    c = tmp_path / "corpus"
    (c / "x").mkdir(parents=True)
    write(c / "x" / "log.tput", "0 20\n1 10\n2 30\n")
    write(c / "x" / "train.tput", "0 20\n")
    head = ("path,format,source_repo,commit,license,kind,direction,duration_s,mean_mbps,cv,"
            "p5_mbps,p95_mbps,outage_frac,origin_path,note\n")
    write(c / "catalogue.csv", head + "x/log.tput,tput,r,c,MIT,5g,down,3,20,0.4,10,30,0,o,n\n"
          "x/train.tput,tput,r,c,MIT,wifi,down,1,20,0,20,20,0,o,n\n")
    write(c / "split.csv", "path,split\nx/log.tput,tune\nx/train.tput,train\n")
    write(m / "corpus.toml",
          'suite = "corpus"\ndescription = "x"\nduration_s = 6\ncorpus_dir = "../corpus"\n'
          'rtts_ms = [40]\nbuffers_bdp = [1.0]\n')
    out = tmp_path / "out"
    res = evaluate(out, split="tune", algs=["reno", "cubic"], seeds=[1, 2], matrix_dir=m,
                   jobs=2)
    assert not res["failures"], res["failures"]
    lines = (out / "results.jsonl").read_text().splitlines()
    # 6 one-per-alg scenarios x 2 algs x 2 seeds, + preferences: reno per w (2), cubic once
    assert len(lines) == 6 * 2 * 2 + (2 + 1) * 2
    corp = [json.loads(x) for x in lines if json.loads(x)["suite"] == "corpus"]
    assert {r["scenario"] for r in corp} == {"5g-x:log.tput-40ms-1bdp"}
    # the log's 20 Mbit/s mean is carried (utilization against its own capacity)
    assert all(0.5 < r["metrics"]["utilization"] <= 1.0 for r in corp)
    assert "5g util" in (out / "corpus.md").read_text()
    recs = [json.loads(x) for x in lines]
    assert {r["split"] for r in recs} == {"tune"}  # the eval scenario did not run
    for r in recs:
        assert 0.0 < r["metrics"]["utilization"] <= 1.05, r["run_id"]
    fair = [r for r in recs if r["suite"] == "fairness"]
    assert all(0.5 <= r["metrics"]["jain_mean"] <= 1.0 for r in fair)
    # two senders on a rate link: eq. 9's distance is measured (reno is no Owl: not near 0)
    assert all(0.0 <= r["metrics"]["owl_nash_distance"] < 1.0 for r in fair)
    friend = [r for r in recs if r["suite"] == "friendliness" and r["alg"] == "cubic"]
    assert all(0.3 < r["metrics"]["share"] < 0.7 for r in friend)  # cubic vs cubic
    steps = [r for r in recs if r["suite"] == "dynamics"]
    assert all(len(r["metrics"]["step_convergence_s"]) == 1 for r in steps)
    pref_cubic = [r for r in recs if r["suite"] == "preferences" and r["alg"] == "cubic"]
    assert all(len(r["metrics"]["utility_by_w"]) == 2 for r in pref_cubic)
    # seeds differ (start jitter), scenarios are written for replay
    s1, s2 = (r for r in recs if r["run_id"].startswith("links--20M-20ms--reno"))
    assert s1["flows"][0]["start_s"] != s2["flows"][0]["start_s"]
    assert (out / "runs" / f"{s1['run_id']}.toml").is_file()
    csv_head = (out / "summary.csv").read_text().splitlines()
    assert csv_head[0].startswith("suite,scenario,split,alg,w,seeds")
    assert len(csv_head) == 1 + 6 * 2 + 2 + 2  # per (scenario, alg[, w]); cubic's w rows too
    report = (out / "report.md").read_text()
    for suite in ("links", "cellular", "fairness", "friendliness", "dynamics", "preferences"):
        assert f"## {suite}" in report
    assert "± " in report and "**" in report
    # provenance: the commit and the agent binary that ran the sweep (its bytes' hash)
    meta = json.loads((out / "meta.json").read_text())
    agent = Path(meta["agent"])
    assert agent.is_file() and meta["commit"]
    assert meta["agent_sha256"] == hashlib.sha256(agent.read_bytes()).hexdigest()
    for p in res["meta"]["plots"]:
        png = out / p
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    assert {"plots/scatter.png", "plots/jain_cdf.png", "plots/convergence.png",
            "plots/fairness_staggered-20M.png"} <= set(res["meta"]["plots"])
    # a close-up of a trace scenario, with the trace's capacity
    from ccp_train.harness.closeup import closeup

    cell = next(r["scenario"] for r in recs if r["suite"] == "cellular")
    png = closeup(out, cell, tmp_path / "c.png", seed=1)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    with pytest.raises(ValueError, match="no run"):
        closeup(out, cell, tmp_path / "d.png", seed=9)


@pytest.mark.skipif(not AGENT.is_file(), reason="needs target/release/ccp-agent "
                    "(ops/test.sh builds it)")
def test_ray_gives_the_same_results_as_local_threads(tmp_path):
    pytest.importorskip("ray")
    kw = {"split": "tune", "algs": ["cubic"], "seeds": [1, 2], "suites": ["links"],
          "plots": False}
    local = evaluate(tmp_path / "local", jobs=2, **kw)
    ray = evaluate(tmp_path / "ray", ray="local", **kw)
    assert not local["failures"] and not ray["failures"]

    def key(res: dict) -> list:
        return [(r["run_id"], r["metrics"], r["flows"]) for r in res["records"]]
    assert key(local) == key(ray)
    assert (tmp_path / "ray" / "results.jsonl").is_file()
    assert (tmp_path / "ray" / "summary.csv").read_text() == (
        tmp_path / "local" / "summary.csv").read_text()


def test_card_gets_eval_figures_only(tmp_path):
    from ccp_train.harness.cli import write_card_section

    card = tmp_path / "mocc.json"
    card.write_text(json.dumps({"algorithm": "mocc", "evaluation": {"mean_reward": 1.0}}))
    rs = [{"suite": "links", "scenario": sc, "split": "eval", "alg": alg, "seed": seed,
           "w": "", "utilization": u, "queue_delay_p95_ms": 10.0}
          for alg, u0 in (("mocc", 0.8), ("cubic", 0.9))
          for sc in ("a", "b") for seed, u in ((1, u0), (2, u0 + 0.02))]
    meta = {"split": "eval", "algs": ["mocc", "cubic"], "seeds": [1, 2], "runs": 8,
            "failed": 0, "command": "x"}
    write_card_section(card, rs, meta)
    ev = json.loads(card.read_text())["evaluation"]
    assert ev["mean_reward"] == 1.0  # kept
    util = ev["harness"]["figures"]["links"]["utilization"]
    assert util["mean"] == pytest.approx(0.81) and util["seeds"] == 2
    assert ev["harness"]["baselines"]["cubic"]["links"]["utilization"]["mean"] == (
        pytest.approx(0.91))
    assert "with_stats" not in ev["harness"]
    # an Owl sweep with ALG+stats: the card keeps both, the masked figures as its own
    owl = tmp_path / "owl.json"
    owl.write_text(json.dumps({"algorithm": "owl"}))
    rs2 = [dict(r, alg={"mocc": "owl", "cubic": "owl+stats"}[r["alg"]]) for r in rs]
    write_card_section(owl, rs2, dict(meta, algs=["owl", "owl+stats"]))
    h = json.loads(owl.read_text())["evaluation"]["harness"]
    assert h["figures"]["links"]["utilization"]["mean"] == pytest.approx(0.81)
    assert h["with_stats"]["links"]["utilization"]["mean"] == pytest.approx(0.91)
    with pytest.raises(ValueError, match="eval"):
        write_card_section(card, rs, dict(meta, split="tune"))
    with pytest.raises(ValueError, match="--algs"):
        write_card_section(card, rs, dict(meta, algs=["cubic"]))


def test_landmarks_run_preference_algorithms_once_per_w_in_every_suite():
    from ccp_train.harness.cli import parser
    from ccp_train.harness.report import rows
    from ccp_train.harness.runner import expand

    scen = select(load_matrix(suites=["links", "preferences"]), "tune")
    links = [s for s in scen if s.suite == "links"]
    ws = [(0.8, 0.1, 0.1), (0.1, 0.8, 0.1)]
    specs = expand(links, ["mocc", "cubic"], [1], landmarks=ws, w_algs=["mocc"])
    per = {(s.alg, s.w) for s in specs}
    assert per == {("mocc", ws[0]), ("mocc", ws[1]), ("cubic", None)}
    assert len(specs) == len(links) * 3
    assert len({s.run_id for s in specs}) == len(specs)  # no run overwrites another
    # the tables label each landmark's runs apart
    rec = {"suite": "links", "scenario": "x", "split": "tune", "alg": "mocc", "seed": 1,
           "w": [0.8, 0.1, 0.1], "metrics": {"utilization": 0.5}}
    assert rows([rec])[0]["alg"] == "mocc@0.8,0.1,0.1"
    # bad --w values are refused by the command line
    with pytest.raises(SystemExit):
        parser().parse_args(["--out", "x", "--w", "0.5,0.5,0.5"])
    assert parser().parse_args(["--out", "x", "--w", "0.8,0.1,0.1"]).w == [ws[0]]


def test_trace_capacity_by_hand(tmp_path):
    from ccp_train.harness.closeup import _trace_capacity

    # one 1500-byte opportunity per ms, period 10 ms: 12 Mbit/s in every 100 ms bin
    t = tmp_path / "t"
    t.write_text("\n".join(str(i) for i in range(1, 11)) + "\n")
    ts, cap = _trace_capacity(t, 0.5)
    assert ts == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])
    assert cap[1:] == pytest.approx([12.0] * 4)


def test_readme_tables_come_from_a_sweep(tmp_path):
    from ccp_train.harness.readme import ReadmeError, update

    out = tmp_path / "sweep"
    out.mkdir()
    meta = {"split": "eval", "seeds": [1, 2], "runs": 4, "failed": 0, "wall_s": 120,
            "command": "python -m ccp_train.harness --out x"}
    (out / "meta.json").write_text(json.dumps(meta))
    (out / "headline.md").write_text("| alg | x |\n|---|---:|\n| cubic | 1 |\n")
    (out / "corpus.md").write_text("| alg | 5g |\n|---|---:|\n| cubic | 2 |\n")
    readme = ("intro\n<!-- BEGIN harness:headline -->\nold\n<!-- END harness:headline -->\n"
              "mid\n<!-- BEGIN harness:corpus -->\n<!-- END harness:corpus -->\nend\n")
    new = update(readme, out)
    assert "| cubic | 1 |" in new and "| cubic | 2 |" in new and "old" not in new
    assert new.startswith("intro\n") and new.endswith("end\n") and "mid\n" in new
    assert "eval split, seeds [1, 2], 4 runs, 2 min" in new
    assert update(new, out) == new  # idempotent
    with pytest.raises(ReadmeError, match="markers"):
        update("no markers\n", out)
    # the full report and the tables go to docs/eval/ (here: DOCS) by the same command
    from ccp_train.harness.readme import main

    (out / "report.md").write_text("# Evaluation report (eval split)\n")
    (tmp_path / "README.md").write_text(readme)
    docs = tmp_path / "docs"
    docs.mkdir()
    assert main([str(out), str(tmp_path / "README.md"), str(docs)]) == 0
    assert (docs / "report.md").read_text() == "# Evaluation report (eval split)\n"
    assert (docs / "corpus.md").read_text() == (out / "corpus.md").read_text()
    (out / "meta.json").write_text(json.dumps({**meta, "split": "tune"}))
    with pytest.raises(ReadmeError, match="eval split"):
        update(readme, out)
    (docs / "report.md").unlink()
    assert main([str(out), str(tmp_path / "README.md"), str(docs)]) == 2
    assert not (docs / "report.md").exists()
    (out / "meta.json").write_text(json.dumps({**meta, "failed": 3}))
    with pytest.raises(ReadmeError, match="failed"):
        update(readme, out)


def test_default_algorithms_and_receiver_forms_come_from_the_registry(tmp_path):
    from ccp_train import _native
    from ccp_train.harness.matrix import default_algs
    from ccp_train.harness.runner import rx_algs

    kinds = dict(_native.algorithms())
    builtin = tuple(n for n, k in _native.algorithms() if k == "builtin")
    assert {"reno", "cubic", "bbr", "iris"} <= set(builtin)
    assert set(_native.learned_algorithms()) == {n for n, k in kinds.items() if k == "learned"}
    # a learned algorithm runs by default exactly when it has a model
    assert default_algs(tmp_path) == builtin
    (tmp_path / "nuwa.onnx").write_bytes(b"")
    assert default_algs(tmp_path) == tuple(n for n, k in _native.algorithms()
                                           if k == "builtin" or n == "nuwa")
    shipped = {p.stem for p in (ROOT / "models").glob("*.onnx")}
    assert set(default_algs()) == set(builtin) | shipped
    assert rx_algs() == ("nuwa",)
    assert {rx for _, rx in _native.receiver_forms()} == {"nuwa", "nuwa_kalman"}


def test_preference_algorithms_come_from_the_registry(tmp_path: Path) -> None:
    """Without a `preference_algs` key, the algorithms that run once per `w` are the learned
    ones whose observation holds `w` (the registry's spec layout) and auto; a listed key wins."""
    from ccp_train import _native
    from ccp_train.harness.runner import preference_algs

    takes_w = [a for a in _native.learned_algorithms() if "w" in _native.spec(a)["layout"]]
    assert "mocc" in takes_w and "owl" not in takes_w
    assert preference_algs() == (*takes_w, "auto")
    body = ('suite = "preferences"\ndescription = "x"\nduration_s = 6\nKEY'
            'prefs = [[0.8, 0.1, 0.1]]\n[[scenario]]\nname = "p"\nsplit = "tune"\n'
            'link = { rate_mbps = 20 }\nflows = [{ rtt_ms = 20 }]\n')
    p = tmp_path / "preferences.toml"
    p.write_text(body.replace("KEY", ""))
    assert load_suite(p)[0].preference_algs == (*takes_w, "auto")
    p.write_text(body.replace("KEY", 'preference_algs = ["reno"]\n'))
    assert load_suite(p)[0].preference_algs == ("reno",)
