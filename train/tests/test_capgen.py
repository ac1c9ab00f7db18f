"""Tests of the synthetic capacity generator (ccp_train.capgen, docs/capacity-model.md).

The tolerances of ``test_generated_statistics_match_the_train_split`` are the doc's, fixed
before any generated statistic was seen.
"""

import json
import math
import random
import re
import zlib
from pathlib import Path

import numpy as np
import pytest

from ccp_train import capgen, corpus

KINDS = sorted({t.kind for t in corpus.select("train")} - {"synthetic"})
DRAWS = 1000          # per kind, of 60 s each
TOL_MEAN_REL = 0.15   # geometric mean of the draws' means vs the recordings'
TOL_CV_ABS, TOL_CV_REL = 0.10, 0.20
TOL_ACF = 0.10
TOL_OUTAGE = 0.03


@pytest.fixture(scope="module")
def model() -> capgen.CapacityModel:
    return capgen.default_model()


@pytest.fixture(scope="module")
def train_stats() -> dict[str, dict[str, float]]:
    out = {}
    for kind in KINDS:
        grids = [capgen.grid_rates(t) for t in corpus.select("train", [kind])]
        out[kind] = capgen.kind_stats(grids)
    return out


def _trace(path: Path, fmt: str = "tput", kind: str = "toy") -> corpus.Trace:
    return corpus.Trace(str(path), fmt, kind, "down", 0.0, 0.0, 0.0, 0.0, "test")


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _parse_log(path: Path) -> tuple[np.ndarray, np.ndarray]:
    rows = [line.split() for line in path.read_text().splitlines() if line.strip()]
    assert all(len(r) == 2 for r in rows)
    assert all(re.fullmatch(r"\d+\.\d{6}", x) for r in rows for x in r), "6 decimals"
    a = np.array(rows, dtype=float)
    return a[:, 0], a[:, 1]


# ---- (a) the generated statistics match the train split's, per kind


def test_every_train_kind_has_a_model(model, train_stats):
    assert set(model.kinds) == set(KINDS)
    assert "synthetic" not in model.kinds
    for kind in KINDS:     # the model keeps the statistics it was fitted to
        for k, v in train_stats[kind].items():
            assert model.kinds[kind].target[k] == pytest.approx(v, rel=1e-9), (kind, k)


@pytest.mark.parametrize("kind", KINDS)
def test_generated_statistics_match_the_train_split(model, train_stats, kind):
    rng = np.random.default_rng([0, zlib.crc32(kind.encode())])   # as `capgen fit` draws
    per = [capgen.stats(model.sample(kind, 60.0, rng)) for _ in range(DRAWS)]
    gen = {k: float(np.nanmean([s[k] for s in per])) for k in capgen.STAT_KEYS[1:]}
    means = np.array([s["mean_mbps"] for s in per])
    gen["mean_mbps"] = float(np.exp(np.log(means[means > 0]).mean()))
    want = train_stats[kind]
    msg = f"{kind}: train {want} vs generated {gen}"
    assert abs(gen["mean_mbps"] / want["mean_mbps"] - 1) <= TOL_MEAN_REL, msg
    assert abs(gen["cv"] - want["cv"]) <= max(TOL_CV_ABS, TOL_CV_REL * want["cv"]), msg
    assert abs(gen["acf_100ms"] - want["acf_100ms"]) <= TOL_ACF, msg
    assert abs(gen["acf_1s"] - want["acf_1s"]) <= TOL_ACF, msg
    assert abs(gen["outage_share"] - want["outage_share"]) <= TOL_OUTAGE, msg


def test_kind_stats_definition():
    # two windows of 10 Mbit/s, one (short) recording of 1000: geometric mean 100
    s = capgen.kind_stats([np.full(1200, 10.0), np.full(300, 1000.0)])
    assert s["mean_mbps"] == pytest.approx(100.0)
    assert s["arith_mean_mbps"] == pytest.approx(505.0)
    assert (s["cv"], s["acf_100ms"], s["acf_1s"], s["outage_share"]) == (0.0, 1.0, 1.0, 0.0)
    assert s["recordings"] == 2
    # each recording counts once, whatever its number of windows
    on_off = np.tile(np.r_[np.full(9, 4.0), 0.0], 60)          # 10 % outage
    s = capgen.kind_stats([np.tile(on_off, 10), np.full(600, 4.0)])
    assert s["outage_share"] == pytest.approx(0.05)


def test_stats_of_simple_series():
    s = capgen.stats(np.r_[np.zeros(5), np.full(95, 2.0)])
    assert s["mean_mbps"] == pytest.approx(1.9)
    assert s["outage_share"] == pytest.approx(0.05)
    x = np.sin(np.arange(2000) * 2 * np.pi / 40) + 2.0          # period 4 s
    s = capgen.stats(x)
    assert s["acf_100ms"] == pytest.approx(math.cos(2 * np.pi / 40), abs=0.01)
    assert s["acf_1s"] == pytest.approx(0.0, abs=0.01)
    assert s["cv"] == pytest.approx(math.sqrt(0.5) / 2, rel=1e-3)
    z = capgen.stats(np.zeros(10))
    assert (z["mean_mbps"], z["cv"], z["outage_share"]) == (0.0, 0.0, 1.0)


# ---- (b) determinism


def test_same_seed_same_output(model):
    for kind in KINDS:
        a = model.sample(kind, 30.0, np.random.default_rng(7))
        b = model.sample(kind, 30.0, np.random.default_rng(7))
        c = model.sample(kind, 30.0, np.random.default_rng(8))
        assert a.shape == (300,) and np.array_equal(a, b) and not np.array_equal(a, c)
        d = model.sample(kind, 30.0, random.Random(7))
        assert np.array_equal(d, model.sample(kind, 30.0, random.Random(7)))
    assert model.sample("5g", 0.05, np.random.default_rng(1)).shape == (1,)
    assert model.sample("5g", 0.25, np.random.default_rng(1)).shape == (3,)


def test_model_round_trips_through_json(model):
    again = capgen.CapacityModel.from_dict(json.loads(json.dumps(model.to_dict())))
    assert again == model
    a = again.sample("satellite-leo", 20.0, np.random.default_rng(3))
    assert np.array_equal(a, model.sample("satellite-leo", 20.0, np.random.default_rng(3)))


def test_synthetic_trace_is_cached_and_reproducible(model, tmp_path):
    p = capgen.synthetic_trace(random.Random(5), 12.0, tmp_path, model=model)
    assert re.fullmatch(r"synth-([a-z0-9-]+)-[0-9a-f]{16}\.tput", p.name)
    assert p.parent == tmp_path
    assert p.name[len("synth-"):].rsplit("-", 1)[0] in corpus.DEFAULT_KIND_WEIGHTS
    assert capgen.synthetic_trace(random.Random(5), 12.0, tmp_path, model=model) == p
    t, r = _parse_log(p)
    assert t.size == 120 and np.any(r > 0)
    q = capgen.synthetic_trace(random.Random(5), 12.0, tmp_path, {"5g": 1.0}, model=model)
    assert q.name.startswith("synth-5g-")
    # a corpus kind the model does not have (recorded synthetic traces) is dropped
    q = capgen.synthetic_trace(random.Random(5), 12.0, tmp_path, {"synthetic": 5.0, "wifi": 1.0},
                               model=model)
    assert q.name.startswith("synth-wifi-")


# ---- (c) write_log round-trips


def test_write_log_round_trips(model, tmp_path):
    rates = model.sample("wifi", 40.0, np.random.default_rng(11))
    p = capgen.write_log(rates, tmp_path / "sub" / "x.tput")
    t, r = _parse_log(p)
    assert t[0] == 0.0 and np.all(np.diff(t) > 0)
    assert np.allclose(np.diff(t), 0.1, atol=1e-6)
    assert np.all(r >= 0) and np.any(r > 0)
    assert np.allclose(r, rates, atol=1e-6)
    # what the simulator serves from the file is the draw
    assert np.allclose(capgen.grid_rates(_trace(p)), rates, atol=1e-5)


def test_write_log_floors_an_all_zero_draw(tmp_path):
    p = capgen.write_log(np.zeros(50), tmp_path / "z.tput")
    t, r = _parse_log(p)
    assert t.size == 50 and r[0] > 0 and np.all(r[1:] == 0)
    # a rate that rounds to 0 at 6 decimals is an outage too
    _, r = _parse_log(capgen.write_log(np.full(5, 1e-9), tmp_path / "y.tput"))
    assert r[0] > 0


# ---- (d) fit recovers known statistics


def test_grid_rates_follows_the_simulator(tmp_path):
    # held rates; gaps 1, 1, 2: the last sample holds the median gap (1 s)
    g = capgen.grid_rates(_trace(_write(tmp_path / "a.tput", "# c\n10 8\n11 0\n12 16\n14 16\n")))
    assert g.size == 50
    assert np.allclose(g[:10], 8) and np.allclose(g[10:20], 0) and np.allclose(g[20:], 16)
    # the same time twice: the later sample wins; a sample inside a bin is averaged
    g = capgen.grid_rates(_trace(_write(tmp_path / "b.tput", "0 1\n0 10\n0.25 20\n0.5 10\n")))
    assert np.allclose(g, [10, 10, 15, 20, 20, 10, 10, 10])
    # mahimahi: 4 packets per 100 ms period (the last timestamp is the next period's 0)
    g = capgen.grid_rates(_trace(_write(tmp_path / "m", "0\n0\n50\n100\n"), "mahimahi"))
    assert np.allclose(g, [4 * 12000 / 0.1 / 1e6])
    g = capgen.grid_rates(_trace(_write(tmp_path / "n", "\n".join(map(str, range(1, 201)))),
                                 "mahimahi"))
    assert g.size == 2 and np.allclose(g, 12.0)


def test_fit_recovers_a_constant_link(tmp_path):
    p = _write(tmp_path / "c.tput", "".join(f"{i} 12\n" for i in range(300)))
    m = capgen.fit([_trace(p)])
    km = m.kinds["toy"]
    assert km.target["cv"] == 0.0 and km.target["acf_1s"] == 1.0
    assert km.target["outage_share"] == 0.0 and km.p_outage == 0.0
    x = m.sample("toy", 60.0, np.random.default_rng(1))
    s = capgen.stats(x)
    assert s["mean_mbps"] == pytest.approx(12.0, rel=1e-9)
    assert s["cv"] < 1e-6 and s["acf_100ms"] == 1.0 and s["acf_1s"] == 1.0
    assert s["outage_share"] == 0.0


def test_fit_recovers_outages(tmp_path):
    # 9 s at 10 Mbit/s, 1 s outage, for 600 s: outage share 0.1, outages of 10 bins
    p = _write(tmp_path / "o.tput",
               "".join(f"{i} {0 if i % 10 == 9 else 10}\n" for i in range(600)))
    m = capgen.fit([_trace(p)])
    km = m.kinds["toy"]
    assert km.target["outage_share"] == pytest.approx(0.1)
    assert set(km.outage_bins) == {10}
    assert km.p_outage == pytest.approx(1 / 90, rel=0.02)
    rng = np.random.default_rng(2)
    draws = [m.sample("toy", 60.0, rng) for _ in range(300)]
    assert np.mean([capgen.stats(x)["outage_share"] for x in draws]) == pytest.approx(0.1, abs=0.02)
    assert all(np.allclose(x[x > 0], 10.0) for x in draws)    # the on-state rate is the level


def test_fit_recovers_a_log_normal_ar1(tmp_path):
    # the model's own process: latent AR(1) phi = 0.9 per 100 ms, log-rate sd 0.4, no outage
    rng = np.random.default_rng(4)
    traces = []
    for i in range(20):
        z = capgen._ar1(0.9, rng.standard_normal((1, 1200)))[0]
        rates = 20.0 * math.exp(rng.normal(0, 0.5)) * np.exp(0.4 * z)
        traces.append(_trace(capgen.write_log(rates, tmp_path / f"ar{i}.tput")))
    m = capgen.fit(traces)
    km = m.kinds["toy"]
    assert km.phi == pytest.approx(0.9, abs=0.02)
    assert km.scale == pytest.approx(1.0, abs=0.15)
    assert km.p_outage == 0.0
    want = km.target
    g = np.random.default_rng(5)
    gen = capgen.kind_stats([m.sample("toy", 60.0, g) for _ in range(300)])
    assert gen["mean_mbps"] == pytest.approx(want["mean_mbps"], rel=0.1)
    for k, tol in (("cv", 0.03), ("acf_100ms", 0.02), ("acf_1s", 0.03)):
        assert gen[k] == pytest.approx(want[k], abs=tol), k


# ---- (e) bad input


@pytest.mark.parametrize("duration", [0.0, -1.0, math.nan, math.inf, 1e9, "60", None])
def test_bad_duration_is_refused(model, duration):
    with pytest.raises(ValueError, match="duration_s"):
        model.sample("5g", duration, np.random.default_rng(0))


def test_bad_input_is_refused(model, tmp_path):
    with pytest.raises(ValueError, match="unknown kind 'dial-up'"):
        model.sample("dial-up", 10.0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="rng"):
        model.sample("5g", 10.0, 42)
    for bad in ([1.0, math.nan], [1.0, -2.0], [], [[1.0, 2.0]], [math.inf]):
        with pytest.raises(ValueError, match="write_log"):
            capgen.write_log(bad, tmp_path / "bad.tput")
        with pytest.raises(ValueError, match="rates"):
            capgen.stats(bad)
    with pytest.raises(ValueError, match="step_s"):
        capgen.write_log([1.0], tmp_path / "bad.tput", step_s=0.0)
    with pytest.raises(ValueError, match="no traces"):
        capgen.fit([])
    with pytest.raises(ValueError, match="unknown kind"):
        capgen.synthetic_trace(random.Random(1), 10.0, tmp_path, {"dial-up": 1.0}, model=model)
    with pytest.raises(ValueError, match="weight"):
        capgen.synthetic_trace(random.Random(1), 10.0, tmp_path, {"5g": math.nan}, model=model)
    for weights in ({"5g": 0.0}, {"synthetic": 1.0}):
        with pytest.raises(ValueError, match="no kind"):
            capgen.synthetic_trace(random.Random(1), 10.0, tmp_path, weights, model=model)
    with pytest.raises(ValueError, match="duration_s"):
        capgen.synthetic_trace(random.Random(1), -5.0, tmp_path, model=model)
    with pytest.raises(ValueError, match="schema"):
        capgen.CapacityModel.from_dict({"schema": 99})
    d = model.to_dict()
    d["kinds"]["5g"]["phi"] = 1.5
    with pytest.raises(ValueError, match="phi"):
        capgen.CapacityModel.from_dict(d)
    with pytest.raises(ValueError, match="never|nothing"):
        capgen.fit([_trace(_write(tmp_path / "zero.tput", "0 0\n1 0\n"))])
