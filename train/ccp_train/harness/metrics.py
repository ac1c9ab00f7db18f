"""Metrics of one run, from the simulator's per-flow summary and 100 ms time series.

Definitions (the README and ``ops/eval/README.md`` repeat them):

- per flow: throughput, utilization (delivered / link capacity over the flow's active time),
  p50/p95/mean queueing delay (bottleneck sojourn of its packets), p50/p95/mean RTT, loss rate
  (network drops / packets sent) — all measured per packet by the simulator;
- Jain's index over 500 ms bins of the flows active throughout each bin, from the last start
  to the first stop, and its mean and 5th percentile; Jain of whole-run mean throughputs;
- convergence time: after an event (the last flow start, a capacity step), the first time from
  which every flow stays within ±20 % of its fair share (capacity / active flows) for 5 s;
- friendliness: throughput of the flows under test over that of the competitors;
- utility: MOCC's eq. 2 with the flow's ``w`` and the link's true capacity and base RTT,
  ``U = w_thr·thr/C + w_lat·RTT_base/RTT_mean + w_loss·(1 − loss)``;
- ``owl_utility``: Owl's eq. 7, ``U = λ − δ·λ/(1 − p) − β·log10(RTT_mean/RTT_base)``
  (δ = β = 0.5), with the sending rate λ = utilization/(1 − p) in units of the link's true
  capacity (Owl's reward uses its best delivery-rate sample as the unit: it does not know C),
  mean over the flows under test. The figure Owl's acceptance compares with Cubic's;
- ``owl_nash_distance``: with n ≥ 2 flows on a rate link, the mean over the flows of
  ``|λ_i − λ*| / λ*``, ``λ_i`` a flow's sending rate while all flows are active (its delivery
  rate over that window from the 100 ms series, over ``1 − p_i``) in units of the capacity at
  the last start, ``λ* = 1/(δ(n + 1))`` the Nash rate of Owl's eq. 9 with every ``δ_i = δ``
  (0.5; the theorem assumes eq. 7 with β = 0, Owl-Loss).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

#: Jain and convergence bins (s)
BIN_S = 0.5
#: convergence band (fraction of the fair share) and how long flows must stay inside it (s)
CONV_BAND = 0.2
CONV_HOLD_S = 5.0

# two-sided 95 % Student t quantiles for n-1 = 1..30 degrees of freedom
_T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def jain(x: Sequence[float]) -> float | None:
    """Jain's index ``(Σx)² / (n·Σx²)``; 1 when all are equal or all zero; None if empty."""
    if not x:
        return None
    s2 = sum(v * v for v in x)
    if s2 == 0:
        return 1.0
    return sum(x) ** 2 / (len(x) * s2)


def mean_ci95(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95 % confidence interval (Student t); NaNs are dropped.
    One value has a half-width of NaN (unknown); none gives (NaN, NaN)."""
    v = [x for x in values if x is not None and math.isfinite(x)]
    n = len(v)
    if n == 0:
        return math.nan, math.nan
    m = sum(v) / n
    if n == 1:
        return m, math.nan
    sd = math.sqrt(sum((x - m) ** 2 for x in v) / (n - 1))
    t = _T95[n - 2] if n - 1 <= len(_T95) else 1.960
    return m, t * sd / math.sqrt(n)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (``q`` in [0, 100]) of finite values; NaN if none."""
    v = sorted(x for x in values if math.isfinite(x))
    if not v:
        return math.nan
    k = (len(v) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


class Series:
    """One flow's 100 ms series: interval end times (s) and throughput (Mbit/s)."""

    def __init__(self, t: Sequence[float], thr_mbps: Sequence[float], dt: float = 0.1) -> None:
        self.t = list(t)
        self.thr = list(thr_mbps)
        self.dt = dt

    def mean_over(self, t0: float, t1: float) -> float:
        """Mean throughput over [t0, t1) from the intervals that lie inside it."""
        eps = 1e-6
        xs = [x for t, x in zip(self.t, self.thr, strict=True)
              if t - self.dt >= t0 - eps and t <= t1 + eps]
        return sum(xs) / len(xs) if xs else math.nan


def bins(t0: float, t1: float, width: float = BIN_S) -> list[tuple[float, float]]:
    """Consecutive [a, a+width) bins covering [t0, t1) (the last partial bin dropped)."""
    out = []
    n = int(math.floor((t1 - t0) / width + 1e-9))
    for i in range(n):
        a = t0 + i * width
        out.append((a, a + width))
    return out


def jain_bins(series: Sequence[Series], t0: float, t1: float,
              width: float = BIN_S) -> list[float]:
    """Jain's index of the flows' throughput in each bin of [t0, t1)."""
    out = []
    for a, b in bins(t0, t1, width):
        xs = [s.mean_over(a, b) for s in series]
        if any(math.isnan(x) for x in xs):
            continue
        j = jain(xs)
        if j is not None:
            out.append(j)
    return out


def convergence_time(series: Sequence[Series], fair_share: Callable[[float], float],
                     t_event: float, t_end: float, band: float = CONV_BAND,
                     hold_s: float = CONV_HOLD_S, width: float = BIN_S) -> float | None:
    """Seconds from ``t_event`` until every flow's throughput stays within ±band of
    ``fair_share(t)`` (Mbit/s per flow) for ``hold_s``, judged on bins; None if it never does
    before ``t_end``."""
    bs = bins(t_event, t_end, width)
    ok = []
    for a, b in bs:
        fs = fair_share(a)
        xs = [s.mean_over(a, b) for s in series]
        ok.append(fs > 0 and all(math.isfinite(x) and abs(x - fs) <= band * fs for x in xs))
    need = int(round(hold_s / width))
    run = 0
    for i, good in enumerate(ok):
        run = run + 1 if good else 0
        if run >= need:
            return bs[i - need + 1][0] - t_event
    return None


def objectives(utilization: float, rtt_base_ms: float, rtt_mean_ms: float,
               loss_rate: float) -> tuple[float, float, float]:
    """MOCC's eq. 2 objectives in [0, 1], with the true capacity and base RTT: throughput
    (utilization), latency (base RTT over mean RTT; 0 for a flow that got no RTT sample) and
    loss (one minus the loss rate). The preference portfolio (``ccp_train.portfolio``) averages
    these per algorithm; the agent scores them with a flow's ``w``."""
    o_thr = min(max(utilization, 0.0), 1.0)
    o_lat = (min(rtt_base_ms / rtt_mean_ms, 1.0)
             if math.isfinite(rtt_mean_ms) and rtt_mean_ms > 0 else 0.0)
    o_loss = 1.0 - min(max(loss_rate, 0.0), 1.0)
    return (o_thr, o_lat, o_loss)


def utility(w: Sequence[float], utilization: float, rtt_base_ms: float, rtt_mean_ms: float,
            loss_rate: float) -> float:
    """MOCC's eq. 2: ``w`` · :func:`objectives`."""
    o = objectives(utilization, rtt_base_ms, rtt_mean_ms, loss_rate)
    return w[0] * o[0] + w[1] * o[1] + w[2] * o[2]


#: eq. 7's δ and β (Owl, Table II)
OWL_DELTA = 0.5
OWL_BETA = 0.5


def owl_utility(utilization: float, loss_rate: float, rtt_base_ms: float, rtt_mean_ms: float,
                delta: float = OWL_DELTA, beta: float = OWL_BETA) -> float:
    """Owl's eq. 7 for one flow, its sending rate in units of the link's capacity (NaN without
    an RTT sample)."""
    if not (math.isfinite(rtt_mean_ms) and rtt_mean_ms > 0 and rtt_base_ms > 0):
        return math.nan
    p = min(max(loss_rate, 0.0), 0.99)
    lam = max(utilization, 0.0) / (1.0 - p)
    return lam - delta * lam / (1.0 - p) - beta * math.log10(max(rtt_mean_ms / rtt_base_ms, 1.0))


def owl_nash_rate(n: int, delta: float = OWL_DELTA) -> float:
    """Eq. 9's equilibrium sending rate of each of n senders with equal δ, in units of C:
    ``C(n/δ − (n − 1)/δ)/(n + 1) = C/(δ(n + 1))``."""
    return 1.0 / (delta * (n + 1))


def owl_nash_distance(rates: Sequence[float], delta: float = OWL_DELTA) -> float:
    """Mean relative distance of the senders' rates (units of C) from eq. 9's Nash rate."""
    star = owl_nash_rate(len(rates), delta)
    return sum(abs(r - star) for r in rates) / (len(rates) * star)


def capacity_at(link: dict, t: float) -> float | None:
    """Capacity (Mbit/s) of a rate link at time t; None for a trace link."""
    if "rate_mbps" not in link:
        return None
    rate = float(link["rate_mbps"])
    for step in link.get("rate_schedule", []):
        if t + 1e-9 >= float(step["at_s"]):
            rate = float(step["rate_mbps"])
    return rate


def _mean(xs: Sequence[float]) -> float:
    v = [x for x in xs if x is not None and math.isfinite(x)]
    return sum(v) / len(v) if v else math.nan


def run_metrics(summary: dict, series: dict[int, Series], link: dict, test: Sequence[int],
                duration_s: float, prefs: Sequence[Sequence[float]] = ()) -> dict:
    """The metrics of one run for the flows under test (indices ``test``); ``prefs``: the
    preference vectors to score utility for (the flows' own ``w`` when empty)."""
    flows = summary["flows"]
    tf = [flows[i] for i in test]
    comp = [f for i, f in enumerate(flows) if i not in set(test)]
    m: dict = {}
    m["throughput_mbps"] = _mean([f["throughput_mbps"] for f in tf])
    if not comp:
        m["utilization"] = summary["utilization"]
    else:
        m["utilization"] = sum(f["utilization"] for f in tf)
    for k in ("queue_delay_p50_ms", "queue_delay_p95_ms", "queue_delay_mean_ms", "rtt_p50_ms",
              "rtt_p95_ms", "rtt_mean_ms"):
        m[k] = _mean([f[k] if f[k] is not None else math.nan for f in tf])
    sent = sum(f["packets_sent"] for f in tf)
    m["loss_rate"] = (sum(f["loss_rate"] * f["packets_sent"] for f in tf) / sent
                      if sent else 0.0)
    m["base_rtt_ms"] = _mean([f["rtt_base_ms"] for f in tf])
    m["owl_utility"] = _mean([owl_utility(f["utilization"], f["loss_rate"], f["rtt_base_ms"],
                                          f["rtt_mean_ms"] if f["rtt_mean_ms"] is not None
                                          else math.nan) for f in tf])
    # queueing relative to the one-way base delay (satellite criterion)
    m["queue_p95_over_owd"] = m["queue_delay_p95_ms"] / (m["base_rtt_ms"] / 2.0)

    if len(flows) >= 2:
        t0 = max(f["start_s"] for f in flows)
        t1 = min(f["stop_s"] for f in flows)
        ser = [series[f["id"]] for f in flows if f["id"] in series]
        if len(ser) == len(flows) and t1 > t0:
            jb = jain_bins(ser, t0, t1)
            m["jain_bins"] = jb
            m["jain_mean"] = _mean(jb)
            m["jain_p5"] = percentile(jb, 5)
            m["jain_whole"] = jain([f["throughput_mbps"] for f in flows])
            cap = capacity_at(link, t0)
            if cap is not None:
                n = len(flows)
                c = convergence_time(ser, lambda t: (capacity_at(link, t) or 0.0) / n, t0, t1)
                m["convergence_s"] = c
                m["converged"] = c is not None
                if cap > 0 and not comp:  # eq. 9: n senders of one protocol
                    lam = [sr.mean_over(t0, t1) / cap / (1.0 - min(max(f["loss_rate"], 0.0), 0.99))
                           for sr, f in zip(ser, flows, strict=True)]
                    m["owl_nash_distance"] = owl_nash_distance(lam)
    if comp:
        thr_t = _mean([f["throughput_mbps"] for f in tf])
        thr_c = _mean([f["throughput_mbps"] for f in comp])
        m["friendliness_ratio"] = thr_t / thr_c if thr_c > 0 else math.inf
        m["share"] = thr_t / (thr_t + thr_c) if thr_t + thr_c > 0 else math.nan
    steps = link.get("rate_schedule", [])
    if steps and len(flows) == 1 and flows[0]["id"] in series:
        s = series[flows[0]["id"]]
        ends = [float(x["at_s"]) for x in steps[1:]] + [duration_s]
        conv = [convergence_time([s], lambda t: capacity_at(link, t) or 0.0,
                                 float(st["at_s"]), end)
                for st, end in zip(steps, ends, strict=True)]
        m["step_convergence_s"] = conv
        m["convergence_s"] = (max(c for c in conv) if all(c is not None for c in conv)
                              else None)
        m["converged"] = all(c is not None for c in conv)
    ws = [list(w) for w in prefs] or [f["w"] for f in tf]
    util = {}
    for w in ws:
        key = ",".join(f"{x:g}" for x in w)
        util[key] = _mean([utility(w, f["utilization"], f["rtt_base_ms"],
                                   f["rtt_mean_ms"] if f["rtt_mean_ms"] is not None
                                   else math.nan, f["loss_rate"]) for f in tf])
    m["utility_by_w"] = util
    # eq. 2's objectives, mean over the flows under test (the portfolio's operating point)
    obj = [objectives(f["utilization"], f["rtt_base_ms"],
                      f["rtt_mean_ms"] if f["rtt_mean_ms"] is not None else math.nan,
                      f["loss_rate"]) for f in tf]
    m["objectives"] = [_mean([o[i] for o in obj]) for i in range(3)]
    return m
