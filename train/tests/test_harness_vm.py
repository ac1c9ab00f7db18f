"""Kernel mode of the harness (ccp_train.harness.vm) without a VM: the guest's scenario list
from the links suite, the skip rule, the ratios and the report from hand-made result lines, and
run_vm end to end against a stand-in for ops/vm/test.sh."""

import json
from pathlib import Path

import pytest

from ccp_train.harness import MatrixError, load_matrix, select
from ccp_train.harness.matrix import Scenario
from ccp_train.harness.vm import (
    MAX_RATE_MBPS,
    VmScenario,
    main,
    markdown,
    problem,
    read_results,
    run_vm,
    vm_scenarios,
    with_ratios,
    write_list,
)


def scen(name: str, link: dict, flows: list[dict] | None = None) -> Scenario:
    return Scenario("links", name, "eval", 30.0, link, flows or [{"rtt_ms": 40}])


def rec(scenario: str, cc: str, thr: float | None, rtt: float | None, p95: float | None = None,
        **kw: object) -> dict:
    ccp = cc.startswith("ccp_")
    r = {"scenario": scenario, "cc": cc, "kind": "ccp" if ccp else "native",
         "alg": cc.removeprefix("ccp_"), "rate_mbps": 50, "rtt_ms": 40, "buffer_bdp": 1,
         "buffer_bytes": 250000, "loss": 0.0, "seconds": 10, "throughput_mbps": thr,
         "rtt_mean_ms": rtt, "rtt_p95_ms": p95 if p95 is not None else rtt,
         "rtt_samples": 100, "retransmits": 3,
         "attached": True if ccp else None}
    if ccp:
        r["attach_samples"] = [20, 20]
        r["agent_algs"] = [cc.removeprefix("ccp_")]
    r.update(kw)
    return r


# --- the list and the skip rule --------------------------------------------------------


def test_list_lines_from_links_scenarios(tmp_path: Path):
    vms, skipped = vm_scenarios([
        scen("50M-40ms-2bdp-2pct", {"rate_mbps": 50, "buffer_bdp": 2.0, "loss": 0.02}),
        scen("10M-10ms-default", {"rate_mbps": 10}, [{"rtt_ms": 10}]),
    ])
    assert skipped == []
    assert vms == [VmScenario("50M-40ms-2bdp-2pct", 50.0, 40.0, 2.0, 0.02),
                   VmScenario("10M-10ms-default", 10.0, 10.0, 1.0, 0.0)]
    p = tmp_path / "list.txt"
    write_list(p, vms)
    lines = [ln for ln in p.read_text().splitlines() if not ln.startswith("#")]
    assert lines == ["50M-40ms-2bdp-2pct 50 40 2 0.02", "10M-10ms-default 10 10 1 0"]


def test_buffer_in_packets_becomes_bdps():
    # 50 Mbit/s x 40 ms = 250 000 bytes; 500 packets of 1500 bytes = 3 BDP
    vms, _ = vm_scenarios([scen("p", {"rate_mbps": 50, "buffer_pkts": 500})])
    assert vms[0].buffer_bdp == pytest.approx(3.0)


def test_skip_rule():
    vms, skipped = vm_scenarios([
        scen("fast", {"rate_mbps": 500, "buffer_bdp": 1.0}),
        scen("edge", {"rate_mbps": MAX_RATE_MBPS, "buffer_bdp": 1.0}),
        scen("trace", {"trace": "/x/ATT", "buffer_bdp": 1.0}),
        scen("two", {"rate_mbps": 50}, [{"rtt_ms": 40}, {"rtt_ms": 40, "alg": "cubic"}]),
        scen("pair", {"rate_mbps": 50}, [{"rtt_ms": 40, "count": 2}]),
        scen("bad name", {"rate_mbps": 50}),
    ])
    assert [v.name for v in vms] == ["edge"]
    why = dict(skipped)
    assert set(why) == {"links/fast", "links/trace", "links/two", "links/pair",
                        "links/bad name"}
    assert "500 Mbit/s" in why["links/fast"] and "200" in why["links/fast"]
    assert "constant" in why["links/trace"]


def test_quick_eval_links_scenarios_fit_the_guest():
    scen_ = select(load_matrix(suites=["links"]), "eval", quick=True, purpose="report")
    vms, skipped = vm_scenarios(scen_)
    assert vms and all(v.rate_mbps <= MAX_RATE_MBPS for v in vms)
    assert len(vms) + len(skipped) == len(scen_)
    # the full eval split has 500 Mbit/s links, which are skipped, and says so
    _, sk = vm_scenarios(select(load_matrix(suites=["links"]), "eval", purpose="report"))
    assert sk and all("above" in why for _, why in sk)


# --- ratios and the report -------------------------------------------------------------


def hand_made() -> list[dict]:
    return [
        rec("a", "cubic", 40.0, 80.0, 100.0),
        rec("a", "bbr", 50.0, 50.0, 60.0),
        rec("a", "ccp_reno", 30.0, 60.0, 90.0),
        rec("a", "ccp_mocc", 45.0, 44.0, 50.0, attached=False, attach_samples=[2, 20]),
        rec("a", "ccp_iris", 20.0, 40.0, agent_algs=["cubic"]),
        rec("b", "cubic", 10.0, 20.0),
        rec("b", "bbr", 5.0, 25.0, error="iperf3 failed"),
        rec("b", "ccp_reno", 8.0, 30.0),
    ]


def test_ratios_by_hand():
    rows = with_ratios(hand_made())
    by = {(r["scenario"], r["cc"]): r for r in rows}
    r = by[("a", "ccp_reno")]
    assert r["thr_vs_cubic"] == pytest.approx(0.75) and r["thr_vs_bbr"] == pytest.approx(0.6)
    assert r["rtt_vs_cubic"] == pytest.approx(0.75) and r["rtt_vs_bbr"] == pytest.approx(1.2)
    assert r["rtt_p95_vs_cubic"] == pytest.approx(0.9)
    assert r["rtt_p95_vs_bbr"] == pytest.approx(1.5)
    assert by[("a", "cubic")]["thr_vs_cubic"] == pytest.approx(1.0)
    assert by[("a", "bbr")]["thr_vs_cubic"] == pytest.approx(1.25)
    # scenario b's bbr run failed: no bbr ratios there, cubic ratios still
    rb = by[("b", "ccp_reno")]
    assert rb["thr_vs_bbr"] is None and rb["thr_vs_cubic"] == pytest.approx(0.8)
    assert rb["rtt_vs_cubic"] == pytest.approx(1.5)
    assert [r["ok"] for r in rows] == [True, True, True, False, False, True, False, True]
    assert "2 of 20" in problem(by[("a", "ccp_mocc")])
    assert "cubic" in problem(by[("a", "ccp_iris")])
    assert problem(by[("b", "bbr")]) == "iperf3 failed"


def test_a_zero_reference_gives_no_ratio():
    rows = with_ratios([rec("a", "cubic", 0.0, 0.0), rec("a", "ccp_reno", 3.0, 40.0)])
    assert rows[1]["thr_vs_cubic"] is None and rows[1]["rtt_vs_cubic"] is None


def test_report_tables():
    rows = with_ratios(hand_made())
    md = markdown(rows, [("links/fast", "500 Mbit/s is above ...")],
                  {"split": "eval", "quick": True, "seconds": 10, "algs": ["reno", "mocc"],
                   "scenarios": 2, "runs": len(rows), "wall_s": 123.0, "kernel": "6.12.x"})
    assert "## a" in md and "## b" in md
    assert "| ccp_reno | 30.0 | 0.75 | 0.60 | 60.0 | 0.75 | 1.20 | 90.0 | 0.90 | 1.50 | 3 " in md
    assert "| native bbr | error: iperf3 failed |" in md
    assert "links/fast" in md and "Skipped" in md
    # the summary: geometric mean over a and b of ccp_reno's thr/cubic: sqrt(0.75 * 0.8)
    line = next(ln for ln in md.splitlines() if ln.startswith("| ccp_reno | 2 |"))
    assert f"{(0.75 * 0.8) ** 0.5:.2f}" in line and line.endswith("| 2/2 |")
    assert "## Problems" in md and "not under agent control" in md
    # every row of a scenario's table has as many cells as its header
    table = md.split("## a")[1].split("## b")[0].splitlines()
    assert {ln.count("|") for ln in table if ln.startswith("|")} == {13}


def test_read_results_keeps_bad_lines_as_errors(tmp_path: Path):
    p = tmp_path / "eval.jsonl"
    p.write_text(json.dumps(rec("a", "cubic", 1.0, 2.0)) + "\n\nnot json\n")
    got = read_results(p)
    assert len(got) == 2 and got[0]["cc"] == "cubic" and "not JSON" in got[1]["error"]


# --- run_vm with a stand-in guest ------------------------------------------------------


def fake_test_sh(tmp_path: Path, lines: list[dict]) -> Path:
    """A script with test.sh's --eval interface that echoes its arguments and 'runs' the
    list by printing canned JSON lines."""
    res = tmp_path / "fake-out" / "eval.jsonl"
    res.parent.mkdir()
    res.write_text("".join(json.dumps(x) + "\n" for x in lines))
    sh = tmp_path / "test.sh"
    sh.write_text("#!/bin/bash\n"
                  "echo \"[0s] kernels: 6.12.99+fake and 6.1.0-fake\"\n"
                  "echo \"args: $*\"\n"
                  "cp \"$2\" " + str(tmp_path / "seen-list.txt") + "\n"
                  f"echo EVAL_RESULTS {res}\n")
    return sh


def test_run_vm_end_to_end_with_a_stand_in(tmp_path: Path):
    lines = [rec("50M-10ms-1bdp-0pct", "cubic", 40.0, 12.0),
             rec("50M-10ms-1bdp-0pct", "bbr", 45.0, 11.0),
             rec("50M-10ms-1bdp-0pct", "ccp_bbr", 44.0, 11.5)]
    sh = fake_test_sh(tmp_path, lines)
    out = tmp_path / "out"
    rows = run_vm(out, [scen("50M-10ms-1bdp-0pct", {"rate_mbps": 50, "buffer_bdp": 1.0},
                             [{"rtt_ms": 10}]),
                        scen("500M-10ms-4bdp-2pct", {"rate_mbps": 500, "buffer_bdp": 4.0})],
                  10, ["bbr"], test_sh=sh)
    assert len(rows) == 3 and rows[2]["thr_vs_bbr"] == pytest.approx(44 / 45)
    seen = (tmp_path / "seen-list.txt").read_text()
    assert "50M-10ms-1bdp-0pct 50 10 1 0" in seen and "500M" not in seen
    assert "args: --eval" in (out / "vm_test.log").read_text()
    assert [json.loads(ln)["cc"] for ln in (out / "vm_results.jsonl").read_text().splitlines()] \
        == ["cubic", "bbr", "ccp_bbr"]
    md = (out / "vm_report.md").read_text()
    assert "500M-10ms-4bdp-2pct" in md and "6.12.99+fake" in md


def test_run_vm_without_results_raises(tmp_path: Path):
    sh = tmp_path / "test.sh"
    sh.write_text("#!/bin/bash\necho build failed\nexit 1\n")
    with pytest.raises(RuntimeError, match="build failed"):
        run_vm(tmp_path / "o", [scen("s", {"rate_mbps": 50})], 10, ["reno"], test_sh=sh)


def test_nothing_to_run_is_bad_input(tmp_path: Path):
    with pytest.raises(MatrixError):
        run_vm(tmp_path / "o", [scen("fast", {"rate_mbps": 1000})], 10, ["reno"])


def test_main_rejects_bad_flags(tmp_path: Path, capsys):
    assert main(["--out", str(tmp_path), "--seconds", "0"]) == 2
    assert main(["--out", str(tmp_path), "--algs", "Reno;rm"]) == 2
    assert "error" in capsys.readouterr().err


def test_netstats_runs_are_labelled_and_checked():
    base = [rec("a", "cubic", 40.0, 50.0), rec("a", "bbr", 50.0, 40.0)]
    off = rec("a", "ccp_owl", 30.0, 30.0, netstats="off", polls_ok=0, fresh_paths=0)
    on = rec("a", "ccp_owl", 35.0, 25.0, netstats="on", polls_ok=6, fresh_paths=1)
    # the exporter ran but the agent never held its sample: a problem, as is a fresh path
    # with no exporter (the masked run would not be masked)
    stale_on = rec("a", "ccp_owl", 35.0, 25.0, netstats="on", polls_ok=0, fresh_paths=0)
    leaky_off = rec("a", "ccp_owl", 35.0, 25.0, netstats="off", fresh_paths=1)
    assert problem(off) is None and problem(on) is None
    assert "no fresh path" in str(problem(stale_on))
    assert "held 1 fresh paths" in str(problem(leaky_off))
    rows = with_ratios(base + [off, on])
    md = markdown(rows, [], {"split": "tune", "seconds": 10, "algs": ["owl"], "scenarios": 1,
                             "runs": 4, "wall_s": 1.0, "models": "/tmp/cand",
                             "netstats": True})
    assert "| ccp_owl (stats off) | 30.0 | 0.75 |" in md
    assert "| ccp_owl (stats on) | 35.0 | 0.88 |" in md
    # one summary row per (algorithm, stats) pair
    assert "| ccp_owl (stats off) | 1 |" in md and "| ccp_owl (stats on) | 1 |" in md
    assert "/tmp/cand" in md and "ccp-netstats-exporter" in md


def test_run_vm_passes_models_and_netstats_to_the_guest(tmp_path: Path):
    sh = fake_test_sh(tmp_path, [rec("s", "cubic", 40.0, 12.0)])
    with sh.open("a") as fh:
        fh.write(f"echo \"$CCP_VM_EVAL_MODELS $CCP_VM_EVAL_NETSTATS\" > {tmp_path}/env.txt\n")
    models = tmp_path / "cand"
    models.mkdir()
    run_vm(tmp_path / "o", [scen("s", {"rate_mbps": 50})], 10, ["owl"], test_sh=sh,
           models=models, netstats=True)
    assert (tmp_path / "env.txt").read_text().split() == [str(models.resolve()), "1"]
    run_vm(tmp_path / "o2", [scen("s", {"rate_mbps": 50})], 10, ["owl"], test_sh=sh)
    assert (tmp_path / "env.txt").read_text().split() == ["0"]


def test_main_rejects_a_models_folder_without_cards(tmp_path: Path, capsys):
    assert main(["--out", str(tmp_path / "o"), "--models", str(tmp_path)]) == 2
    assert "no model cards" in capsys.readouterr().err


# --- recorded paths: the trace-driven link and the simulator beside it --------------------

from ccp_train.harness import vm  # noqa: E402
from ccp_train.harness.vm import (  # noqa: E402
    AGREE_TOL,
    MAX_TRACE_MEAN_MBPS,
    VM_TRACES,
    sim_to_real,
    trace_mean_mbps,
    trace_scenarios,
)


def tscen(name: str, trace: Path, rtt: float = 40.0, buf: float = 1.0) -> Scenario:
    return Scenario("corpus", name, "eval", 30.0, {"trace": str(trace), "buffer_bdp": buf},
                    [{"rtt_ms": rtt}])


def test_trace_mean_rate_as_the_simulator_serves_it(tmp_path: Path):
    mm = tmp_path / "t.mm"
    # 4 opportunities of 1500 bytes in a 2 ms period: 24 Mbit/s
    mm.write_text("0\n1\n1\n2\n")
    assert trace_mean_mbps(mm) == pytest.approx(24.0)
    log = tmp_path / "t.tput"
    # 10 Mbit/s for 1 s, 0 for 1 s, 30 for the median interval (1 s): mean 40/3
    log.write_text("0 10\n1 0\n2 30\n")
    assert trace_mean_mbps(log) == pytest.approx(40 / 3)
    empty = tmp_path / "e.mm"
    empty.write_text("0\n")
    with pytest.raises(MatrixError, match="no period"):
        trace_mean_mbps(empty)


def test_trace_scenarios_pick_the_named_recordings_at_one_rtt_and_buffer(tmp_path: Path):
    slow = tmp_path / "slow.mm"
    slow.write_text("".join(f"{t}\n" for t in range(1, 11)))  # 12 Mbit/s
    fast = tmp_path / "fast.tput"
    fast.write_text(f"0 {MAX_TRACE_MEAN_MBPS + 1}\n")
    vms, skipped = trace_scenarios([
        tscen("cell-a:slow.mm-40ms-1bdp", slow),
        tscen("cell-a:slow.mm-100ms-1bdp", slow, rtt=100),
        tscen("cell-a:slow.mm-40ms-2bdp", slow, buf=2.0),
        tscen("5g-b:fast.tput-40ms-1bdp", fast),
        scen("const", {"rate_mbps": 50}),
    ], ["slow.mm", "fast.tput"], 40.0, 1.0)
    assert [v.name for v in vms] == ["cell-a:slow.mm-40ms-1bdp"]
    assert vms[0].trace == str(slow) and vms[0].rate_mbps == pytest.approx(12.0)
    assert vms[0].line() == f"cell-a:slow.mm-40ms-1bdp trace={slow} 40 1 0"
    assert [k for k, _ in skipped] == ["corpus/5g-b:fast.tput-40ms-1bdp"]
    assert "above" in skipped[0][1]
    with pytest.raises(MatrixError, match="nope.mm"):
        trace_scenarios([tscen("x", slow)], ["slow.mm", "nope.mm"], 40.0, 1.0)


def test_default_traces_are_eval_recordings_the_guest_runs():
    sc = select(load_matrix(suites=["corpus"]), "eval", purpose="report")
    vms, skipped = trace_scenarios(sc, VM_TRACES, 40.0, 1.0)
    assert len(vms) == len(VM_TRACES) and not skipped
    assert all(v.rate_mbps <= MAX_TRACE_MEAN_MBPS and v.trace for v in vms)
    # none of them is a training recording
    with pytest.raises(MatrixError):
        trace_scenarios(select(load_matrix(suites=["corpus"]), "tune", purpose="report"),
                        VM_TRACES[:1], 40.0, 1.0)


def trec(scenario: str, cc: str, thr: float, q95: float | None, **kw: object) -> dict:
    r = rec(scenario, cc, thr, 50.0, trace="/x/t.mm", link_queue_p95_ms=q95,
            link_utilization=0.9, link_buffer_pkts=56, **kw)
    r.pop("rate_mbps")
    return r


def srec(scenario: str, alg: str, thr: float, q95: float, **kw: object) -> dict:
    return {"scenario": scenario, "alg": alg, "seed": 1,
            "metrics": {"throughput_mbps": thr, "queue_delay_p95_ms": q95}, **kw}


def test_sim_to_real_ratios_and_verdicts_by_hand():
    rows = with_ratios([
        trec("t", "cubic", 10.0, 40.0), trec("t", "bbr", 9.0, 10.0),
        trec("t", "ccp_cubic", 10.0, 38.0), trec("t", "ccp_mocc", 4.0, 4.0),
        trec("t", "ccp_reno", 8.0, None),
    ])
    sim = [srec("t", "cubic", 12.0, 50.0), srec("t", "bbr", 11.0, 12.0),
           srec("t", "mocc", 9.0, 5.0), srec("t", "reno", 10.0, 40.0)]
    got = {e["run"]: e for e in sim_to_real(rows, sim)}
    assert set(got) == {"native bbr", "ccp_cubic", "ccp_mocc", "ccp_reno"}
    b = got["native bbr"]
    assert b["guest_thr"] == pytest.approx(0.9) and b["sim_thr"] == pytest.approx(11 / 12)
    assert b["thr_agree"] == pytest.approx(0.9 / (11 / 12))
    assert b["guest_q95"] == pytest.approx(0.25) and b["sim_q95"] == pytest.approx(0.24)
    assert b["verdict"] == "agree" and b["problem"] is None
    # ccp_cubic against the simulator's cubic itself: 1.0 on that side
    assert got["ccp_cubic"]["sim_thr"] == pytest.approx(1.0)
    # 0.4 in the guest against 0.75 in the simulator: beyond the tolerance
    m = got["ccp_mocc"]
    assert abs(m["thr_agree"] - 1) > AGREE_TOL and m["verdict"] == "differ: throughput"
    # no queue figure in the guest: a problem, no verdict
    assert got["ccp_reno"]["problem"] and got["ccp_reno"]["verdict"] == "–"
    # a guest ccp run with no simulator counterpart is a problem too
    lone = {e["run"]: e for e in sim_to_real(rows, [srec("t", "cubic", 12.0, 50.0)])}
    assert all("no simulator run" in str(e["problem"]) for r, e in lone.items()
               if r != "ccp_cubic")
    assert lone["ccp_cubic"]["problem"] is None


def test_trace_runs_without_link_statistics_are_problems():
    assert "no queueing" in str(problem(trec("t", "cubic", 10.0, None)))
    assert "writes" in str(problem(trec("t", "cubic", 10.0, 3.0, link_write_errors=2)))
    assert problem(trec("t", "cubic", 10.0, 3.0, link_write_errors=0)) is None
    # a link that fell behind its trace (its process starved) did not emulate the path
    assert "behind its trace" in str(problem(trec("t", "cubic", 10.0, 3.0, link_late_p99_ms=422)))
    assert problem(trec("t", "cubic", 10.0, 3.0, link_late_p99_ms=3)) is None


def test_run_vm_on_traces_with_a_stand_in_and_a_fake_simulator(tmp_path: Path, monkeypatch):
    tr = tmp_path / "t.mm"
    tr.write_text("".join(f"{t}\n" for t in range(1, 11)))
    name = "cell-c:t.mm-40ms-1bdp"
    lines = [trec(name, "cubic", 10.0, 40.0), trec(name, "bbr", 9.0, 10.0),
             trec(name, "ccp_bbr", 8.5, 11.0)]
    sh = fake_test_sh(tmp_path, lines)
    seen: dict = {}

    def fake_sim(scenarios, algs, seconds, out, jobs=2, agent=None):
        seen.update(names=[s.name for s in scenarios], algs=list(algs), seconds=seconds)
        return [srec(name, "cubic", 12.0, 50.0), srec(name, "bbr", 11.0, 12.0)]

    monkeypatch.setattr(vm, "run_sim", fake_sim)
    rows = run_vm(tmp_path / "o", [tscen(name, tr), scen("c", {"rate_mbps": 500})], 20,
                  ["bbr"], test_sh=sh, traces=["t.mm"], command="python -m x --suites corpus")
    assert seen == {"names": [name], "algs": ["bbr"], "seconds": 20}
    assert f"{name} trace={tr} 40 1 0" in (tmp_path / "seen-list.txt").read_text()
    assert all(not r["sim_to_real_problems"] for r in rows)
    md = (tmp_path / "o" / "vm_report.md").read_text()
    assert "Command: `python -m x --suites corpus`" in md
    assert "## Sim to real" in md and "| native bbr |" in md and "| ccp_bbr |" in md
    cmp = [json.loads(x) for x in (tmp_path / "o" / "vm_sim_to_real.jsonl").read_text().split("\n")
           if x]
    assert [e["verdict"] for e in cmp] == ["agree", "agree"]
    assert len((tmp_path / "o" / "vm_sim.jsonl").read_text().splitlines()) == 2
    # the per-scenario table carries the trace link's queue columns, all rows as wide
    table = md.split(f"## {name}")[1].split("## ")[0].splitlines()
    assert {ln.count("|") for ln in table if ln.startswith("|")} == {16}


def test_main_rejects_bad_suites_and_traces(tmp_path: Path, capsys):
    assert main(["--out", str(tmp_path), "--suites", "fairness"]) == 2
    assert main(["--out", str(tmp_path), "--suites", "corpus", "--traces", "no-such"]) == 2
    assert main(["--out", str(tmp_path), "--suites", "corpus", "--jobs", "0"]) == 2
    err = capsys.readouterr().err
    assert "--suites" in err and "no-such" in err and "--jobs" in err
