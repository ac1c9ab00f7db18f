"""Training curves: the per-iteration scalars of a trainer's JSON-lines log as CSV and a PNG, so a
user can put a rerun's curves next to the published ones."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

#: columns written when the log has them (iteration first)
COLUMNS = ("iteration", "phase", "objective", "steps_total", "reward", "pg_loss", "v_loss",
           "entropy", "approx_kl", "clipfrac", "std", "ent_coef", "actor_loss", "critic_loss",
           "mu", "delta", "updates", "episodes", "utilization", "wall_s")
#: (column, panel title) plotted, one panel each
PANELS = (("reward", "mean reward"), ("pg_loss", "policy loss"), ("v_loss", "value loss"),
          ("entropy", "entropy"), ("actor_loss", "actor loss"), ("critic_loss", "critic loss"),
          ("mu", "mean μ"), ("delta", "mean δ"))


def iterations(log: Path) -> list[dict]:
    """The ``kind == "iteration"`` records of a JSON-lines training log."""
    out = []
    for line in log.read_text().splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        if rec.get("kind") == "iteration":
            out.append(rec)
    return out


def write_csv(recs: list[dict], path: Path) -> list[str]:
    """Write the records' scalar columns; returns the columns written."""
    cols = [c for c in COLUMNS if any(c in r for r in recs)]
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        for r in recs:
            w.writerow([_cell(r.get(c)) for c in cols])
    return cols


def _cell(v: object) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return "" if not math.isfinite(v) else f"{v:.6g}"
    return str(v)


def plot(recs: list[dict], path: Path, title: str) -> Path | None:
    """One panel per scalar of :data:`PANELS` against the iteration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(c, t) for c, t in PANELS if any(c in r for r in recs)]
    if not recs or not panels:
        return None
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 1.8 * len(panels) + 0.6), sharex=True,
                             squeeze=False)
    for ax, (col, name) in zip(axes[:, 0], panels, strict=True):
        xs = [r["iteration"] for r in recs if col in r]
        ys = [r[col] for r in recs if col in r]
        ax.plot(xs, ys, lw=0.7)
        ax.set_ylabel(name, fontsize=8)
        ax.grid(True, alpha=0.3)
    axes[-1, 0].set_xlabel("iteration")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def export(log: Path, out_dir: Path, alg: str) -> list[Path]:
    """``<alg>.curves.csv`` and ``<alg>.curves.png`` in ``out_dir`` from a training log."""
    recs = iterations(log)
    made = []
    csv_path = out_dir / f"{alg}.curves.csv"
    write_csv(recs, csv_path)
    made.append(csv_path)
    png = plot(recs, out_dir / f"{alg}.curves.png", f"{alg}: training curves ({log.name})")
    if png is not None:
        made.append(png)
    return made
