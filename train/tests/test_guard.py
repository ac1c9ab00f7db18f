"""The regression guard (ccp_train.harness.guard): the margin rule on hand-made records, the
ways it must fail rather than pass on nothing, and end to end: the shipped MOCC model passes
its recorded figures and a copy with perturbed weights (same card, same dynamics) fails."""

import hashlib
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from ccp_train.harness import guard
from ccp_train.harness.runner import ROOT

AGENT = ROOT / "target" / "release" / "ccp-agent"


def rec(alg: str, seed: int, util: float, qdel: float = 10.0, loss: float = 0.01,
        scenario: str = "a") -> dict:
    return {"run_id": f"links--{scenario}--{alg}--s{seed}", "suite": "links",
            "scenario": scenario, "split": "tune", "alg": alg, "seed": seed, "w": None,
            "metrics": {"utilization": util, "queue_delay_p95_ms": qdel, "loss_rate": loss}}


def recorded_card(tmp_path: Path, utils: list[float]) -> guard.Guarded:
    records = [rec("x", s, u) for s, u in enumerate(utils, 1)]
    sec = guard.record_section(records, "x", list(range(1, len(utils) + 1)), {})
    card = tmp_path / "x.json"
    card.write_text(json.dumps({"algorithm": "x", "model_file": "x.onnx",
                                "evaluation": {"guard": sec}}))
    return guard.Guarded("x", card, ("links",), None)


def test_the_margin_is_k_sd_or_the_relative_or_absolute_floor(tmp_path):
    m = recorded_card(tmp_path, [0.80, 0.90, 0.70, 0.80, 0.80])
    sd = float(np.std([0.80, 0.90, 0.70, 0.80, 0.80], ddof=1))
    # seeds 1, 2 recorded 0.80, 0.90: mean 0.85; margin 3 sd = 0.212 (> 5 % and 0.01)
    ok, probs = guard.check([rec("x", 1, 0.70), rec("x", 2, 0.70)], m, [1, 2], ("links",))
    assert not probs
    u = next(c for c in ok if c.metric == "utilization")
    assert u.recorded == pytest.approx(0.85) and u.margin == pytest.approx(3 * sd)
    assert u.ok and u.bounds[0] == pytest.approx(0.85 - 3 * sd)
    bad, _ = guard.check([rec("x", 1, 0.60), rec("x", 2, 0.62)], m, [1, 2], ("links",))
    u = next(c for c in bad if c.metric == "utilization")
    assert not u.ok
    line = u.line()
    assert line.startswith("FAIL x links") and "utilization: 0.61" in line and "≥ 0.6379" in line
    # no spread: the 5 % floor (0.04 of 0.8), and the unit floor for a small figure
    m = recorded_card(tmp_path, [0.8] * 5)
    cs, _ = guard.check([rec("x", 1, 0.77)], m, [1], ("links",))
    by = {c.metric: c for c in cs}
    assert by["utilization"].margin == pytest.approx(0.04) and by["utilization"].ok
    assert by["loss_rate"].margin == pytest.approx(guard.ABS["loss_rate"])
    assert by["queue_delay_p95_ms"].margin == pytest.approx(2.0)  # 5 % of 10 ms < 2 ms
    cs, _ = guard.check([rec("x", 1, 0.75)], m, [1], ("links",))
    assert not next(c for c in cs if c.metric == "utilization").ok
    # less is better: a rise of the delay past the bound fails, a fall passes
    cs, _ = guard.check([rec("x", 1, 0.8, qdel=12.5)], m, [1], ("links",))
    assert not next(c for c in cs if c.metric == "queue_delay_p95_ms").ok
    cs, _ = guard.check([rec("x", 1, 0.8, qdel=1.0)], m, [1], ("links",))
    assert all(c.ok for c in cs)


def test_it_fails_rather_than_passes_on_nothing(tmp_path):
    m = recorded_card(tmp_path, [0.8, 0.82, 0.79])
    # a missing measurement (NaN), a failed run, no run at all
    cs, _ = guard.check([rec("x", 1, math.nan)], m, [1], ("links",))
    assert not next(c for c in cs if c.metric == "utilization").ok
    failed = {"run_id": "links--a--x--s1", "suite": "links", "scenario": "a", "alg": "x",
              "seed": 1, "error": "RuntimeError: boom"}
    _, probs = guard.check([failed], m, [1], ("links",))
    assert any("failed" in p for p in probs) and any("no run measured" in p for p in probs)
    # seeds that were not recorded; a matrix that changed; a card without figures
    _, probs = guard.check([rec("x", 4, 0.8)], m, [4], ("links",))
    assert probs and "not recorded" in probs[0]
    _, probs = guard.check([rec("x", 1, 0.8, scenario="b")], m, [1], ("links",))
    assert any("matrix changed" in p for p in probs)
    m.card.write_text(json.dumps({"algorithm": "x", "model_file": "x.onnx"}))
    cs, probs = guard.check([rec("x", 1, 0.8)], m, [1], ("links",))
    assert not cs and "no recorded figures" in probs[0] and "--record" in probs[0]
    # recording refuses a non-finite figure
    with pytest.raises(guard.GuardError, match="no finite figure"):
        guard.record_section([rec("x", 1, 0.8), rec("x", 2, math.nan)], "x", [1, 2], {})


def test_the_shipped_cards_hold_figures_for_every_guarded_model():
    models = guard.guarded_models(ROOT / "models")
    assert {m.alg for m in models} >= {"mocc", "owl", "auto"}
    for m in models:
        sec = json.loads(m.card.read_text())["evaluation"]["guard"]
        assert sec["split"] == "tune" and len(sec["seeds"]) >= 2
        assert {g.split("/")[0] for g in sec["groups"]} == set(m.suites)
        if m.sha256:
            assert sec["model_sha256"] == m.sha256


def degraded_models(dst: Path, alg: str, noise: float, seed: int = 0) -> None:
    """A copy of ``alg``'s model whose every float initializer gets Gaussian noise of
    ``noise`` times its own standard deviation; the card is the shipped one (same dynamics,
    same recorded figures) with the new file's sha256."""
    import onnx
    from onnx import numpy_helper

    dst.mkdir()
    card = json.loads((ROOT / "models" / f"{alg}.json").read_text())
    model = onnx.load(str(ROOT / "models" / card["model_file"]))
    rng = np.random.default_rng(seed)
    for init in model.graph.initializer:
        w = numpy_helper.to_array(init)
        if w.dtype.kind == "f" and w.size > 1:
            w2 = w + rng.normal(0.0, noise * float(w.std()), w.shape).astype(w.dtype)
            init.CopyFrom(numpy_helper.from_array(w2, init.name))
    path = dst / card["model_file"]
    onnx.save(model, str(path))
    card["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    (dst / f"{alg}.json").write_text(json.dumps(card, indent=2))
    if (ROOT / "models" / f"{alg}.pt").is_file():
        shutil.copy(ROOT / "models" / f"{alg}.pt", dst)


@pytest.mark.skipif(not AGENT.is_file(), reason="needs target/release/ccp-agent "
                    "(ops/test.sh builds it)")
def test_a_degraded_model_fails_the_guard_and_the_shipped_one_passes(tmp_path, capsys):
    args = ["--algs", "mocc", "--suites", "links,preferences", "--seeds", "1", "--jobs", "2"]
    assert guard.main(args + ["--out", str(tmp_path / "shipped")]) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out and "0 failures" in out
    degraded_models(tmp_path / "models", "mocc", noise=1.0)
    assert guard.main(args + ["--models", str(tmp_path / "models"),
                              "--out", str(tmp_path / "degraded")]) == 1
    out = capsys.readouterr().out
    fails = [ln for ln in out.splitlines() if ln.startswith("FAIL mocc")]
    assert fails, out
    # each failure names the model, the scenario group, the metric, the figure and the bound
    assert all("bound" in ln and "recorded" in ln for ln in fails)
