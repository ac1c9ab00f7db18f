"""From run records to the report: ``summary.csv``, ``report.md`` and the plots.

Aggregation: for each (suite, algorithm[, w]) and seed, a metric is averaged over the suite's
scenarios; the table gives the mean over seeds and its 95 % confidence interval, so the interval
reflects seed-to-seed spread. ``summary.csv`` keeps every (suite, scenario, algorithm, w) with
its own mean and interval over seeds.
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from pathlib import Path

from .metrics import mean_ci95

#: (metric, column title, better: "max" | "min" | None, scale)
COLUMNS: dict[str, list[tuple[str, str, str | None, float]]] = {
    "links": [("utilization", "util", "max", 1), ("queue_delay_p50_ms", "qdel p50 ms", "min", 1),
              ("queue_delay_p95_ms", "qdel p95 ms", "min", 1),
              ("rtt_p95_ms", "rtt p95 ms", "min", 1), ("loss_rate", "loss %", "min", 100),
              ("owl_utility", "eq. 7 U", "max", 1)],
    "cellular": [("throughput_mbps", "thr Mbit/s", "max", 1), ("utilization", "util", "max", 1),
                 ("queue_delay_p50_ms", "qdel p50 ms", "min", 1),
                 ("queue_delay_p95_ms", "qdel p95 ms", "min", 1),
                 ("loss_rate", "loss %", "min", 100), ("owl_utility", "eq. 7 U", "max", 1)],
    "corpus": [("throughput_mbps", "thr Mbit/s", "max", 1), ("utilization", "util", "max", 1),
               ("queue_delay_p50_ms", "qdel p50 ms", "min", 1),
               ("queue_delay_p95_ms", "qdel p95 ms", "min", 1),
               ("loss_rate", "loss %", "min", 100), ("owl_utility", "eq. 7 U", "max", 1)],
    "fairness": [("jain_mean", "Jain (500 ms)", "max", 1), ("jain_p5", "Jain p5", "max", 1),
                 ("jain_whole", "Jain (means)", "max", 1),
                 ("convergence_s", "converge s", "min", 1), ("converged", "converged", "max", 1),
                 ("utilization", "util", "max", 1),
                 ("queue_delay_p95_ms", "qdel p95 ms", "min", 1),
                 ("owl_nash_distance", "eq. 9 dist", "min", 1)],
    "friendliness": [("share", "share", None, 1), ("friendliness_ratio", "ratio", None, 1),
                     ("utilization", "own util", None, 1),
                     ("queue_delay_p95_ms", "qdel p95 ms", "min", 1)],
    "dynamics": [("utilization", "util", "max", 1), ("convergence_s", "converge s", "min", 1),
                 ("converged", "converged", "max", 1),
                 ("queue_delay_p95_ms", "qdel p95 ms", "min", 1),
                 ("queue_p95_over_owd", "qdel p95 / OWD", "min", 1),
                 ("loss_rate", "loss %", "min", 100)],
    "preferences": [("utility", "utility", "max", 1), ("utilization", "util", "max", 1),
                    ("queue_delay_p95_ms", "qdel p95 ms", "min", 1),
                    ("loss_rate", "loss %", "min", 100)],
}
#: suites whose table is split by a group key (friendliness: by competitor; dynamics: kind)
_GROUP = {
    "friendliness": lambda scen: scen.split("-")[1],
    "dynamics": lambda scen: scen.split("-")[0],
    # the corpus: by the recording's kind (cellular, 5g, wifi, leo, broadband)
    "corpus": lambda scen: scen.split("-")[0],
}


def _num(v: object) -> float:
    if v is None:
        return math.nan
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if isinstance(v, int | float):
        return float(v)
    return math.nan


def rows(records: list[dict]) -> list[dict]:
    """Flatten records into per-(run, w) rows with scalar metrics. A run of an algorithm that
    ignores ``w`` in the preferences suite becomes one row per ``w`` (its utility for that w)."""
    out = []
    for r in records:
        if "metrics" not in r:
            continue
        m = r["metrics"]
        base = {k: _num(v) for k, v in m.items() if not isinstance(v, list | dict)}
        ubw = m.get("utility_by_w", {})
        if r["suite"] == "preferences":
            for wkey, u in ubw.items():
                row = dict(base, utility=u)
                out.append({**_ids(r), "w": wkey, **row})
        elif r.get("w"):
            # a preference algorithm at one landmark (the harness's --w): its own table row
            wkey = ",".join(f"{x:g}" for x in r["w"])
            out.append({**_ids(r), "alg": f"{r['alg']}@{wkey}", "w": wkey, **base})
        else:
            out.append({**_ids(r), "w": "", **base})
    return out


def _ids(r: dict) -> dict:
    return {k: r[k] for k in ("suite", "scenario", "split", "alg", "seed")}


def _group(suite: str, scenario: str) -> str:
    g = _GROUP.get(suite)
    return g(scenario) if g else ""


def suite_table(rs: list[dict], suite: str) -> dict[tuple[str, str], dict[str, tuple]]:
    """(group, alg) -> metric -> (mean, ci, n seeds): per seed the mean over the suite's
    scenarios (and w), then mean and CI over seeds."""
    per: dict[tuple[str, str], dict[int, dict[str, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list)))
    for r in rs:
        if r["suite"] != suite:
            continue
        key = (_group(suite, r["scenario"]), r["alg"])
        for metric, *_ in COLUMNS[suite]:
            v = r.get(metric, math.nan)
            if math.isfinite(v):
                per[key][r["seed"]][metric].append(v)
    out: dict[tuple[str, str], dict[str, tuple]] = {}
    for key, seeds in per.items():
        out[key] = {}
        for metric, *_ in COLUMNS[suite]:
            vals = [sum(s[metric]) / len(s[metric]) for s in seeds.values() if s[metric]]
            m, ci = mean_ci95(vals)
            out[key][metric] = (m, ci, len(vals))
    return out


def write_summary_csv(rs: list[dict], path: Path) -> None:
    """One row per (suite, scenario, split, alg, w): every scalar metric's mean and CI."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rs:
        groups[(r["suite"], r["scenario"], r["split"], r["alg"], r["w"])].append(r)
    metrics = sorted({k for r in rs for k in r} - {"suite", "scenario", "split", "alg", "w",
                                                     "seed"})
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["suite", "scenario", "split", "alg", "w", "seeds"]
                   + [f"{m}{s}" for m in metrics for s in ("", "_ci95")])
        for key in sorted(groups):
            g = groups[key]
            cells = []
            for m in metrics:
                mean, ci = mean_ci95([r.get(m, math.nan) for r in g])
                cells += [_fmt_csv(mean), _fmt_csv(ci)]
            w.writerow([*key, len(g), *cells])


def _fmt_csv(x: float) -> str:
    return "" if not math.isfinite(x) else f"{x:.6g}"


def _fmt(m: float, ci: float, scale: float) -> str:
    if not math.isfinite(m):
        return "–"
    m *= scale
    digits = 3 if abs(m) < 10 else 1
    s = f"{m:.{digits}f}"
    if math.isfinite(ci):
        s += f" ± {ci * scale:.{digits}f}"
    return s


def markdown(rs: list[dict], failures: list[dict], meta: dict) -> str:
    """The report: per suite, algorithm × metric (mean ± 95 % CI over seeds), best in bold."""
    lines = [f"# Evaluation report ({meta.get('split')} split)", ""]
    lines.append(f"Command: `{meta.get('command', '')}`  ")
    lines.append(f"Runs: {meta.get('runs', 0)} ({len(failures)} failed), seeds "
                 f"{meta.get('seeds')}, wall time {meta.get('wall_s', 0):.0f} s, "
                 f"{meta.get('packets_per_s', 0) / 1e6:.2f} M simulated packets/s.")
    lines.append("")
    lines.append("Each cell: mean over seeds of the suite's scenario mean, ± the 95 % "
                 "confidence interval (Student t). **Bold**: best in the column.")
    for suite in COLUMNS:
        tab = suite_table(rs, suite)
        if not tab:
            continue
        scen = sorted({r["scenario"] for r in rs if r["suite"] == suite})
        lines += ["", f"## {suite}", "", f"{len(scen)} scenarios: " + ", ".join(
            f"`{s}`" for s in scen[:12]) + (" …" if len(scen) > 12 else ""), ""]
        cols = COLUMNS[suite]
        groups = sorted({g for g, _ in tab})
        for g in groups:
            if g:
                lines += [f"**{g}**", ""]
            keys = sorted(a for gg, a in tab if gg == g)
            best = {}
            for metric, _, better, _ in cols:
                vals = [(tab[(g, a)][metric][0], a) for a in keys
                        if math.isfinite(tab[(g, a)][metric][0])]
                if better and vals:
                    best[metric] = (max if better == "max" else min)(vals)[1]
            lines.append("| alg | " + " | ".join(c[1] for c in cols) + " |")
            lines.append("|---|" + "---:|" * len(cols))
            for a in keys:
                cells = []
                for metric, _, _, scale in cols:
                    m, ci, _ = tab[(g, a)][metric]
                    c = _fmt(m, ci, scale)
                    cells.append(f"**{c}**" if best.get(metric) == a else c)
                lines.append(f"| {a} | " + " | ".join(cells) + " |")
            lines.append("")
    if failures:
        lines += ["", "## Failed runs", ""]
        for f in failures[:50]:
            lines.append(f"- `{f['run_id']}`: {f['error']}")
    return "\n".join(lines) + "\n"


def headline(rs: list[dict]) -> str:
    """A compact table for the README: per algorithm one figure per suite."""
    picks = [("links", "utilization", "links util", 1),
             ("links", "queue_delay_p95_ms", "links qdel p95 ms", 1),
             ("cellular", "throughput_mbps", "cellular Mbit/s", 1),
             ("cellular", "queue_delay_p95_ms", "cellular qdel p95 ms", 1),
             ("fairness", "jain_mean", "Jain", 1),
             ("friendliness", "share", "share vs Cubic", 1),
             ("dynamics", "utilization", "dynamics util", 1),
             ("preferences", "utility", "utility", 1)]
    tabs = {s: suite_table(rs, s) for s in COLUMNS}
    algs = sorted({r["alg"] for r in rs})
    lines = ["| alg | " + " | ".join(p[2] for p in picks) + " |",
             "|---|" + "---:|" * len(picks)]
    for a in algs:
        cells = []
        for suite, metric, _, scale in picks:
            tab = tabs[suite]
            vals = [v[metric] for (g, aa), v in tab.items() if aa == a
                    and (suite != "friendliness" or g == "cubic")
                    and (suite != "dynamics" or g == "steps")]
            m = vals[0][0] if vals else math.nan
            cells.append("–" if not math.isfinite(m) else f"{m * scale:.3g}")
        lines.append(f"| {a} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def corpus_headline(rs: list[dict]) -> str:
    """The corpus by kind for the README: per algorithm and kind, utilization / p95 queueing
    delay (ms), and its throughput as a multiple of Cubic's: the geometric mean over the runs
    Cubic also ran (same scenario and seed) of the ratio, each throughput floored at 1 kbit/s
    (a typical run's ratio, not dominated by the fastest links nor by the runs where Cubic
    starves). Empty when the sweep had no corpus runs."""
    tab = suite_table(rs, "corpus")
    if not tab:
        return ""
    kinds = [k for k in ("cellular", "5g", "wifi", "leo", "broadband") if any(
        g == k for g, _ in tab)]
    # throughput relative to Cubic, per run (same scenario and seed), then averaged
    cubic = {(r["scenario"], r["seed"]): r.get("throughput_mbps", math.nan) for r in rs
             if r["suite"] == "corpus" and r["alg"] == "cubic"}
    rel: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in rs:
        c = cubic.get((r["scenario"], r["seed"]), math.nan)
        v = r.get("throughput_mbps", math.nan)
        if r["suite"] == "corpus" and math.isfinite(c) and math.isfinite(v):
            rel[(_group("corpus", r["scenario"]), r["alg"])].append(
                math.log(max(v, 1e-3) / max(c, 1e-3)))
    algs = sorted({a for _, a in tab})
    lines = ["| alg | " + " | ".join(f"{k} util / qdel p95 / thr ÷ Cubic" for k in kinds) + " |",
             "|---|" + "---:|" * len(kinds)]
    for a in algs:
        cells = []
        for k in kinds:
            v = tab.get((k, a))
            if v is None:
                cells.append("–")
                continue
            rr = rel.get((k, a), [])
            ratio = f"{math.exp(sum(rr) / len(rr)):.2f}×" if rr else "–"
            cells.append(f"{v['utilization'][0]:.2f} / {v['queue_delay_p95_ms'][0]:.0f} ms / "
                         f"{ratio}")
        lines.append(f"| {a} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def card_summary(rs: list[dict], alg: str, meta: dict,
                 baselines: tuple[str, ...] = ("cubic", "bbr")) -> dict:
    """The ``evaluation.harness`` section of a model card: per suite (and group) each metric's
    mean and 95 % CI over seeds for ``alg``, and the same for the baselines that ran."""

    def figures(a: str) -> dict:
        out: dict = {}
        for suite in COLUMNS:
            for (g, aa), vals in suite_table(rs, suite).items():
                if aa != a:
                    continue
                key = f"{suite}/{g}" if g else suite
                out[key] = {m: {"mean": _round(v[0]), "ci95": _round(v[1]), "seeds": v[2]}
                            for m, v in vals.items() if math.isfinite(v[0])}
        return out

    ran = {r["alg"] for r in rs}
    return {
        "split": meta.get("split"), "command": meta.get("command"),
        "seeds": meta.get("seeds"), "runs": meta.get("runs"), "failed": meta.get("failed"),
        "figures": figures(alg),
        "baselines": {b: figures(b) for b in baselines if b in ran and b != alg},
        # the same model with in-network statistics (harness algorithm ALG+stats), if it ran
        **({"with_stats": figures(alg + "+stats")} if alg + "+stats" in ran else {}),
        # the same model with its law at the receiver (ALG+rx, the simulator only), if it ran
        **({"receiver_side": figures(alg + "+rx")} if alg + "+rx" in ran else {}),
        **({"receiver_side_kalman": figures(alg + "+rxk")} if alg + "+rxk" in ran else {}),
    }


def _round(x: float) -> float | None:
    return None if not math.isfinite(x) else float(f"{x:.5g}")
