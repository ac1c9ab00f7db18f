"""Scalars per iteration: one JSON object per line to a file (what :mod:`.curves` plots), and a
short line to stdout."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

#: iteration scalars printed to stdout, with their format
SHOWN = (("reward", ".4f"), ("pg_loss", "+.4f"), ("v_loss", ".4f"), ("entropy", ".3f"),
         ("approx_kl", ".4f"), ("clipfrac", ".3f"), ("std", ".3f"), ("sps", ".0f"),
         ("actor_loss", "+.3f"), ("critic_loss", ".4f"), ("mu", "+.3f"), ("delta", ".3f"),
         ("q_loss", ".4f"), ("q_mean", "+.3f"), ("epsilon", ".3f"),
         ("steps_total", "d"), ("wall_s", ".0f"))


class Logger:
    """``log(rec)``: `rec` to the JSON-lines file; ``kind == "iteration"`` records as one line
    ``[phase iteration] objective k=v ...``, others as their JSON (long lists left out)."""

    def __init__(self, path: Path, quiet_keys: tuple[str, ...] = ()) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.file = path.open("w")
        self.quiet = set(quiet_keys)

    def log(self, rec: dict[str, Any]) -> None:
        self.file.write(json.dumps(rec) + "\n")
        self.file.flush()
        if rec.get("kind") == "iteration":
            parts = [f"{k}={_fmt(rec[k], f)}" for k, f in SHOWN if k in rec]
            print(f"[{rec.get('phase', ''):>9} {rec['iteration']:5d}] "
                  f"{rec.get('objective', '')} " + " ".join(parts), flush=True)
        else:
            short = {k: v for k, v in rec.items() if k != "kind" and k not in self.quiet}
            print(f"[{rec.get('kind')}] " + json.dumps(short), flush=True)

    def close(self) -> None:
        self.file.close()


def _fmt(v: Any, f: str) -> str:
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    try:
        return format(v, f)
    except (TypeError, ValueError):
        return str(v)


def sb3_quiet_logger() -> Any:
    """A Stable-Baselines3 logger that writes nowhere. SB3's ``configure(None, [])`` also makes
    an empty ``$TMPDIR/SB3-<date>`` folder per call (one per model built: per training run,
    per test); this one makes none. Our scalars go through :class:`Logger`."""
    from stable_baselines3.common.logger import Logger as Sb3Logger

    return Sb3Logger(folder=None, output_formats=[])

