"""A synthetic link-capacity generator fitted to the trace corpus's ``train`` split.

``docs/capacity-model.md`` states the model in formulas and why it is this one; in short, per
kind (``wifi``, ``cellular-3g``, ``cellular-lte``, ``5g``, ``satellite-leo``,
``wired-broadband``) and on the simulator's 100 ms grid:

- a **level** ``M`` per draw (its mean rate outside outages), from the kind's empirical
  distribution of that of the 60 s windows of its recordings (a 21-point quantile table of
  ``log M``: across-recording variation);
- an **on/outage** two-state semi-Markov chain: from "on", an outage starts with probability
  ``p_outage`` per 100 ms bin (geometric on-periods); an outage lasts a length drawn from the
  kind's empirical outage lengths (32 equal-probability atoms);
- in "on", the log-rate follows a latent Gaussian AR(1) ``z_t = phi z_{t-1} + sqrt(1-phi^2)
  e_t`` mapped through the kind's empirical quantile function of the normalised on-state
  log-rate (a Gaussian copula, so the heavy lower tail of the recordings is kept), scaled by
  ``scale``: ``x_t = exp(scale * Q(z_t))``; outages are ``x_t = 0``;
- the draw is scaled so that its mean outside outages is exactly ``M``:
  ``rate_t = M x_t / mean(x_s : s not in outage)``.

``phi`` and ``scale`` are fitted by simulated moments (common random numbers) so that 60 s
draws have the kind's mean coefficient of variation and autocorrelations at 100 ms and 1 s;
everything else is read off the recordings. :func:`fit` does this for any set of traces,
:func:`default_model` for the corpus's ``train`` split (cached; about 2 s on an idle
2-core machine).

The statistics (:func:`stats`, :func:`kind_stats`) are those of the capacity as the simulator
serves it, on a 100 ms grid (:func:`grid_rates`): a ``mahimahi`` file's packets per bin times
1500 x 8 bits, a ``tput`` log's held rate. ``python -m ccp_train.capgen fit`` prints the fitted
parameters and the train split's statistics next to the generated ones; ``python -m
ccp_train.capgen sample --kind 5g --duration-s 60 --seed 1 --out x.tput`` writes one draw.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import math
import os
import random
import statistics
import sys
import tempfile
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from . import corpus

#: the model's grid (s): statistics, fitting and sampling all use it
STEP_S = 0.1
#: statistics are taken on windows of this length (s), the length of a calibration draw
WINDOW_S = 60.0
#: a bin is an outage when its rate is at most this share of the series' mean (0 always is)
OUTAGE_SHARE_OF_MEAN = 0.01
#: bits one mahimahi delivery opportunity carries
PACKET_BITS = 1500 * 8
#: the simulator's largest rate (Mbit/s) and longest log (s)
MAX_RATE_MBPS = 1e6
MAX_DURATION_S = 86_400.0
#: the latent Gaussian scores at which the on-state quantile function is tabulated
Z_GRID = tuple(float(z) for z in np.linspace(-4.0, 4.0, 33))
#: the probabilities at which the level (log window mean) quantile function is tabulated
LEVEL_P = tuple(float(p) for p in np.linspace(0.0, 1.0, 21))
#: equal-probability atoms of the outage-length distribution
N_OUTAGE_ATOMS = 32
#: calibration: draws of WINDOW_S each, with common random numbers (searching phi, then the
#: final scale)
N_CAL = 200
N_CAL_FINAL = 1000
#: the range of the latent AR(1) coefficient searched (at the 100 ms step)
PHI_RANGE = (0.1, 0.9999)
STAT_KEYS = ("mean_mbps", "cv", "acf_100ms", "acf_1s", "outage_share")
SCHEMA = 1


# ----------------------------------------------------------------------------------------
# the capacity of a recording on the grid, and its statistics


def read_log(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """A throughput log's ``(times, rates)`` as the simulator reads it: comments dropped,
    times relative to the first sample, a later sample at the same time replacing the
    earlier one."""
    text = path.read_text()
    if "#" in text:
        text = "\n".join(s for s in text.splitlines() if not s.strip().startswith("#"))
    try:
        a = np.array(text.split(), dtype=float)
    except ValueError as e:
        raise ValueError(f"{path}: not a throughput log (`time_s rate_mbps` per line): {e}") \
            from e
    if a.size == 0 or a.size % 2:
        raise ValueError(f"{path}: not a throughput log (`time_s rate_mbps` per line)")
    t, r = a[0::2], a[1::2]
    if not (np.all(np.isfinite(a)) and np.all(np.diff(t) >= 0) and np.all(r >= 0)):
        raise ValueError(f"{path}: times must be in order, rates finite and >= 0")
    keep = np.append(t[1:] != t[:-1], True)           # the same time twice: the later wins
    t, r = t[keep], r[keep]
    return t - t[0], r


def log_period(t: np.ndarray) -> float:
    """A log's period (s): its last sample holds for the median sampling interval, the upper
    one of an even count, 1 s alone (as the simulator takes it)."""
    gaps = np.sort(np.diff(t))
    hold = float(gaps[len(gaps) // 2]) if len(gaps) else 1.0
    return float(t[-1]) + hold


def log_mbit_by(t: np.ndarray, r: np.ndarray, at_s: np.ndarray) -> np.ndarray:
    """Mbit a held-rate log (``read_log``'s times and rates) delivers from 0 to each time of
    ``at_s``, the log repeating with :func:`log_period`: the simulator's ``B(t)``."""
    period = log_period(t)
    ends = np.append(t, period)
    cum = np.concatenate([[0.0], np.cumsum(r * np.diff(ends))])   # Mbit delivered by ends[i]
    c, tau = np.divmod(np.asarray(at_s, dtype=float), period)
    return c * cum[-1] + np.interp(tau, ends, cum)


def _tput_grid(t: np.ndarray, r: np.ndarray, step_s: float) -> np.ndarray:
    """A held-rate log on the grid over one period."""
    n = max(1, math.ceil(log_period(t) / step_s - 1e-9))
    bits = log_mbit_by(t, r, np.arange(n + 1) * step_s)
    return np.maximum(np.diff(bits) / step_s, 0.0)


def _mahimahi_grid(path: Path, step_s: float) -> np.ndarray:
    """A mahimahi file's packets per bin over one period (the last timestamp), as Mbit/s."""
    try:
        ms = np.array(path.read_text().split(), dtype=np.int64)
    except ValueError as e:
        raise ValueError(f"{path}: not a mahimahi trace (one integer ms per line): {e}") from e
    if ms.size == 0 or ms[-1] <= 0 or np.any(np.diff(ms) < 0) or ms[0] < 0:
        raise ValueError(f"{path}: not a mahimahi trace (non-decreasing ms, last one > 0)")
    period = int(ms[-1])
    folded = np.sort(ms % period)                 # the last timestamp is the next period's 0
    step_ms = step_s * 1e3
    n = max(1, math.ceil(period / step_ms - 1e-9))
    c, tau = np.divmod(np.arange(n + 1) * step_ms, period)
    count = c * ms.size + np.searchsorted(folded, tau, side="left")
    return np.diff(count) * PACKET_BITS / step_s / 1e6


def grid_rates(trace: corpus.Trace, step_s: float = STEP_S) -> np.ndarray:
    """A trace's capacity (Mbit/s) on a ``step_s`` grid over one period, as the simulator
    serves it: a ``mahimahi`` file's packets per bin x 1500 x 8 bits, a ``tput`` log's held
    rate (averaged over the bin where a sample starts inside it). A period that is not a
    whole number of bins ends with a bin that runs into the next period."""
    _check_step(step_s)
    if trace.format == "mahimahi":
        return _mahimahi_grid(trace.file, step_s)
    if trace.format == "tput":
        return _tput_grid(*read_log(trace.file), step_s)
    raise ValueError(f"{trace.path}: unknown trace format {trace.format!r} (mahimahi or tput)")


def _check_step(step_s: float) -> None:
    if not (isinstance(step_s, int | float) and math.isfinite(step_s) and 0 < step_s <= 1.0):
        raise ValueError(f"step_s = {step_s!r}: give a grid step in (0, 1] s")


def _lags(step_s: float) -> tuple[int, int]:
    return max(1, round(0.1 / step_s)), max(1, round(1.0 / step_s))


def _stats_batch(x: np.ndarray, step_s: float = STEP_S) -> dict[str, np.ndarray]:
    """:func:`stats` of each row of ``x`` (rows of equal length)."""
    n = x.shape[1]
    mean = x.mean(axis=1)
    d = x - mean[:, None]
    var = (d * d).mean(axis=1)
    sd = np.sqrt(var)
    # a constant row (up to rounding) has cv 0 and is perfectly autocorrelated
    const = sd <= 1e-9 * np.maximum(np.abs(mean), 1e-300)
    safe_mean = np.where(mean > 0, mean, 1.0)
    cv = np.where(const | (mean <= 0), 0.0, sd / safe_mean)
    out: dict[str, np.ndarray] = {"mean_mbps": mean, "cv": cv}
    ss = np.where(const, 1.0, var * n)
    for key, lag in zip(("acf_100ms", "acf_1s"), _lags(step_s), strict=True):
        if n <= lag:
            out[key] = np.full(x.shape[0], np.nan)
            continue
        a = (d[:, :-lag] * d[:, lag:]).sum(axis=1) / ss
        out[key] = np.where(const, 1.0, a)
    out["outage_share"] = (x <= OUTAGE_SHARE_OF_MEAN * mean[:, None]).mean(axis=1)
    return out


def stats(rates: np.ndarray, step_s: float = STEP_S) -> dict[str, float]:
    """Statistics of a capacity series (Mbit/s, one value per ``step_s`` bin).

    - ``mean_mbps``: the mean rate;
    - ``cv``: standard deviation (population) / mean (0 for a constant or all-zero series);
    - ``acf_100ms``, ``acf_1s``: the sample autocorrelation (mean-subtracted, normalised by the
      lag-0 sum) at lags 100 ms and 1 s; 1 for a constant series, NaN when the series is not
      longer than the lag;
    - ``outage_share``: the share of bins whose rate is at most 1 % of the series' mean
      (:data:`OUTAGE_SHARE_OF_MEAN`; a zero bin always counts, an all-zero series is 1).
    """
    _check_step(step_s)
    x = _as_rates(rates, "rates")
    return {k: float(v[0]) for k, v in _stats_batch(x[None, :], step_s).items()}


def _as_rates(rates: object, what: str) -> np.ndarray:
    x = np.asarray(rates, dtype=float)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"{what}: give a non-empty 1-D sequence of rates (Mbit/s)")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{what}: every rate must be finite (found NaN or infinity)")
    if np.any(x < 0):
        raise ValueError(f"{what}: rates must be >= 0 (0 is an outage)")
    return x


def windows(rates: np.ndarray, window_s: float = WINDOW_S, step_s: float = STEP_S
            ) -> list[np.ndarray]:
    """Consecutive ``window_s`` windows of a series (a series shorter than one window is one
    window; an incomplete tail after the last whole window is dropped)."""
    w = max(1, round(window_s / step_s))
    if len(rates) < w:
        return [rates]
    return [rates[i * w:(i + 1) * w] for i in range(len(rates) // w)]


def kind_stats(recordings: Sequence[np.ndarray], window_s: float = WINDOW_S,
               step_s: float = STEP_S) -> dict[str, float]:
    """The statistics of a kind (the ones :func:`fit` matches and the tests check): every
    recording is cut into :func:`windows`, :func:`stats` is taken on each window, averaged
    over the windows of a recording, then over the recordings (each recording counts once,
    whatever its length). The mean rate is averaged in log space (``mean_mbps`` is a geometric
    mean over recordings; all-zero windows are left out of it only), because a kind's
    recording means span two orders of magnitude; ``arith_mean_mbps`` is the plain average of
    the recordings' mean rate, for information. ``recordings`` is their number."""
    per: dict[str, list[float]] = {k: [] for k in (*STAT_KEYS, "arith_mean_mbps")}
    _check_step(step_s)
    for rec in recordings:
        ws = windows(_as_rates(rec, "recording"), window_s, step_s)
        st = _stats_batch(np.stack(ws), step_s)          # the windows have one length
        means = st["mean_mbps"]
        if np.any(means > 0):
            per["mean_mbps"].append(float(np.mean(np.log(means[means > 0]))))
        per["arith_mean_mbps"].append(float(means.mean()))
        for k in STAT_KEYS[1:]:
            per[k].append(float(np.nanmean(st[k])))
    if not per["mean_mbps"]:
        raise ValueError("no recording delivers anything: nothing to take statistics of")
    out = {k: float(np.nanmean(v)) for k, v in per.items()}
    out["mean_mbps"] = math.exp(out["mean_mbps"])
    out["recordings"] = float(len(recordings))
    return out


# ----------------------------------------------------------------------------------------
# the model


@dataclass(frozen=True)
class KindModel:
    """The fitted parameters of one kind (see the module header and the doc).

    ``level_log_q``: ``log`` of a 60 s window's mean rate outside outages (Mbit/s, the *on
    mean*) at probabilities :data:`LEVEL_P`; ``shape_q``: the normalised on-state log-rate
    ``log(rate / on mean)`` at the latent
    Gaussian scores :data:`Z_GRID`; ``scale``: the factor on ``shape_q``; ``phi``: the latent
    AR(1) coefficient per 100 ms; ``p_outage``: the probability per 100 ms "on" bin that an
    outage starts; ``outage_bins``: equal-probability atoms of the outage length (100 ms bins);
    ``target``: the kind's statistics the model was fitted to (:func:`kind_stats`)."""

    kind: str
    level_log_q: tuple[float, ...]
    shape_q: tuple[float, ...]
    scale: float
    phi: float
    p_outage: float
    outage_bins: tuple[int, ...]
    target: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        bad = []
        if len(self.level_log_q) != len(LEVEL_P) or np.any(np.diff(self.level_log_q) < 0):
            bad.append(f"level_log_q needs {len(LEVEL_P)} non-decreasing values")
        if len(self.shape_q) != len(Z_GRID) or np.any(np.diff(self.shape_q) < 0):
            bad.append(f"shape_q needs {len(Z_GRID)} non-decreasing values")
        if not all(math.isfinite(v) for v in (*self.level_log_q, *self.shape_q)):
            bad.append("level_log_q and shape_q must be finite")
        if not (math.isfinite(self.scale) and self.scale >= 0):
            bad.append(f"scale {self.scale} must be finite and >= 0")
        if not (0 <= self.phi < 1):
            bad.append(f"phi {self.phi} must be in [0, 1)")
        if not (0 <= self.p_outage <= 1):
            bad.append(f"p_outage {self.p_outage} must be in [0, 1]")
        if self.p_outage > 0 and not self.outage_bins:
            bad.append("p_outage > 0 needs outage_bins")
        if any(int(b) < 1 for b in self.outage_bins):
            bad.append("outage_bins are lengths >= 1 bin")
        if bad:
            raise ValueError(f"kind {self.kind!r}: " + "; ".join(bad))

    @property
    def mean_outage_s(self) -> float:
        return float(np.mean(self.outage_bins)) * STEP_S if self.outage_bins else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["target"] = dict(self.target)
        for k in ("level_log_q", "shape_q", "outage_bins"):
            d[k] = list(d[k])
        return d

    @classmethod
    def from_dict(cls, d: Mapping) -> KindModel:
        try:
            return cls(kind=str(d["kind"]),
                       level_log_q=tuple(float(v) for v in d["level_log_q"]),
                       shape_q=tuple(float(v) for v in d["shape_q"]),
                       scale=float(d["scale"]), phi=float(d["phi"]),
                       p_outage=float(d["p_outage"]),
                       outage_bins=tuple(int(v) for v in d["outage_bins"]),
                       target={str(k): float(v) for k, v in d.get("target", {}).items()})
        except (KeyError, TypeError) as e:
            raise ValueError(f"not a capacity-model kind: {e!r}") from e

    # ---- drawing

    def _level(self, rng: np.random.Generator) -> float:
        return math.exp(float(np.interp(rng.random(), LEVEL_P, self.level_log_q)))

    def _on_mask(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """The on/outage chain over ``n`` bins, started in its stationary distribution."""
        on = np.ones(n, dtype=bool)
        if self.p_outage <= 0 or not self.outage_bins:
            return on
        atoms = np.asarray(self.outage_bins, dtype=np.int64)
        mean_off = float(atoms.mean())
        pi_off = mean_off / (mean_off + 1.0 / self.p_outage)
        t = 0
        if rng.random() < pi_off:     # inside an outage: length-biased, uniform position in it
            length = int(rng.choice(atoms, p=atoms / atoms.sum()))
            t = int(rng.integers(1, length + 1))
            on[:t] = False
        while True:
            t += int(rng.geometric(self.p_outage))
            if t >= n:
                return on
            length = int(atoms[rng.integers(atoms.size)])
            on[t:t + length] = False
            t += length

    def _shape(self, z: np.ndarray, scale: float | None = None) -> np.ndarray:
        s = self.scale if scale is None else scale
        return np.exp(s * np.interp(z, Z_GRID, self.shape_q))


def _ar1(phi: float, e: np.ndarray) -> np.ndarray:
    """Rows of a stationary unit-variance AR(1), ``z_t = phi z_{t-1} + sqrt(1-phi^2) e_t``,
    ``z_0 = e_0``, from iid standard normals ``e`` (N, n); blocked so that it is vectorised."""
    big_n, n = e.shape
    b = 64
    nb = -(-n // b)
    k = np.arange(b)
    diff = k[:, None] - k[None, :]
    tri = np.where(diff >= 0, phi ** np.maximum(diff, 0), 0.0)    # tri[i, j] = phi^(i-j)
    x = np.zeros((big_n, nb * b))
    x[:, :n] = math.sqrt(1.0 - phi * phi) * e
    x[:, 0] = e[:, 0]
    y = (x.reshape(big_n, nb, b) @ tri.T)
    carry_w = phi ** (k + 1.0)
    prev = np.zeros(big_n)
    for j in range(nb):
        y[:, j, :] += carry_w * prev[:, None]
        prev = y[:, j, -1]
    return y.reshape(big_n, nb * b)[:, :n]


def _as_np_rng(rng: np.random.Generator | random.Random) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, random.Random):
        return np.random.default_rng(rng.getrandbits(128))
    raise ValueError(f"rng: give a numpy.random.Generator or a random.Random, not "
                     f"{type(rng).__name__}")


@dataclass(frozen=True)
class CapacityModel:
    """Per-kind capacity models on the :data:`STEP_S` grid; JSON-able (``to_dict``)."""

    kinds: dict[str, KindModel]
    source: str = ""

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, "model": "ccp_train.capgen", "step_s": STEP_S,
                "window_s": WINDOW_S, "outage_share_of_mean": OUTAGE_SHARE_OF_MEAN,
                "z_grid": list(Z_GRID), "level_p": list(LEVEL_P), "source": self.source,
                "kinds": {k: m.to_dict() for k, m in self.kinds.items()}}

    @classmethod
    def from_dict(cls, d: Mapping) -> CapacityModel:
        if not isinstance(d, Mapping) or d.get("schema") != SCHEMA:
            raise ValueError(f"not a capacity model of schema {SCHEMA}")
        if (float(d.get("step_s", -1)) != STEP_S or list(d.get("z_grid", ())) != list(Z_GRID)
                or list(d.get("level_p", ())) != list(LEVEL_P)):
            raise ValueError("a capacity model of another grid (step_s, z_grid, level_p)")
        kinds = {str(k): KindModel.from_dict(v) for k, v in dict(d["kinds"]).items()}
        return cls(kinds, str(d.get("source", "")))

    def kind(self, kind: str) -> KindModel:
        try:
            return self.kinds[kind]
        except (KeyError, TypeError):
            raise ValueError(f"unknown kind {kind!r}: this model has "
                             f"{', '.join(self.kinds) or 'no kinds'}") from None

    def sample(self, kind: str, duration_s: float,
               rng: np.random.Generator | random.Random) -> np.ndarray:
        """``duration_s`` of the kind's capacity (Mbit/s) on the 100 ms grid
        (``ceil(duration_s / 0.1)`` bins), reproducible for a seeded ``rng``. The draw's mean
        over its non-outage bins is its level ``M``; it may be all zero (a draw shorter than an
        outage): :func:`write_log` then floors one bin."""
        m = self.kind(kind)
        if isinstance(duration_s, bool) or not isinstance(duration_s, int | float):
            raise ValueError(f"duration_s = {duration_s!r}: give a number of seconds")
        if not (math.isfinite(duration_s) and 0 < duration_s <= MAX_DURATION_S):
            raise ValueError(f"duration_s = {duration_s!r}: give a finite duration in "
                             f"(0, {MAX_DURATION_S:g}] s")
        g = _as_np_rng(rng)
        n = max(1, math.ceil(duration_s / STEP_S - 1e-9))
        level = m._level(g)
        on = m._on_mask(n, g)
        z = _ar1(m.phi, g.standard_normal((1, n)))[0]
        x = m._shape(z) * on
        if not on.any():
            return x
        return x * (level / float(x[on].mean()))


# ----------------------------------------------------------------------------------------
# fitting


def _wquantile(values: np.ndarray, weights: np.ndarray, probs: Sequence[float]) -> np.ndarray:
    """Weighted quantiles (the weighted empirical CDF at each value's mid-mass, interpolated)."""
    o = np.argsort(values, kind="stable")
    v, w = values[o], weights[o]
    c = (np.cumsum(w) - 0.5 * w) / w.sum()
    return np.interp(probs, c, v)


def _runs(off: np.ndarray) -> np.ndarray:
    """Lengths of the runs of True in a boolean array."""
    d = np.diff(np.concatenate([[0], off.astype(np.int8), [0]]))
    return np.flatnonzero(d == -1) - np.flatnonzero(d == 1)


def _crn(km: KindModel, draws: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Common random numbers for calibration: ``draws`` on/outage masks of :data:`WINDOW_S`
    and the latent's standard normals."""
    rng = np.random.default_rng(seed)
    n = round(WINDOW_S / STEP_S)
    on = np.stack([km._on_mask(n, rng) for _ in range(draws)])
    return on, rng.standard_normal((draws, n))


def _moments(q: np.ndarray, on: np.ndarray, scale: float) -> dict[str, float]:
    """Mean :func:`stats` over draws ``exp(scale q) * on``."""
    x = np.exp(scale * q) * on
    return {k: float(np.nanmean(v)) for k, v in _stats_batch(x).items()}


def _solve_scale(q: np.ndarray, on: np.ndarray, cv: float, start: float
                 ) -> tuple[float, dict[str, float]]:
    """The scale at which the draws' mean cv is ``cv``: a secant search on (log scale, log cv)
    from ``start`` (the cv grows with the scale)."""
    s0, m0 = start, _moments(q, on, start)
    if m0["cv"] <= 0 or cv <= 1e-6:
        return s0, m0
    s1 = min(max(s0 * cv / m0["cv"], 1e-3), 20.0)
    m1 = _moments(q, on, s1)
    for _ in range(8):
        if abs(m1["cv"] - cv) < 1e-3 * cv or m1["cv"] <= 0:
            break
        slope = ((math.log(m1["cv"]) - math.log(m0["cv"])) / (math.log(s1) - math.log(s0))
                 if s1 != s0 and m1["cv"] != m0["cv"] else 1.0)
        slope = min(max(slope, 0.2), 5.0)
        s2 = min(max(s1 * math.exp((math.log(cv) - math.log(m1["cv"])) / slope), 1e-3), 20.0)
        s0, m0, s1 = s1, m1, s2
        m1 = _moments(q, on, s1)
    return s1, m1


def _calibrate(km: KindModel, target: Mapping[str, float], seed: int) -> tuple[float, float]:
    """``(phi, scale)`` such that draws of :data:`WINDOW_S` match the target's ``cv``
    (exactly, by ``scale``) and, by ``phi``, its ``acf_100ms``, ``acf_1s`` and
    ``outage_share`` (least squares; a large scale pushes the lower tail of the on-state under
    the outage threshold), with common random numbers (the method of simulated moments):
    ``phi`` on :data:`N_CAL` draws, then the scale again on :data:`N_CAL_FINAL` fresh ones
    (the cv of a kind with long outages is noisy)."""
    on, e = _crn(km, N_CAL, seed)
    flat = (max(km.shape_q) - min(km.shape_q)) < 1e-9 or target["cv"] <= 1e-6
    last = [1.0]
    cache: dict[float, tuple[float, float]] = {}

    def loss(u: float) -> float:                 # u = log(1 - phi)
        if u not in cache:
            q = np.interp(_ar1(1.0 - math.exp(u), e), Z_GRID, km.shape_q)
            if flat:
                scale, m = 1.0, _moments(q, on, 1.0)
            else:
                scale, m = _solve_scale(q, on, target["cv"], last[0])
                last[0] = scale
            cache[u] = ((m["acf_100ms"] - target["acf_100ms"]) ** 2
                        + (m["acf_1s"] - target["acf_1s"]) ** 2
                        + (m["outage_share"] - target["outage_share"]) ** 2, scale)
        return cache[u][0]

    # a coarse scan (the loss can have a second, worse minimum near phi = 1 where a large
    # scale makes up the cv), then a golden-section search in the best point's bracket
    grid = np.linspace(math.log(1.0 - PHI_RANGE[1]), math.log(1.0 - PHI_RANGE[0]), 10)
    i = int(np.argmin([loss(float(u)) for u in grid]))
    lo, hi = float(grid[max(i - 1, 0)]), float(grid[min(i + 1, grid.size - 1)])
    g = (math.sqrt(5.0) - 1.0) / 2.0
    for _ in range(8):                            # golden-section search on u
        c, d = hi - g * (hi - lo), lo + g * (hi - lo)
        if loss(c) <= loss(d):
            hi = d
        else:
            lo = c
    best = min(cache, key=lambda u: cache[u][0])
    phi, scale = 1.0 - math.exp(best), cache[best][1]
    if not flat:
        on, e = _crn(km, N_CAL_FINAL, seed + 1)
        scale, _ = _solve_scale(np.interp(_ar1(phi, e), Z_GRID, km.shape_q), on, target["cv"],
                                scale)
    return phi, scale


def _fit_kind(kind: str, grids: Sequence[np.ndarray]) -> KindModel:
    """One kind's parameters from its recordings' grids (docs/capacity-model.md, Fitting)."""
    levels, level_w, ys, ys_w = [], [], [], []
    runs, runs_w = [], []
    n_runs = n_on = 0.0
    for g in grids:
        ws = windows(g)
        w_rec = 1.0 / len(ws)
        offs = []
        for w in ws:
            m = float(w.mean())
            off = w <= OUTAGE_SHARE_OF_MEAN * m
            offs.append(off)
            if m <= 0:
                continue
            m_on = float(w[~off].mean())             # the window's rate when not in outage
            levels.append(math.log(m_on))
            level_w.append(w_rec)
            y = np.log(w[~off] / m_on)
            ys.append(y)
            ys_w.append(np.full(y.size, w_rec / y.size))
        r = _runs(np.concatenate(offs))
        runs.append(r)
        runs_w.append(np.full(r.size, w_rec))
        n_runs += w_rec * r.size
        n_on += w_rec * float(sum(int((~o).sum()) for o in offs))
    if not levels:
        raise ValueError(f"kind {kind!r}: no recording delivers anything: nothing to fit")
    probs = [statistics.NormalDist().cdf(z) for z in Z_GRID]
    shape = _wquantile(np.concatenate(ys), np.concatenate(ys_w), probs)
    level = _wquantile(np.array(levels), np.array(level_w), LEVEL_P)
    all_runs = np.concatenate(runs)
    if all_runs.size and n_on > 0:
        p_out = min(1.0, n_runs / n_on)
        atoms = _wquantile(all_runs.astype(float), np.concatenate(runs_w),
                           (np.arange(N_OUTAGE_ATOMS) + 0.5) / N_OUTAGE_ATOMS)
        outage_bins = tuple(max(1, round(float(a))) for a in atoms)
    else:
        p_out, outage_bins = 0.0, ()
    target = kind_stats(grids)
    km = KindModel(kind, tuple(map(float, level)), tuple(map(float, shape)), 1.0, 0.9,
                   float(p_out), outage_bins, target)
    phi, scale = _calibrate(km, target, zlib.crc32(kind.encode()))
    return KindModel(kind, km.level_log_q, km.shape_q, float(scale), float(phi), km.p_outage,
                     km.outage_bins, target)


def fit(traces: Sequence[corpus.Trace], source: str = "") -> CapacityModel:
    """One :class:`KindModel` per kind among ``traces`` (each trace's :func:`grid_rates`)."""
    by_kind: dict[str, list[np.ndarray]] = {}
    for t in traces:
        by_kind.setdefault(t.kind, []).append(grid_rates(t))
    if not by_kind:
        raise ValueError("fit: no traces given")
    return CapacityModel({k: _fit_kind(k, gs) for k, gs in by_kind.items()}, source)


@functools.lru_cache(maxsize=1)
def default_model() -> CapacityModel:
    """The model fitted to the corpus's ``train`` split, without kind ``synthetic`` (cached)."""
    traces = [t for t in corpus.select("train") if t.kind != "synthetic"]
    return fit(traces, source=f"corpus train split ({len(traces)} recordings, "
                              "kind synthetic left out)")


# ----------------------------------------------------------------------------------------
# logs for the simulator


def write_log(rates: np.ndarray, path: Path, step_s: float = STEP_S) -> Path:
    """Write ``rates`` (Mbit/s, one per ``step_s`` bin) as a ``.tput`` log the simulator reads
    (``time_s rate_mbps`` per line, 6 decimals, times from 0). An all-zero series (after
    rounding) gets its first bin floored to one 1500-byte packet per bin, as the simulator
    refuses a log that never delivers."""
    _check_step(step_s)
    x = np.round(_as_rates(rates, "write_log"), 6)
    if np.any(x > MAX_RATE_MBPS):
        raise ValueError(f"write_log: a rate above the simulator's {MAX_RATE_MBPS:g} Mbit/s")
    if x.size * step_s > MAX_DURATION_S:
        raise ValueError(f"write_log: longer than the simulator's {MAX_DURATION_S:g} s")
    if not np.any(x > 0):
        x = x.copy()
        x[0] = round(PACKET_BITS / step_s / 1e6, 6)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(f"{i * step_s:.6f} {r:.6f}\n" for i, r in enumerate(x.tolist()))
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)                  # atomic: parallel writers of one name are safe
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def synthetic_trace(rng: random.Random, duration_s: float, cache: Path,
                    kinds: Mapping[str, float] | None = None,
                    model: CapacityModel | None = None) -> Path:
    """Draw a kind by weight (default: :data:`corpus.DEFAULT_KIND_WEIGHTS`), sample
    ``duration_s`` of it (:func:`default_model` unless ``model``) and write
    ``cache/synth-<kind>-<hash>.tput`` (the hash is of the content; an existing file is reused);
    returns the path. A corpus kind the model lacks (``synthetic``: not modelled) is dropped,
    as :class:`corpus.TraceDraw` drops a kind with no train recording; a name that is neither a
    corpus kind nor one of the model's is refused."""
    m = model or default_model()
    weights = dict(corpus.DEFAULT_KIND_WEIGHTS if kinds is None else kinds)
    for k, w in weights.items():
        if isinstance(w, bool) or not (isinstance(w, int | float) and math.isfinite(w)
                                       and w >= 0):
            raise ValueError(f"kind weight {k}={w!r}: give a finite number >= 0")
    unknown = sorted(k for k in weights if k not in m.kinds and k not in corpus.KINDS)
    if unknown:
        raise ValueError(f"unknown kind(s) {', '.join(map(repr, unknown))}: the model has "
                         f"{', '.join(m.kinds)}")
    pool = [(k, float(w)) for k, w in weights.items() if w > 0 and k in m.kinds]
    if not pool:
        raise ValueError(f"synthetic_trace: no kind with a weight above 0 that the model has "
                         f"({', '.join(m.kinds)})")
    kind = rng.choices([k for k, _ in pool], weights=[w for _, w in pool])[0]
    rates = m.sample(kind, duration_s, rng)
    x = np.round(rates, 6)
    digest = hashlib.sha256(f"{kind}|{STEP_S}|".encode() + x.tobytes()).hexdigest()[:16]
    path = Path(cache) / f"synth-{kind}-{digest}.tput"
    if not path.exists():
        write_log(rates, path)
    return path


# ----------------------------------------------------------------------------------------
# CLI


def compare(model: CapacityModel, draws: int = 1000, duration_s: float = WINDOW_S,
            seed: int = 0) -> dict[str, dict[str, float]]:
    """Per kind, :func:`kind_stats` of ``draws`` samples of ``duration_s`` (seeded)."""
    out = {}
    for kind in model.kinds:
        rng = np.random.default_rng([seed, zlib.crc32(kind.encode())])
        out[kind] = kind_stats([model.sample(kind, duration_s, rng) for _ in range(draws)])
    return out


def _fmt_stat(k: str, v: float) -> str:
    return f"{v:.4g}" if k.endswith("mbps") else f"{v:.3f}"


def fit_report(model: CapacityModel, draws: int = 1000, seed: int = 0) -> str:
    """The fitted parameters and, per kind, train statistics vs generated (Markdown)."""
    lines = [f"Model: {model.source}", "",
             "| kind | recordings | level p5 / p50 / p95 (Mbit/s) | phi (100 ms) | scale | "
             "p_outage (per 100 ms) | mean outage (s) |",
             "|---|---:|---|---:|---:|---:|---:|"]
    for k, m in model.kinds.items():
        q = [math.exp(float(np.interp(p, LEVEL_P, m.level_log_q))) for p in (0.05, 0.5, 0.95)]
        lines.append(f"| {k} | {int(m.target.get('recordings', 0))} | "
                     f"{' / '.join(f'{v:.3g}' for v in q)} | {m.phi:.4f} | {m.scale:.3f} | "
                     f"{m.p_outage:.5f} | {m.mean_outage_s:.2f} |")
    gen = compare(model, draws=draws, seed=seed)
    keys = ("mean_mbps", "arith_mean_mbps", "cv", "acf_100ms", "acf_1s", "outage_share")
    lines += ["", f"Statistics (kind_stats): train split vs {draws} generated draws of "
              f"{WINDOW_S:g} s (seed {seed}); mean_mbps is the geometric mean over recordings",
              "", "| kind | | " + " | ".join(keys) + " |",
              "|---|---|" + "---:|" * len(keys)]
    for k, m in model.kinds.items():
        for label, s in (("train", m.target), ("generated", gen[k])):
            lines.append(f"| {k if label == 'train' else ''} | {label} | "
                         + " | ".join(_fmt_stat(q, s[q]) for q in keys) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ccp_train.capgen",
                                description="Synthetic link capacity fitted to the corpus's "
                                            "train split (docs/capacity-model.md).")
    sub = p.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fit", help="fit to the train split; print parameters and statistics")
    f.add_argument("--draws", type=int, default=1000, help="generated draws of 60 s per kind")
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--json", type=Path, help="also write the model (to_dict) here")
    s = sub.add_parser("sample", help="write one draw as a .tput log")
    s.add_argument("--kind", required=True)
    s.add_argument("--duration-s", type=float, required=True)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    try:
        t0 = time.perf_counter()
        model = default_model()
        if args.cmd == "fit":
            print(f"fitted in {time.perf_counter() - t0:.2f} s", file=sys.stderr)
            print(fit_report(model, draws=args.draws, seed=args.seed), end="")
            if args.json:
                import json
                args.json.write_text(json.dumps(model.to_dict(), indent=1) + "\n")
        else:
            rates = model.sample(args.kind, args.duration_s, np.random.default_rng(args.seed))
            path = write_log(rates, args.out)
            st = stats(rates)
            print(f"wrote {path}: {rates.size} bins; "
                  + ", ".join(f"{k} {_fmt_stat(k, v)}" for k, v in st.items()))
    except (ValueError, corpus.CorpusError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
