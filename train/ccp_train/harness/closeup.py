"""A close-up of one scenario of a sweep: every algorithm's (and landmark's) throughput,
queueing delay and pacing rate over time, with the link's capacity.

```
python -m ccp_train.harness --split tune --suites cellular --algs mocc,cubic \\
    --w 0.8,0.1,0.1 --out /tmp/c
python -m ccp_train.harness.closeup --out /tmp/c --scenario ATT-LTE-driving-2016.down-40ms-2bdp \\
    --from-s 8 --to-s 40 --png /tmp/att.png
```
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path

from .plots import plt


def _trace_capacity(trace: Path, duration_s: float, bin_s: float = 0.1
                    ) -> tuple[list[float], list[float]]:
    """A trace's capacity (Mbit/s) per ``bin_s``, repeated over its period up to
    ``duration_s``: a mahimahi file's 1500-byte opportunities, or a throughput log's rates
    (each held until the next sample, the last for the median interval)."""
    from .runner import is_log

    n = int(round(duration_s / bin_s))
    if is_log(trace):
        import numpy as np

        from .. import capgen

        t, r = capgen.read_log(trace)
        bits = capgen.log_mbit_by(t, r, np.arange(n + 1) * bin_s)
        return [(b + 1) * bin_s for b in range(n)], list(np.diff(bits) / bin_s)
    ts = [int(x) for x in trace.read_text().split()]
    period = ts[-1] if ts and ts[-1] > 0 else 1
    counts = [0] * n
    bin_ms = bin_s * 1000.0
    for k in range(int(duration_s * 1000 // period) + 1):
        for x in ts:
            b = int((x + k * period) // bin_ms)
            if b < n:
                counts[b] += 1
    return ([(b + 1) * bin_s for b in range(n)], [c * 1500 * 8 / bin_s / 1e6 for c in counts])


def closeup(out: Path, scenario: str, path: Path, seed: int = 1,
            window: tuple[float, float] | None = None) -> Path:
    """One scenario of a sweep in ``out``, seed ``seed``: every algorithm's (and landmark's)
    throughput, queueing delay and pacing rate over time (the agent's 100 ms series), with the
    link's capacity (a trace's opportunities, or the rate schedule)."""
    recs = [r for r in _records(out) if r["scenario"] == scenario and r["seed"] == seed
            and "metrics" in r]
    if not recs:
        raise ValueError(f"no run of {scenario!r} seed {seed} in {out}/results.jsonl")
    fig, ax = plt.subplots(3, 1, figsize=(11, 8), sharex=True)
    toml = (out / "runs" / f"{recs[0]['run_id']}.toml").read_text()
    link = {k.strip(): v.strip() for k, v in (line.split("=", 1) for line in toml.splitlines()
                                              if "=" in line)}
    dur = float(link.get("duration_s", "60").strip())
    if "trace" in link:
        ct, cap = _trace_capacity(Path(link["trace"].strip().strip('"')), dur)
        for a in (ax[0], ax[2]):
            a.plot(ct, cap, color="0.75", lw=1, label="capacity")
    for r in sorted(recs, key=lambda r: (r["alg"], r.get("w") or [])):
        label = r["alg"] + ("@" + ",".join(f"{x:g}" for x in r["w"]) if r.get("w") else "")
        t, thr, q, rate = [], [], [], []
        with (out / "runs" / f"{r['run_id']}.csv").open() as fh:
            for row in csv.DictReader(fh):
                if row["flow"] != "0":
                    continue
                t.append(float(row["t_s"]))
                thr.append(float(row["throughput_mbps"] or "nan"))
                q.append(float(row["queue_delay_ms"] or "nan"))
                rate.append(float(row["rate_mbps"] or "nan"))
        (line,) = ax[0].plot(t, thr, lw=0.9, label=label)
        ax[1].plot(t, q, lw=0.9, color=line.get_color(), label=label)
        if any(math.isfinite(x) for x in rate):
            ax[2].plot(t, rate, lw=0.9, color=line.get_color(), label=label)
    ax[0].set_ylabel("throughput Mbit/s")
    ax[1].set_ylabel("queueing delay ms")
    ax[2].set_ylabel("pacing rate Mbit/s")
    ax[2].set_xlabel("time (s)")
    if "trace" in link and cap:
        lo, hi = window or (0.0, dur)
        seen = [c for t, c in zip(ct, cap, strict=True) if lo <= t <= (hi or dur)]
        ax[2].set_ylim(0, 1.5 * max(seen or cap) + 1.0)
    if window:
        ax[0].set_xlim(*window)
    for a in ax:
        a.grid(True, alpha=0.3)
        a.legend(fontsize=7, loc="upper right", ncol=2)
    ax[0].set_title(f"{scenario}, seed {seed} ({recs[0]['split']})")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _records(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines() if x]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ccp_train.harness.closeup",
                                description="A close-up of one scenario of a sweep: "
                                            "throughput, queueing and pacing rate over time "
                                            "for every algorithm, with the capacity.")
    p.add_argument("--out", type=Path, required=True, help="the sweep's --out folder")
    p.add_argument("--scenario", required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--from-s", type=float, default=None)
    p.add_argument("--to-s", type=float, default=None)
    p.add_argument("--png", type=Path, required=True)
    args = p.parse_args(argv)
    win = (args.from_s or 0.0, args.to_s) if args.to_s else None
    try:
        print(closeup(args.out, args.scenario, args.png, args.seed, win))
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
