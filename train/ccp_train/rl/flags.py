"""Command-line flags every trainer shares: the run (seed, threads, log, rollout workers, Ray),
the scenario ranges (-> :class:`ccp_train.scenarios.ScenarioRanges`), where trace episodes come
from (:func:`add_trace_source`: the corpus's train split by kind, explicit files, synthetic
logs), and parsers for comma-separated values."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ccp_train.scenarios import ScenarioRanges

REPO_ROOT = Path(__file__).resolve().parents[3]


def default_trace_kinds() -> str:
    """``corpus.DEFAULT_KIND_WEIGHTS`` as a ``--trace-kinds`` value."""
    from ccp_train.corpus import DEFAULT_KIND_WEIGHTS

    return ",".join(f"{k}={w:g}" for k, w in DEFAULT_KIND_WEIGHTS.items())


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


def add_trace_source(g: Any) -> None:
    """Where trace episodes come from (every trainer; each keeps its own ``--trace-prob``,
    ``--trace-scale``, ``--trace-offsets``): :func:`trace_source_from_args` reads them."""
    g.add_argument("--trace-kinds", default=default_trace_kinds(), metavar="KIND=W,...",
                   help="trace episodes draw a recording of the trace corpus's train split: a "
                        "kind by these weights, then uniformly within it ('' turns the corpus "
                        "off; kinds: see docs/corpus.md)")
    g.add_argument("--traces", default="", metavar="FILE,...",
                   help="explicit trace files (mahimahi or throughput logs) instead of the "
                        "corpus, drawn uniformly; a corpus tune/eval file is refused")
    g.add_argument("--synthetic-prob", type=float, default=0.0,
                   help="P(a trace episode runs a synthetic capacity log of ccp_train.capgen "
                        "instead of a recording; kinds: --trace-kinds)")


def trace_source_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """:func:`add_trace_source`'s flags, checked: the keyword arguments ``traces``, ``corpus``,
    ``synthetic_prob``, ``synthetic_kinds`` of :class:`ScenarioRanges` (and Owl's episodes).
    Explicit ``--traces`` replace the corpus (the pre-corpus draws, unchanged). Raises
    ``SystemExit`` with the reason."""
    from ccp_train import corpus

    files = []
    for t in filter(None, (x.strip() for x in (args.traces or "").split(","))):
        f = next((c for c in (Path(t), REPO_ROOT / t) if c.is_file()), None)
        if f is None:
            raise SystemExit(f"--traces: {t} is not a file (relative to the working directory "
                             "or the repository; --traces '' to draw from the corpus)")
        files.append(str(f.resolve()))
    try:
        corpus.check_training_traces(files)
    except corpus.CorpusError as e:
        raise SystemExit(f"--traces: {e}") from e
    kinds: dict[str, float] | None = None
    if (args.trace_kinds or "").strip():
        try:
            kinds = corpus.parse_kind_weights(args.trace_kinds)
        except corpus.CorpusError as e:
            raise SystemExit(f"--trace-kinds {args.trace_kinds!r}: {e}") from e
    draw = None
    if kinds is not None and not files:
        try:
            draw = corpus.TraceDraw.from_train_split(kinds)
        except corpus.CorpusError as e:
            raise SystemExit(f"--trace-kinds {args.trace_kinds!r}: {e}") from e
    p = args.synthetic_prob
    if not 0.0 <= p <= 1.0:
        raise SystemExit(f"--synthetic-prob {p:g}: give a probability in [0, 1]")
    if 0.0 < p < 1.0 and not files and draw is None:
        raise SystemExit(f"--synthetic-prob {p:g} with no recordings to draw (--traces '' and "
                         "--trace-kinds ''): give 0 or 1, or a trace source")
    return {"traces": tuple(files), "corpus": draw, "synthetic_prob": p,
            "synthetic_kinds": kinds if p > 0 else None}


def check_trace_ranges(args: argparse.Namespace) -> None:
    """The per-trainer trace flags (``--trace-prob``, ``--trace-scale``, ``--trace-offsets``
    where the trainer has it), checked; raises ``SystemExit`` with the reason."""
    if not 0.0 <= args.trace_prob <= 1.0:
        raise SystemExit(f"--trace-prob {args.trace_prob:g}: give a probability in [0, 1]")
    lo, hi = args.trace_scale
    if not 0.0 < lo <= hi:
        raise SystemExit(f"--trace-scale {lo:g},{hi:g}: give lo,hi with 0 < lo <= hi")
    if getattr(args, "trace_offsets", 0) < 0:
        raise SystemExit(f"--trace-offsets {args.trace_offsets}: give 0 or more (0, 1: off)")


def add_scenarios(p: argparse.ArgumentParser) -> None:
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
    g.add_argument("--trace-prob", type=float, default=0.25,
                   help="P(an episode runs a trace instead of a constant rate)")
    g.add_argument("--trace-scale", type=floats(2), default="0.5,2",
                   help="trace capacity multiplier range")
    g.add_argument("--trace-offsets", type=int, default=0,
                   help="more than 1: a trace starts at one of this many points of its period")
    add_trace_source(g)
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
    if not all(0.0 <= p <= 1.0 for p in (args.trace_prob, args.mixed_w)):
        raise SystemExit("--trace-prob, --mixed-w: give probabilities in [0, 1]")
    check_trace_ranges(args)
    source = trace_source_from_args(args)
    has = bool(source["traces"]) or source["corpus"] is not None or source["synthetic_prob"] > 0
    out = getattr(args, "out", None)
    return ScenarioRanges(
        duration_s=args.duration_s, rate_mbps=args.rate_mbps, rtt_ms=args.rtt_ms,
        buffer_bdp=args.buffer_bdp, loss=args.loss, stagger_s=args.stagger_s,
        trace_prob=args.trace_prob if has else 0.0, trace_scale=args.trace_scale,
        trace_offsets=args.trace_offsets, trace_cache=str(Path(out) / "traces") if out else "",
        other_preferences=other_preferences, mixed_prob=args.mixed_w,
        buffer_dist="log-uniform" if args.buffer_dist == "log" else "uniform", **source)
