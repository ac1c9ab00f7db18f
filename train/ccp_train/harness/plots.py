"""The report's plots (matplotlib, PNG): Pantheon-style throughput vs p95 queueing delay, per-flow
throughput over time for fairness runs, a CDF of Jain's index, convergence-time bars."""

from __future__ import annotations

import math
import textwrap
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402

from .metrics import mean_ci95  # noqa: E402
from .runner import read_series  # noqa: E402

_MARKERS = "osD^vP*Xh<>"


def _colors(algs: list[str]) -> dict[str, tuple]:
    cmap = plt.get_cmap("tab10")
    return {a: cmap(i % 10) for i, a in enumerate(sorted(algs))}


def scatter(rs: list[dict], suites: list[str], path: Path, title: str) -> Path | None:
    """Utilization against p95 queueing delay (log axis, inverted: better is up and right):
    every run a faint dot, each algorithm's mean with its standard deviation as error bars."""
    have = [s for s in suites if any(r["suite"] == s for r in rs)]
    if not have:
        return None
    algs = sorted({r["alg"] for r in rs if r["suite"] in have})
    col = _colors(algs)
    fig, axes = plt.subplots(1, len(have), figsize=(5.2 * len(have), 4.4), squeeze=False)
    for ax, suite in zip(axes[0], have, strict=True):
        for i, a in enumerate(algs):
            pts = [(r["queue_delay_p95_ms"], r["utilization"]) for r in rs
                   if r["suite"] == suite and r["alg"] == a
                   and math.isfinite(r.get("queue_delay_p95_ms", math.nan))]
            if not pts:
                continue
            xs = [max(x, 0.1) for x, _ in pts]
            ys = [y for _, y in pts]
            ax.scatter(xs, ys, s=8, alpha=0.25, color=col[a])
            lx = [math.log10(x) for x in xs]
            mx = sum(lx) / len(lx)
            my = sum(ys) / len(ys)
            sx = math.sqrt(sum((v - mx) ** 2 for v in lx) / len(lx))
            sy = math.sqrt(sum((v - my) ** 2 for v in ys) / len(ys))
            cx = 10 ** mx
            ax.errorbar([cx], [my], xerr=[[cx - 10 ** (mx - sx)], [10 ** (mx + sx) - cx]],
                        yerr=[sy], fmt=_MARKERS[i % len(_MARKERS)], ms=9, color=col[a],
                        capsize=3, label=a, mec="black")
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.invert_xaxis()
        ax.set_xlabel("p95 queueing delay (ms, log; better →)")
        ax.set_ylabel("utilization")
        ax.set_ylim(0, 1.05)
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title(f"{suite} ({len({r['scenario'] for r in rs if r['suite'] == suite})} "
                     "scenarios)")
        ax.legend(fontsize=8, loc="lower left")
    fig.suptitle(textwrap.fill(title, 110), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def fairness_series(records: list[dict], out: Path, plots: Path) -> list[Path]:
    """Per-flow throughput over time of each fairness scenario's lowest seed, one panel per
    algorithm."""
    by_scen: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in records:
        if r["suite"] != "fairness" or "metrics" not in r:
            continue
        cur = by_scen[r["scenario"]].get(r["alg"])
        if cur is None or r["seed"] < cur["seed"]:
            by_scen[r["scenario"]][r["alg"]] = r
    paths = []
    for scen, per_alg in sorted(by_scen.items()):
        algs = sorted(per_alg)
        fig, axes = plt.subplots(len(algs), 1, figsize=(8, 1.9 * len(algs) + 0.6),
                                 sharex=True, squeeze=False)
        for ax, a in zip(axes[:, 0], algs, strict=True):
            r = per_alg[a]
            p = out / "runs" / f"{r['run_id']}.csv"
            if not p.exists():
                continue
            ser = read_series(p)
            for i, s in sorted(ser.items()):
                ax.plot(s.t, s.thr, lw=0.8, label=f"flow {i}")
            j = r["metrics"].get("jain_mean")
            ax.set_title(f"{a} (seed {r['seed']}, Jain {j:.3f})" if j is not None else a,
                         fontsize=9)
            ax.set_ylabel("Mbit/s")
            ax.grid(True, alpha=0.3)
        axes[-1, 0].set_xlabel("time (s)")
        axes[0, 0].legend(fontsize=7, ncol=5, loc="upper left")
        fig.suptitle(f"fairness/{scen}: per-flow throughput (100 ms)")
        fig.tight_layout()
        path = plots / f"fairness_{scen}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(path)
    return paths


def jain_cdf(records: list[dict], path: Path) -> Path | None:
    """CDF of Jain's index over the 500 ms bins of every fairness run, per algorithm."""
    per: dict[str, list[float]] = defaultdict(list)
    for r in records:
        if r["suite"] == "fairness" and "metrics" in r:
            per[r["alg"]].extend(r["metrics"].get("jain_bins", []))
    if not per:
        return None
    col = _colors(list(per))
    fig, ax = plt.subplots(figsize=(6, 4))
    for a, v in sorted(per.items()):
        v = sorted(v)
        if not v:
            continue
        ax.step(v, [(i + 1) / len(v) for i in range(len(v))], where="post", label=a,
                color=col[a])
    ax.set_xlabel("Jain's index (500 ms bins, after the last start)")
    ax.set_ylabel("CDF")
    ax.set_xlim(left=max(0.0, min(min(v) for v in per.values() if v) - 0.02), right=1.005)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def convergence_bars(rs: list[dict], path: Path) -> Path | None:
    """Mean convergence time (95 % CI over seeds) per algorithm for the fairness suite's
    staggered starts and the dynamics suite's capacity steps; runs that never converged are
    counted above the bars."""
    groups = [("fairness", "staggered"), ("dynamics", "steps")]
    algs = sorted({r["alg"] for r in rs if r["suite"] in ("fairness", "dynamics")})
    if not algs:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), squeeze=False)
    for ax, (suite, prefix) in zip(axes[0], groups, strict=True):
        means, cis, notes = [], [], []
        for a in algs:
            sel = [r for r in rs if r["suite"] == suite and r["alg"] == a
                   and r["scenario"].startswith(prefix)]
            per_seed: dict[int, list[float]] = defaultdict(list)
            for r in sel:
                c = r.get("convergence_s", math.nan)
                if math.isfinite(c):
                    per_seed[r["seed"]].append(c)
            m, ci = mean_ci95([sum(v) / len(v) for v in per_seed.values() if v])
            never = sum(1 for r in sel if r.get("converged", 1.0) == 0.0)
            means.append(m)
            cis.append(ci if math.isfinite(ci) else 0.0)
            notes.append(f"{never}/{len(sel)} never" if sel else "")
        x = range(len(algs))
        # a CI never reaches below 0 s; an algorithm that never converged has no bar
        lo = [min(c, m) if math.isfinite(m) else 0.0 for m, c in zip(means, cis, strict=True)]
        ax.bar(x, [m if math.isfinite(m) else 0.0 for m in means], yerr=[lo, cis], capsize=4,
               color=[_colors(algs)[a] for a in algs])
        for i, n in enumerate(notes):
            top = (means[i] + cis[i]) if math.isfinite(means[i]) else 0.0
            ax.text(i, top, n, ha="center", va="bottom", fontsize=7)
        ax.set_xticks(list(x), algs)
        ax.set_ylabel("convergence time (s)")
        ax.set_title(f"{suite}: {prefix} (±20 % of fair share for 5 s)", fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def all_plots(records: list[dict], rs: list[dict], out: Path) -> list[Path]:
    """Every plot of the report into ``out/plots``."""
    plots = out / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    made = [
        scatter(rs, ["links", "cellular"], plots / "scatter.png",
                "utilization vs p95 queueing delay: per algorithm the mean utilization and "
                "geometric-mean delay, ± 1 sd (delay in log space); faint: single runs"),
        scatter(rs, ["dynamics", "preferences"], plots / "scatter_dynamics_preferences.png",
                "dynamics and preferences"),
        jain_cdf(records, plots / "jain_cdf.png"),
        convergence_bars(rs, plots / "convergence.png"),
    ]
    made += fairness_series(records, out, plots)
    return [p for p in made if p is not None]

