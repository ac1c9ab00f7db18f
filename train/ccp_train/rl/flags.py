"""Command-line flags every trainer shares: the run (seed, threads, log, rollout workers, Ray),
the scenario ranges (-> :class:`ccp_train.scenarios.ScenarioRanges`), and parsers for
comma-separated values."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ccp_train.scenarios import ScenarioRanges

REPO_ROOT = Path(__file__).resolve().parents[3]


def floats(n: int) -> Any:
    """Parser of `n` comma-separated numbers."""
    def parse(text: str) -> tuple[float, ...]:
        v = tuple(float(x) for x in text.split(","))
        if len(v) != n:
            raise argparse.ArgumentTypeError(f"expected {n} comma-separated numbers: {text!r}")
        return v
    return parse


def ints(text: str) -> tuple[int, ...]:
    """Parser of positive integers, comma-separated."""
    v = tuple(int(x) for x in text.split(",") if x.strip())
    if not v or any(x < 1 for x in v):
        raise argparse.ArgumentTypeError(f"expected positive integers, comma-separated: {text!r}")
    return v


def add_run(p: argparse.ArgumentParser, alg: str) -> None:
    g = p.add_argument_group("run")
    g.add_argument("--seed", type=int, default=1, help="seeds torch, numpy, envs, evaluation")
    g.add_argument("--log", default=None, help=f"JSONL log; None: OUT/{alg}.<cmd>.jsonl")
    g.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    g.add_argument("--workers", type=int, default=0,
                   help="rollout worker processes (0: in this process); same transitions")
    g.add_argument("--ray", default=None, metavar="ADDRESS",
                   help="roll out on Ray actors (`local`, `auto`, `ray://host:10001`)")


def add_scenarios(p: argparse.ArgumentParser, traces: Sequence[str] = ()) -> None:
    """The scenario ranges; defaults are MOCC's widened Table 3 (docs/training.md)."""
    g = p.add_argument_group("scenarios")
    g.add_argument("--duration-s", type=floats(2), default="10,20", help="episode length range")
    g.add_argument("--rate-mbps", type=floats(2), default="1,8", help="link rate range")
    g.add_argument("--rtt-ms", type=floats(2), default="10,200", help="base RTT range")
    g.add_argument("--buffer-bdp", type=floats(2), default="0.1,1000",
                   help="bottleneck buffer range in BDP multiples")
    g.add_argument("--buffer-dist", choices=("log", "uniform"), default="log",
                   help="how --buffer-bdp is drawn")
    g.add_argument("--loss", type=floats(2), default="0,0.03", help="random loss range")
    g.add_argument("--stagger-s", type=floats(2), default="0,2",
                   help="learners of one env start this far apart")
    g.add_argument("--traces", default=",".join(traces),
                   help="mahimahi traces replacing the constant rate in a fraction of episodes")
    g.add_argument("--trace-prob", type=float, default=0.25, help="P(an episode runs a trace)")
    g.add_argument("--trace-scale", type=floats(2), default="0.5,2",
                   help="trace capacity multiplier range")
    g.add_argument("--mixed-w", type=float, default=0.5,
                   help="P(a learner after the first gets its own random preference)")


def ranges_from_args(args: argparse.Namespace, learners: int,
                     other_preferences: Sequence[tuple[float, float, float]] = ()
                     ) -> ScenarioRanges:
    """The ranges of :func:`add_scenarios`' flags, checked (`learners`: the most per env)."""
    last_start = (learners - 1) * args.stagger_s[1]
    if last_start >= args.duration_s[0]:
        raise SystemExit(f"--stagger-s {args.stagger_s[1]:g} with {learners} learners starts the "
                         f"last one at {last_start:g} s, not before the shortest episode "
                         f"({args.duration_s[0]:g} s) ends")
    found = []
    for t in filter(None, (args.traces or "").split(",")):
        f = next((c for c in (Path(t), REPO_ROOT / t) if c.is_file()), None)
        if f is None:
            raise SystemExit(f"--traces: {t} is not a file (relative to the working directory "
                             "or the repository; --traces '' for constant-rate links only)")
        found.append(str(f.resolve()))
    if not all(0.0 <= p <= 1.0 for p in (args.trace_prob, args.mixed_w)):
        raise SystemExit("--trace-prob, --mixed-w: give probabilities in [0, 1]")
    return ScenarioRanges(
        duration_s=args.duration_s, rate_mbps=args.rate_mbps, rtt_ms=args.rtt_ms,
        buffer_bdp=args.buffer_bdp, loss=args.loss, stagger_s=args.stagger_s, traces=found,
        trace_prob=args.trace_prob if found else 0.0, trace_scale=args.trace_scale,
        other_preferences=other_preferences, mixed_prob=args.mixed_w,
        buffer_dist="log-uniform" if args.buffer_dist == "log" else "uniform")
