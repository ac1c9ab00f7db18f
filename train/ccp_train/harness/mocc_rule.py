"""Issue 40's selection rules for MOCC's bound by preference, applied to harness sweeps
(``docs/algorithms/mocc.md``, "The bound by preference": the rules were written there before
any run was judged; this module only computes them).

Each folder is one harness sweep (``--split tune``) of one model (or one knob setting) with
Cubic beside it: ``--algs mocc,cubic --w 0.8,0.1,0.1 --w 0.4,0.5,0.1 --w 0.1,0.8,0.1``, suites
``corpus`` (its cellular kinds), ``links``, ``fairness``, ``friendliness``. The first folder is
the reference (the shipped model, bound off) for the fairness and friendliness conditions.

    python -m ccp_train.harness.mocc_rule --rule gain  SHIPPED CAND_1 CAND_2 ...
    python -m ccp_train.harness.mocc_rule --rule model SHIPPED CAND_1 CAND_2 ...
    python -m ccp_train.harness.mocc_rule --accept EVAL_SWEEP     # the issue's acceptance

``--accept`` reads one ``--split eval`` sweep with the five landmarks (add ``--w 0.3,0.3,0.4
--w 0.1,0.1,0.8``) and ``--algs mocc,cubic,bbr``, 5 seeds, and prints issue 40's acceptance
figures; it chooses nothing.

Per landmark, over the cellular corpus runs: throughput and p95 queueing against Cubic (the
geometric mean of the per-run ratios, same scenario and seed, each value floored at 1e-3 as
the corpus table does), mean loss against Cubic's mean loss, and eq. 2's utility at
``<0.4,0.5,0.1>`` minus Cubic's (the harness's :func:`metrics.utility`).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .metrics import mean_ci95, utility

L1, L2, L3 = "0.8,0.1,0.1", "0.4,0.5,0.1", "0.1,0.8,0.1"
LANDMARKS = (L1, L2, L3)
#: the tolerance on the fairness and friendliness conditions (written with the rule)
TOL = 0.02


def same_agent(folders: Sequence[Path]) -> None:
    """The sweeps compared by a rule must have run one agent binary (only the model or the
    knobs differ): refused, naming them, when their meta.json hashes differ. Sweeps from
    before the harness recorded the hash (no meta.json, or no ``agent_sha256``) are not
    checked."""
    seen: dict[str, list[str]] = {}
    for f in folders:
        try:
            digest = json.loads((f / "meta.json").read_text()).get("agent_sha256")
        except (OSError, ValueError):
            digest = None
        if digest:
            seen.setdefault(digest, []).append(str(f))
    if len(seen) > 1:
        groups = "; ".join(f"{d[:12]}: {', '.join(fs)}" for d, fs in seen.items())
        raise SystemExit(f"the sweeps ran different agent binaries ({groups}): rerun them "
                         "with one (the harness's --agent)")


def load(folder: Path) -> list[dict]:
    """The run records of one sweep (``results.jsonl``); a missing file is an error naming it."""
    path = folder / "results.jsonl"
    try:
        text = path.read_text()
    except OSError as e:
        raise SystemExit(f"{path}: cannot read the sweep's results ({e}); run the harness "
                         "with --out there first") from e
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _wkey(r: dict) -> str:
    return ",".join(f"{x:g}" for x in r["w"]) if r.get("w") else ""


def _mean(v: Sequence[float]) -> float:
    v = [x for x in v if math.isfinite(x)]
    return sum(v) / len(v) if v else math.nan


def _geo(v: Sequence[float]) -> float:
    v = [x for x in v if math.isfinite(x)]
    return math.exp(sum(v) / len(v)) if v else math.nan


@dataclass
class Landmark:
    thr_ratio: float
    p95_ratio: float
    loss: float
    cubic_loss: float
    utility_gain: float
    runs: int


@dataclass
class Figures:
    name: str
    cellular: dict[str, Landmark] = field(default_factory=dict)
    jain: float = math.nan
    share: float = math.nan
    share_by: dict[str, float] = field(default_factory=dict)
    links_util: dict[str, float] = field(default_factory=dict)


def is_cellular(r: dict) -> bool:
    return r["suite"] == "corpus" and r["scenario"].startswith("cellular-")


def figures(name: str, records: list[dict], alg: str = "mocc",
            landmarks: Sequence[str] = LANDMARKS) -> Figures:
    """The rule's figures of one sweep, the cellular ones at each of ``landmarks``."""
    f = Figures(name)
    ok = [r for r in records if "metrics" in r]
    cubic = {(r["scenario"], r["seed"]): r["metrics"] for r in ok
             if is_cellular(r) and r["alg"] == "cubic"}
    w2 = [float(x) for x in L2.split(",")]

    def u(m: dict) -> float:
        rtt = m.get("rtt_mean_ms")
        return utility(w2, m["utilization"], m["base_rtt_ms"],
                       math.nan if rtt is None else rtt, m["loss_rate"])

    for lm in landmarks:
        thr, p95, loss, closs, ug = [], [], [], [], []
        for r in ok:
            if not (is_cellular(r) and r["alg"] == alg and _wkey(r) == lm):
                continue
            c = cubic.get((r["scenario"], r["seed"]))
            if c is None:
                continue
            m = r["metrics"]
            thr.append(math.log(max(m["throughput_mbps"], 1e-3) /
                                max(c["throughput_mbps"], 1e-3)))
            p95.append(math.log(max(m["queue_delay_p95_ms"], 1e-3) /
                                max(c["queue_delay_p95_ms"], 1e-3)))
            loss.append(m["loss_rate"])
            closs.append(c["loss_rate"])
            ug.append(u(m) - u(c))
        if thr:
            f.cellular[lm] = Landmark(_geo(thr), _geo(p95), _mean(loss), _mean(closs),
                                      _mean(ug), len(thr))
    at_l1 = [r for r in ok if r["alg"] == alg and _wkey(r) == L1]
    f.jain = _mean([r["metrics"].get("jain_mean", math.nan) for r in at_l1
                    if r["suite"] == "fairness"])
    fr = [r for r in at_l1 if r["suite"] == "friendliness"]
    f.share = _mean([r["metrics"].get("share", math.nan) for r in fr])
    for comp in sorted({r["scenario"].split("-")[1] for r in fr}):
        f.share_by[comp] = _mean([r["metrics"].get("share", math.nan) for r in fr
                                  if r["scenario"].split("-")[1] == comp])
    for lm in LANDMARKS:
        v = [r["metrics"]["utilization"] for r in ok
             if r["suite"] == "links" and r["alg"] == alg and _wkey(r) == lm]
        if v:
            f.links_util[lm] = _mean(v)
    return f


def _fair_ok(f: Figures, ref: Figures) -> tuple[bool, bool]:
    return f.jain >= ref.jain - TOL, f.share >= ref.share - TOL


def gain_rule(f: Figures, ref: Figures) -> dict:
    """Choosing g₀: (a) L3 throughput ≥ 0.6× Cubic, (b) L1 Jain and share ≥ the shipped
    model's − 0.02, (c) L1 throughput ≥ 0.95× Cubic; the key is the L3 p95 ratio."""
    c1, c3 = f.cellular.get(L1), f.cellular.get(L3)
    jain_ok, share_ok = _fair_ok(f, ref)
    conds = {"a": bool(c3 and c3.thr_ratio >= 0.6), "b": jain_ok and share_ok,
             "c": bool(c1 and c1.thr_ratio >= 0.95)}
    return {"conds": conds, "passes": all(conds.values()),
            "key": c3.p95_ratio if c3 else math.inf}


def model_rule(f: Figures, ref: Figures) -> dict:
    """Choosing a model: (a) never dominated by Cubic, (b) loss ≤ 2× Cubic's, (c) monotone
    in p95 and throughput L3 ≤ L2 ≤ L1, (d) L1 Jain and share ≥ the shipped model's − 0.02;
    the score is the L2 utility minus Cubic's."""
    cs = [f.cellular.get(lm) for lm in LANDMARKS]
    have = all(c is not None for c in cs)
    dominated = any(c is None or (c.thr_ratio < 1 and c.p95_ratio > 1) for c in cs)
    loss_ok = have and all(c.loss <= 2 * c.cubic_loss for c in cs if c)
    mono = have and (cs[2].p95_ratio <= cs[1].p95_ratio <= cs[0].p95_ratio and  # type: ignore
                     cs[2].thr_ratio <= cs[1].thr_ratio <= cs[0].thr_ratio)  # type: ignore
    jain_ok, share_ok = _fair_ok(f, ref)
    conds = {"a": have and not dominated, "b": loss_ok, "c": bool(mono),
             "d": jain_ok and share_ok}
    score = cs[1].utility_gain if cs[1] else -math.inf
    return {"conds": conds, "passes": all(conds.values()), "key": score}


def table(figs: list[Figures], rule: str) -> str:
    ref = figs[0]
    judge = gain_rule if rule == "gain" else model_rule
    lines = ["| sweep | " + " | ".join(f"{lm}: thr / p95 / loss (× Cubic)" for lm in LANDMARKS)
             + " | L2 utility − Cubic | L1 Jain | L1 share (by competitor) | links util L1 / L3"
             " | conditions | passes |",
             "|---|" + "---|" * (len(LANDMARKS) + 6)]
    for f in figs:
        cells = []
        for lm in LANDMARKS:
            c = f.cellular.get(lm)
            cells.append("–" if c is None else
                         f"{c.thr_ratio:.2f} / {c.p95_ratio:.2f} / "
                         f"{c.loss / c.cubic_loss if c.cubic_loss > 0 else math.inf:.2f}")
        c2 = f.cellular.get(L2)
        j = judge(f, ref)
        by = ", ".join(f"{k} {v:.3f}" for k, v in f.share_by.items())
        cond = " ".join(f"{k}{'✓' if v else '✗'}" for k, v in j["conds"].items())
        lu = " / ".join(f"{f.links_util.get(lm, math.nan):.3f}" for lm in (L1, L3))
        lines.append(f"| {f.name} | " + " | ".join(cells) +
                     f" | {c2.utility_gain if c2 else math.nan:+.4f} | {f.jain:.3f} | "
                     f"{f.share:.3f} ({by}) | {lu} | {cond} | {'yes' if j['passes'] else 'no'} |")
    return "\n".join(lines) + "\n"


def choose(figs: list[Figures], rule: str) -> str | None:
    """The rule's choice among ``figs[1:]`` (``figs[0]`` is the reference). Gain rule: the
    passing candidate with the lowest key, else the one passing most conditions (ties: lowest
    key). Model rule: the passing candidate with the highest score, if it beats the
    reference's score; else ``None`` (nothing ships)."""
    ref, cands = figs[0], figs[1:]
    if rule == "gain":
        js = [(f, gain_rule(f, ref)) for f in cands]
        passing = [(f, j) for f, j in js if j["passes"]]
        if passing:
            return min(passing, key=lambda p: p[1]["key"])[0].name
        return min(js, key=lambda p: (-sum(p[1]["conds"].values()), p[1]["key"]))[0].name
    ref_score = model_rule(ref, ref)["key"]
    passing = [(f, model_rule(f, ref)) for f in cands]
    passing = [(f, j) for f, j in passing if j["passes"] and j["key"] > ref_score]
    return max(passing, key=lambda p: p[1]["key"])[0].name if passing else None


#: issue 40's five landmarks (acceptance)
ALL_LANDMARKS = (L1, L2, "0.3,0.3,0.4", L3, "0.1,0.1,0.8")
#: the model shipped before issue 40, eval (its card): fairness mean Jain, share vs one Cubic
BEFORE_JAIN, BEFORE_SHARE = 0.747, 0.225


def _ci(v: list[float]) -> tuple[float, float]:
    """The harness's mean and 95 % half-width; one seed's half-width counts as 0."""
    m, h = mean_ci95(v)
    return m, h if math.isfinite(h) else 0.0


def monotone_violations(records: list[dict], alg: str = "mocc") -> dict[str, list[str]]:
    """Per cellular-corpus and links scenario, the issue's ordering: p95 queueing at L3 ≤ L2 ≤
    L1 and throughput L3 ≤ L2 ≤ L1. A pair violates it only when the seeds' 95 % intervals
    do not overlap the wrong way (``within the seeds' confidence interval``)."""
    by: dict[tuple[str, str, str], list[float]] = {}
    for r in records:
        if "metrics" not in r or r["alg"] != alg or _wkey(r) not in (L1, L2, L3):
            continue
        if not (is_cellular(r) or r["suite"] == "links"):
            continue
        for met in ("queue_delay_p95_ms", "throughput_mbps"):
            by.setdefault((r["scenario"], met, _wkey(r)), []).append(r["metrics"][met])
    out: dict[str, list[str]] = {"queue_delay_p95_ms": [], "throughput_mbps": []}
    for scen in sorted({k[0] for k in by}):
        for met in out:
            ci = [_ci(by.get((scen, met, lm), [])) for lm in (L3, L2, L1)]
            if any(not math.isfinite(m) for m, _ in ci):
                continue
            for (ma, ha), (mb, hb) in ((ci[0], ci[1]), (ci[1], ci[2])):
                if ma - ha > mb + hb:
                    out[met].append(scen)
                    break
    return out


def acceptance(records: list[dict]) -> str:
    """Issue 40's acceptance figures of one eval sweep (markdown)."""
    f = figures("mocc", records, landmarks=ALL_LANDMARKS)
    # BBR takes no preference: its runs read as one landmark's
    bbr = [dict(r, alg="bbr@", w=[float(x) for x in L1.split(",")]) if r["alg"] == "bbr"
           else r for r in records]
    fb = figures("bbr", bbr, alg="bbr@", landmarks=(L1,))
    lines = ["| alg | thr × Cubic | p95 × Cubic | loss × Cubic | eq. 2 U(0.4,0.5,0.1) − Cubic's "
             "| dominated | loss ≤ 2× |", "|---|---:|---:|---:|---:|---|---|"]

    def row(name: str, c: Landmark) -> str:
        lr = c.loss / c.cubic_loss if c.cubic_loss > 0 else math.inf
        dom = c.thr_ratio < 1 and c.p95_ratio > 1
        return (f"| {name} | {c.thr_ratio:.2f} | {c.p95_ratio:.2f} | {lr:.2f} | "
                f"{c.utility_gain:+.4f} | {'yes' if dom else 'no'} | {'✓' if lr <= 2 else '✗'} |")

    for lm in ALL_LANDMARKS:
        if lm in f.cellular:
            lines.append(row(f"mocc@{lm}", f.cellular[lm]))
    if L1 in fb.cellular:
        lines.append(row("bbr", fb.cellular[L1]))
    c1, c3 = f.cellular.get(L1), f.cellular.get(L3)
    mono = monotone_violations(records)
    n = len({r["scenario"] for r in records
             if "metrics" in r and (is_cellular(r) or r["suite"] == "links")})
    cubic_share = f.share_by.get("cubic", math.nan)
    lines += [
        "",
        f"- `<0.8,0.1,0.1>` throughput ≥ 0.95× Cubic: {c1.thr_ratio:.2f} "
        f"{'✓' if c1.thr_ratio >= 0.95 else '✗'}" if c1 else "- L1: no runs",
        f"- `<0.1,0.8,0.1>` p95 ≤ 0.5× Cubic at ≥ 0.6× throughput: {c3.p95_ratio:.2f} at "
        f"{c3.thr_ratio:.2f} {'✓' if c3.p95_ratio <= 0.5 and c3.thr_ratio >= 0.6 else '✗'}"
        if c3 else "- L3: no runs",
        f"- monotone (cellular corpus and links scenarios, {n}): p95 violated on "
        f"{len(mono['queue_delay_p95_ms'])}, throughput on {len(mono['throughput_mbps'])}"
        + (f" ({', '.join(sorted(set(mono['queue_delay_p95_ms'] + mono['throughput_mbps']))[:6])}"
           "…)" if any(mono.values()) else ""),
        f"- `<0.8,0.1,0.1>` fairness mean Jain {f.jain:.3f} (before: {BEFORE_JAIN}) "
        f"{'✓' if f.jain >= BEFORE_JAIN else '✗'}, share against one Cubic flow "
        f"{cubic_share:.3f} (before: {BEFORE_SHARE}) "
        f"{'✓' if cubic_share >= BEFORE_SHARE else '✗'}",
        f"- headline, `<0.4,0.5,0.1>` eq. 2 utility minus Cubic's on the cellular corpus: "
        f"{f.cellular[L2].utility_gain:+.4f} "
        f"{'✓' if f.cellular[L2].utility_gain > 0 else '✗'}" if L2 in f.cellular else "",
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ccp_train.harness.mocc_rule",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--rule", choices=("gain", "model"), default=None)
    ap.add_argument("--accept", type=Path, default=None, metavar="EVAL_SWEEP",
                    help="print issue 40's acceptance figures of this eval sweep instead")
    ap.add_argument("--json", type=Path, default=None,
                    help="also write each sweep's figures, conditions and the choice here")
    ap.add_argument("sweeps", nargs="*", type=Path,
                    help="harness --out folders; the first is the reference (shipped model)")
    a = ap.parse_args(argv)
    if a.accept is not None:
        print(acceptance(load(a.accept)))
        return 0
    if a.rule is None:
        ap.error("give --rule gain|model (or --accept EVAL_SWEEP)")
    if len(a.sweeps) < 2:
        ap.error("give the reference sweep and at least one candidate")
    same_agent(a.sweeps)
    figs = [figures(str(p), load(p)) for p in a.sweeps]
    print(table(figs, a.rule))
    pick = choose(figs, a.rule)
    print(f"chosen: {pick if pick else 'none (nothing ships)'}")
    if a.json is not None:
        a.json.write_text(json.dumps(report(figs, a.rule, pick), indent=2) + "\n")
    return 0


def report(figs: list[Figures], rule: str, pick: str | None) -> dict:
    """The sweeps' figures and verdicts as JSON (a card's record of the choice)."""
    judge = gain_rule if rule == "gain" else model_rule
    out = []
    for f in figs:
        j = judge(f, figs[0])
        out.append({"sweep": f.name, "passes": j["passes"], "conditions": j["conds"],
                    "key": j["key"], "jain_l1": f.jain, "share_l1": f.share,
                    "share_l1_by": f.share_by, "links_util": f.links_util,
                    "cellular": {lm: vars(c) for lm, c in f.cellular.items()}})
    return {"rule": rule, "reference": figs[0].name, "chosen": pick, "sweeps": out}


if __name__ == "__main__":
    raise SystemExit(main())
