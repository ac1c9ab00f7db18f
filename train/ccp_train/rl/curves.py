"""Training curves: the per-iteration scalars of a trainer's JSON-lines log as CSV and a PNG, so a
user can put a rerun's curves next to the published ones.

A fine-tune (``--init CKPT``) continues a chain: its curves start with the curves CSV found beside
CKPT (itself the whole chain up to there), each row tagged with its ``part`` of the chain (1 for
the first command), and the plot marks where each part begins."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

#: columns written when the log has them (iteration first)
COLUMNS = ("part", "iteration", "phase", "objective", "steps_total", "reward", "pg_loss", "v_loss",
           "entropy", "approx_kl", "clipfrac", "std", "ent_coef", "actor_loss", "critic_loss",
           "mu", "delta", "q_loss", "q_mean", "epsilon", "netstats_share", "k_mean", "dc_over_td",
           "updates", "episodes", "utilization", "wall_s")
#: (column, panel title) plotted, one panel each
PANELS = (("reward", "mean reward"), ("pg_loss", "policy loss"), ("v_loss", "value loss"),
          ("entropy", "entropy"), ("actor_loss", "actor loss"), ("critic_loss", "critic loss"),
          ("mu", "mean μ"), ("delta", "mean δ"), ("q_loss", "Q loss (Huber)"),
          ("q_mean", "mean max Q"), ("epsilon", "ε"), ("k_mean", "gain k (geometric mean)"),
          ("dc_over_td", "D_c / T_d"))


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


def read_csv(path: Path) -> list[dict]:
    """Rows of a curves CSV with numbers parsed back (empty cells left out); rows written before
    chains were recorded get ``part`` 1."""
    out = []
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            rec: dict = {}
            for k, v in row.items():
                if k is None or v is None or v == "":
                    continue
                rec[k] = _number(v)
            rec.setdefault("part", 1)
            out.append(rec)
    return out


def _number(v: str) -> object:
    try:
        return int(v)
    except ValueError:
        pass
    try:
        return float(v)
    except ValueError:
        return v


def chained(recs: list[dict], prior: Path | None) -> list[dict]:
    """`recs` (this run's iterations) after the chain's earlier curves at `prior` (a curves CSV,
    or None for the chain's first part), each tagged with its part number."""
    before = read_csv(prior) if prior is not None and prior.is_file() else []
    part = max((int(r["part"]) for r in before), default=0) + 1
    # a trainer that restarts its count on --init continues the chain's instead
    last = max((int(r["iteration"]) for r in before if "iteration" in r), default=0)
    first = min((int(r["iteration"]) for r in recs if "iteration" in r), default=last + 1)
    shift = last if first <= last else 0
    return before + [{**r, "part": part, "iteration": r["iteration"] + shift} if "iteration" in r
                     else {**r, "part": part} for r in recs]


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
    starts = [r["iteration"] for a, r in zip(recs, recs[1:], strict=False)
              if r.get("part", 1) != a.get("part", 1)]
    for ax in axes[:, 0]:
        for x in starts:
            ax.axvline(x, color="grey", lw=0.6, ls="--")
    axes[-1, 0].set_xlabel("iteration" + (" (dashed: a fine-tune part begins)" if starts else ""))
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def export(log: Path, out_dir: Path, alg: str, init: Path | None = None) -> list[Path]:
    """``<alg>.curves.csv`` and ``<alg>.curves.png`` in ``out_dir`` from a training log; `init`
    (the checkpoint a fine-tune started from) prepends the curves found beside it."""
    prior = init.parent / f"{alg}.curves.csv" if init is not None else None
    recs = chained(iterations(log), prior)
    made = []
    csv_path = out_dir / f"{alg}.curves.csv"
    write_csv(recs, csv_path)
    made.append(csv_path)
    png = plot(recs, out_dir / f"{alg}.curves.png", f"{alg}: training curves ({log.name}"
               + (f", part {recs[-1]['part']} of a chain)" if recs and recs[-1]["part"] > 1
                  else ")"))
    if png is not None:
        made.append(png)
    return made
