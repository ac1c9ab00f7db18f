"""The path classifier's fit, and the agent scoring flows exactly as the fit does."""

from __future__ import annotations

import json
import math
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from ccp_train import pathclass as P

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "target" / "release" / "ccp-agent"


def _rows(n: int, seed: int) -> list[dict]:
    """Rows whose label is decided by rate_iqr > 0.3 and loss < 0.05, the rest noise."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        f = [rng.uniform(0, 1.5), rng.uniform(0, 1), rng.uniform(0, 2), rng.uniform(0, 0.1),
             rng.uniform(0, 1), rng.uniform(0, 1)]
        above = f[0] > 0.3
        out.append({"run_id": str(i), "split": "train", "kind": "x", "first": "bbr",
                    "label": P.ABOVE if above else P.BELOW, "features": f})
    return out


def test_the_fit_finds_a_rule_that_separates_and_says_how_well() -> None:
    rows = _rows(600, 1)
    clf = P.fit_classifier(rows, 1e-3)
    acc = P.accuracy(_rows(300, 2), clf)
    assert acc["all"]["accuracy"] >= 0.95, acc
    # the deciding feature carries the weight; pure noise does not decide
    w = clf["by_alg"]["bbr"]["weights"]
    assert w[0] > 5 * max(abs(x) for x in w[1:]), w
    assert set(clf) >= {"bin_ms", "window_s", "min_s", "hold_s", "features", "weights",
                        "bias", "by_alg", "above", "below"}
    with pytest.raises(P.PathClassError, match="one class only"):
        P.fit([r for r in rows if r["label"] == P.ABOVE])


def test_the_probe_table_runs_one_algorithm_and_never_switches() -> None:
    tab = json.loads((ROOT / "models" / "portfolio.json").read_text())
    algs = P.table_algorithms(tab)
    assert {"bbr", "iris", "mocc"} <= set(algs), algs
    probe = P.probe_table(tab, "mocc")
    assert set(probe["classes"]) == {tab["default_class"], P.ABOVE, P.BELOW}
    for entries in probe["classes"].values():
        assert {e["alg"] for e in entries} == {"mocc"} and len(entries) == 5, entries
    assert all(w == 0 for w in probe["classifier"]["weights"])
    assert "evaluation" not in probe and "classifier_source" not in probe
    with pytest.raises(P.PathClassError, match="no entry"):
        P.probe_table(tab, "jury")


@pytest.mark.skipif(not AGENT.is_file(), reason="needs target/release/ccp-agent "
                    "(cargo build --release -p ccp-agent)")
def test_the_agent_scores_a_flow_as_the_fit_does(tmp_path: Path) -> None:
    # train what you serve: the same features through the same rule, in Rust and Python
    clf = {**P.KNOBS, "min_s": 2.0, "window_s": 1.0, "features": P.FEATURES,
           "weights": [0.3, -0.2, 0.5, 1.5, 0.7, -0.4], "bias": -0.9,
           "by_alg": {"bbr": {"weights": [1.1, 0.4, -0.6, 2.0, -0.3, 0.2], "bias": -1.7}},
           "above": "cellular", "below": "links"}
    entries = [{"alg": "bbr", "w": None, "o": [0.9, 0.6, 0.95]},
               {"alg": "cubic", "w": None, "o": [0.8, 0.6, 0.99]}]
    tab = {"version": 1, "default_class": "all",
           "classes": {"all": entries, "links": entries, "cellular": entries},
           "classifier": clf}
    models = tmp_path / "models"
    models.mkdir()
    (models / "portfolio.json").write_text(json.dumps(tab))
    trace = ROOT / "datapath" / "sim" / "scenarios" / "traces" / "ATT-LTE-driving-2016.down"
    shutil.copy(trace, tmp_path / "t.down")
    seen = set()
    for alg_w, link in [("0.8, 0.1, 0.1", 'trace = "t.down"\nbuffer_bdp = 1.5'),
                        ("0.1, 0.1, 0.8", "rate_mbps = 20\nbuffer_bdp = 1.0\nloss = 0.002")]:
        sc = tmp_path / "s.toml"
        sc.write_text(f"duration_s = 4\nseed = 1\n[link]\n{link}\n[[flow]]\nalg = \"auto\"\n"
                      f"w = [{alg_w}]\nrtt_ms = 50\n")
        p = subprocess.run([str(AGENT), "--sim", str(sc), "--models", str(models), "--json"],
                           capture_output=True, text=True, timeout=120, check=True)
        f = json.loads(p.stdout)["flows"][0]
        c = f["class"]
        feats = [c["features"][k] for k in P.FEATURES]
        assert any(x > 0 for x in feats), c
        # bbr has its own rule, cubic the pooled one (every class is the same: no switch)
        ours = P.score(clf, feats, f["alg"])
        assert math.isclose(ours, c["score"], rel_tol=1e-9, abs_tol=1e-9), (ours, c)
        assert c["class"] == (P.ABOVE if ours > 0 else P.BELOW)
        seen.add(f["alg"])
    assert seen == {"bbr", "cubic"}, seen
