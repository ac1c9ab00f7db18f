"""Issue 40's selection rules (``ccp_train.harness.mocc_rule``) on hand-made sweeps: each
condition can fail on its own, and the choice follows the rules written in
docs/algorithms/mocc.md."""

from __future__ import annotations

import json
from pathlib import Path

from ccp_train.harness import mocc_rule as R

SCEN = ["cellular-a-40ms-1bdp", "cellular-b-100ms-2bdp"]


def _run(suite: str, scen: str, alg: str, seed: int, w: str | None, **m: float) -> dict:
    metrics = {"throughput_mbps": 5.0, "queue_delay_p95_ms": 100.0, "loss_rate": 0.01,
               "utilization": 0.8, "base_rtt_ms": 40.0, "rtt_mean_ms": 60.0}
    metrics.update(m)
    return {"suite": suite, "scenario": scen, "alg": alg, "seed": seed,
            "w": [float(x) for x in w.split(",")] if w else None, "metrics": metrics}


def sweep(points: dict[str, tuple[float, float, float]], jain: float = 0.75,
          share: float = 0.2) -> list[dict]:
    """Cubic at 5 Mbit/s, p95 100 ms, 1 % loss; MOCC at each landmark: (thr, p95, loss)."""
    out = []
    for seed in (1, 2):
        for s in SCEN:
            out.append(_run("corpus", s, "cubic", seed, None))
            for lm, (thr, p95, loss) in points.items():
                out.append(_run("corpus", s, "mocc", seed, lm, throughput_mbps=thr,
                                queue_delay_p95_ms=p95, loss_rate=loss, utilization=thr / 6.25))
        out.append(_run("fairness", "staggered-x", "mocc", seed, R.L1, jain_mean=jain))
        out.append(_run("friendliness", "vs-cubic-x", "mocc", seed, R.L1, share=share))
    return out


GOOD = {R.L1: (5.0, 90.0, 0.012), R.L2: (4.5, 70.0, 0.012), R.L3: (4.0, 50.0, 0.012)}


def test_figures_are_geometric_ratios_against_cubic_per_run() -> None:
    f = R.figures("x", sweep(GOOD))
    assert abs(f.cellular[R.L3].thr_ratio - 0.8) < 1e-12
    assert abs(f.cellular[R.L3].p95_ratio - 0.5) < 1e-12
    assert f.cellular[R.L3].runs == 4
    assert abs(f.jain - 0.75) < 1e-12 and abs(f.share - 0.2) < 1e-12


def test_the_model_rule_passes_a_good_model_and_each_condition_fails_alone() -> None:
    ref = R.figures("shipped", sweep(GOOD))
    assert R.model_rule(R.figures("good", sweep(GOOD)), ref)["passes"]
    dominated = dict(GOOD, **{R.L2: (4.5, 120.0, 0.012)})
    too_lossy = dict(GOOD, **{R.L3: (4.0, 50.0, 0.03)})
    not_monotone = dict(GOOD, **{R.L3: (4.0, 80.0, 0.012)})
    for pts, cond in ((dominated, "a"), (too_lossy, "b"), (not_monotone, "c")):
        j = R.model_rule(R.figures("bad", sweep(pts)), ref)
        assert not j["passes"] and not j["conds"][cond], (cond, j)
    unfair = R.model_rule(R.figures("unfair", sweep(GOOD, jain=0.7)), ref)
    assert not unfair["passes"] and not unfair["conds"]["d"]
    # within the tolerance written with the rule
    assert R.model_rule(R.figures("ok", sweep(GOOD, share=0.185)), ref)["passes"]


def test_a_model_ships_only_if_it_passes_and_beats_the_shipped_score() -> None:
    ref = R.figures("shipped", sweep(GOOD))
    same = R.figures("same", sweep(GOOD))
    better = R.figures("better", sweep(dict(GOOD, **{R.L2: (4.8, 60.0, 0.012)})))
    worse_but_passing = R.figures("worse", sweep(dict(GOOD, **{R.L2: (4.2, 70.0, 0.012)})))
    assert R.choose([ref, same, worse_but_passing], "model") is None
    assert R.choose([ref, worse_but_passing, better], "model") == "better"


def test_the_gain_rule_picks_the_lowest_latency_landmark_tail_among_passing(tmp_path) -> None:
    ref = R.figures("off", sweep(GOOD))
    tight = R.figures("tight", sweep(dict(GOOD, **{R.L3: (2.5, 30.0, 0.01)})))  # (a) fails
    mid = R.figures("mid", sweep(dict(GOOD, **{R.L3: (3.5, 40.0, 0.01)})))
    loose = R.figures("loose", sweep(GOOD))
    assert not R.gain_rule(tight, ref)["conds"]["a"]
    assert R.choose([ref, tight, mid, loose], "gain") == "mid"
    # none passes: the one passing most conditions
    assert R.choose([ref, tight], "gain") == "tight"
    # the command line reads harness folders
    for name, recs in (("a", sweep(GOOD)), ("b", sweep(GOOD))):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in recs))
    assert R.main(["--rule", "model", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    # ... that ran one agent binary: two hashes are refused, naming the sweeps
    (tmp_path / "a" / "meta.json").write_text(json.dumps({"agent_sha256": "aa" * 32}))
    (tmp_path / "b" / "meta.json").write_text(json.dumps({"agent_sha256": "aa" * 32}))
    assert R.main(["--rule", "model", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    (tmp_path / "b" / "meta.json").write_text(json.dumps({"agent_sha256": "bb" * 32}))
    try:
        R.main(["--rule", "model", str(tmp_path / "a"), str(tmp_path / "b")])
    except SystemExit as e:
        assert "different agent binaries" in str(e) and str(tmp_path / "b") in str(e)
    else:
        raise AssertionError("two agents accepted")


def test_a_missing_sweep_names_the_folder(tmp_path: Path) -> None:
    try:
        R.load(tmp_path / "nope")
    except SystemExit as e:
        assert "nope" in str(e) and "harness" in str(e)
    else:
        raise AssertionError("no error")


def test_monotone_violations_need_intervals_that_do_not_overlap() -> None:
    def runs(p95_l3: list[float]) -> list[dict]:
        out = []
        for seed, v in enumerate(p95_l3, 1):
            out.append(_run("corpus", SCEN[0], "mocc", seed, R.L3, queue_delay_p95_ms=v))
            out.append(_run("corpus", SCEN[0], "mocc", seed, R.L2, queue_delay_p95_ms=60.0))
            out.append(_run("corpus", SCEN[0], "mocc", seed, R.L1, queue_delay_p95_ms=90.0))
        return out

    assert R.monotone_violations(runs([50, 52, 48]))["queue_delay_p95_ms"] == []
    # above L2 on every seed: a violation
    assert R.monotone_violations(runs([80, 82, 78]))["queue_delay_p95_ms"] == [SCEN[0]]
    # above L2 on average, but the seeds' interval reaches below it: within the CI
    assert R.monotone_violations(runs([30, 100, 70]))["queue_delay_p95_ms"] == []


def test_acceptance_reports_each_criterion() -> None:
    text = R.acceptance(sweep(dict(GOOD, **{"0.3,0.3,0.4": (4.6, 65.0, 0.012),
                                            "0.1,0.1,0.8": (4.1, 55.0, 0.012)})))
    assert "| mocc@0.1,0.8,0.1 | 0.80 | 0.50 | 1.20 |" in text
    assert "throughput ≥ 0.95× Cubic: 1.00 ✓" in text
    assert "0.50 at 0.80 ✓" in text
    assert "Jain 0.750 (before: 0.747) ✓" in text
