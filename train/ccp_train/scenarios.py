"""Scenario distributions for training: ranges in, seeded scenario TOML out.

A `ScenarioRanges` describes a family of dumbbell scenarios (link rate, RTT, buffer, random
loss, optional variable-capacity traces, competing flows and their algorithms, learning flows
and their preferences). `sample(rng)` draws one and renders it in the simulator's scenario
format (see datapath/sim/scenarios/*.toml), so training and `ccp-agent --sim` read the same
files.

Trace episodes (:func:`draw_trace`): a recording drawn from the trace corpus's ``train`` split
by kind weight (``corpus`` a :class:`ccp_train.corpus.TraceDraw`, the trainers' default), or
from explicit files (``traces``, the pre-corpus behaviour, same draws), or with probability
``synthetic_prob`` a synthetic capacity log (``ccp_train.capgen``). Every drawn recording
passes :func:`guard_training_trace` first: a corpus ``tune`` or ``eval`` recording never
reaches training.

An `Episodes` adds the algorithm's `[algs.*]` table to each scenario: the run's fixed knobs
(its dynamics) and, per episode, an optional `EpisodeStart` (knobs that only set where an
episode begins).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the corpus module pulls in the harness: imported where it is used
    from ccp_train.corpus import TraceDraw

#: length of a synthetic capacity log (``--synthetic-prob``), seconds (the simulator loops it)
SYNTHETIC_DURATION_S = 120.0


@functools.lru_cache(maxsize=1)
def _corpus_splits() -> Mapping[str, str]:
    """Resolved path -> split of every corpus recording, read once per process."""
    from ccp_train import corpus

    return {str(t.file): t.split for t in corpus.load()}


def guard_training_trace(path: str | Path, from_corpus: bool) -> None:
    """Refuse a trace a training episode is about to use that the corpus tags ``tune`` or
    ``eval`` (or, drawn from the corpus, that is not in its ``train`` split at all): the
    runtime guard behind :func:`ccp_train.corpus.check_training_traces` (cached, per episode)."""
    from ccp_train.corpus import CorpusError

    split = _corpus_splits().get(str(Path(path).resolve()))
    if split == "train" or (split is None and not from_corpus):
        return
    what = f"a corpus `{split}` trace" if split else "not a corpus recording"
    raise CorpusError(f"{path} was drawn for a training episode but is {what}: training sees "
                      "the corpus `train` split only (docs/corpus.md)")


def draw_trace(rng: random.Random, files: Sequence[str], corpus: TraceDraw | None,
               synthetic_prob: float, synthetic_kinds: Mapping[str, float] | None,
               cache: Path) -> tuple[Path, bool]:
    """The trace of one trace episode (its ``trace_prob`` draw done) and whether it is
    synthetic. With probability ``synthetic_prob`` (always, with no recordings to draw) a
    synthetic capacity log written under ``cache``; else one of ``files`` (uniformly: the
    pre-corpus draw) or, with no files, a corpus ``train`` recording (``corpus.draw``). A
    recording passes :func:`guard_training_trace` first."""
    recordings = bool(files) or corpus is not None
    # drawn only when enabled, so the other ranges keep their seeded sequences
    if synthetic_prob > 0 and (not recordings or rng.random() < synthetic_prob):
        from ccp_train import capgen  # written separately; needed only here

        kinds = dict(synthetic_kinds) if synthetic_kinds else None
        return Path(capgen.synthetic_trace(rng, SYNTHETIC_DURATION_S, cache, kinds)), True
    if files:
        path = rng.choice(list(files))
        guard_training_trace(path, from_corpus=False)
    elif corpus is not None:
        path = corpus.draw(rng)
        guard_training_trace(path, from_corpus=True)
    else:
        raise ValueError("a trace episode with no trace source (no files, no corpus, "
                         "synthetic_prob 0)")
    return Path(path), False


def trace_on(rng: random.Random, files: Sequence[str], corpus: TraceDraw | None,
             synthetic_prob: float, trace_prob: float) -> bool:
    """Whether this episode runs a trace. Explicit files draw exactly as before the corpus
    (one draw whenever files are given, even at ``trace_prob`` 0); the other sources draw only
    when they can give a trace, so a trainer without trace episodes keeps its sequence."""
    if files:
        return rng.random() < trace_prob
    if trace_prob <= 0 or (corpus is None and synthetic_prob <= 0):
        return False
    return rng.random() < trace_prob


def describe_trace_source(files: Sequence[str], corpus: TraceDraw | None,
                          synthetic_prob: float,
                          synthetic_kinds: Mapping[str, float] | None) -> dict[str, Any]:
    """Where trace episodes come from, for a model card's ``scenario_ranges``."""
    if files:
        source: dict[str, Any] = {"source": "files", "files": [Path(t).name for t in files]}
    elif corpus is not None:
        source = corpus.describe()
    else:
        source = {"source": "none"}
    out: dict[str, Any] = {"trace_source": source, "synthetic_prob": synthetic_prob}
    if synthetic_prob > 0:
        out["synthetic_kinds"] = dict(synthetic_kinds) if synthetic_kinds else None
        out["synthetic_duration_s"] = SYNTHETIC_DURATION_S
    return out


@functools.lru_cache(maxsize=1024)
def trace_mean_mbps(path: str) -> float:
    """A trace's mean capacity (Mbit/s; mahimahi or throughput log), as the simulator reads
    and serves it."""
    from ccp_train import _native

    return float(_native.trace_mean_mbps(path))


def max_buffer_bdp(mean_mbps: float, min_rtt_ms: float) -> float:
    """The deepest buffer (in BDPs at ``mean_mbps`` and ``min_rtt_ms``) the simulator accepts,
    with 1 % to spare (``_native.sim_limits()``: its packet size and largest buffer)."""
    from ccp_train import _native

    packet_bytes, max_pkts = _native.sim_limits()
    bdp_pkts = mean_mbps * 1e6 * min_rtt_ms / 1e3 / (8.0 * packet_bytes)
    return math.inf if bdp_pkts <= 0 else 0.99 * max_pkts / bdp_pkts


@dataclasses.dataclass(frozen=True)
class Competitor:
    """Flows of another algorithm sharing the bottleneck."""

    alg: str
    count: tuple[int, int] = (1, 1)


@dataclasses.dataclass(frozen=True)
class ScenarioRanges:
    """Uniform ranges (inclusive) for every scenario parameter."""

    duration_s: tuple[float, float] = (10.0, 10.0)
    rate_mbps: tuple[float, float] = (1.0, 5.0)
    #: how `rate_mbps` is drawn: "uniform" or "log-uniform"
    rate_dist: str = "uniform"
    rtt_ms: tuple[float, float] = (10.0, 50.0)
    buffer_bdp: tuple[float, float] = (0.5, 3.0)
    #: how `buffer_bdp` is drawn: "uniform" or "log-uniform"
    buffer_dist: str = "uniform"
    loss: tuple[float, float] = (0.0, 0.03)
    #: number of learning flows (all run the algorithm being trained)
    learners: tuple[int, int] = (1, 1)
    #: learners start this many seconds apart (0: together)
    stagger_s: tuple[float, float] = (0.0, 0.0)
    #: the learners' preference vectors: one is drawn per episode (None: the agent default)
    preferences: Sequence[tuple[float, float, float]] | None = None
    #: with probability `mixed_prob` each learner after the first draws its own preference
    #: from `other_preferences` instead (flows with different objectives on one bottleneck)
    other_preferences: Sequence[tuple[float, float, float]] = ()
    mixed_prob: float = 0.0
    competitors: Sequence[Competitor] = ()
    #: with probability `trace_prob` a trace replaces the constant rate: one of these files
    #: (uniformly; the pre-corpus behaviour) or, with none, a recording of the corpus's train
    #: split (`corpus`), or with probability `synthetic_prob` a synthetic capacity log
    #: (`ccp_train.capgen`, written under `trace_cache`, kinds `synthetic_kinds`)
    traces: Sequence[str] = ()
    trace_prob: float = 0.0
    corpus: TraceDraw | None = None
    synthetic_prob: float = 0.0
    synthetic_kinds: Mapping[str, float] | None = None
    #: capacity multiplier for a trace link (`link.trace_scale`), drawn per episode
    trace_scale: tuple[float, float] = (1.0, 1.0)
    #: more than 1: a trace starts at one of this many points of its period (the harness's
    #: rotation, `ccp_train.harness.runner.rotated_trace`), the rotated copy written under
    #: `trace_cache`
    trace_offsets: int = 0
    trace_cache: str = ""
    #: all learners share one RTT (True) or draw their own
    same_rtt: bool = True
    #: with probability `netstats_prob` the bottleneck exports in-network statistics
    #: (``[netstats]``, Owl's PNC/PNA) covering a share of the path drawn from `known_share`
    netstats_prob: float = 0.0
    known_share: tuple[float, float] = (1.0, 1.0)

    def sample(self, rng: random.Random, alg: str) -> str:
        """Draw one scenario; returns its TOML text."""

        def uni(r: tuple[float, float]) -> float:
            return rng.uniform(r[0], r[1])

        trace_mbps = 0.0
        rtts: list[float] = []
        lines = [
            f"duration_s = {uni(self.duration_s):.3f}",
            f"seed = {rng.randrange(1, 2**31)}",
            "[link]",
        ]
        if trace_on(rng, self.traces, self.corpus, self.synthetic_prob, self.trace_prob):
            cache = Path(self.trace_cache or "traces")
            trace, synthetic = draw_trace(rng, self.traces, self.corpus, self.synthetic_prob,
                                          self.synthetic_kinds, cache)
            trace = trace.resolve()
            # drawn only when enabled, so other ranges keep their seeded sequences
            if self.trace_offsets > 1 and not synthetic:
                from ccp_train.harness.runner import rotated_trace

                frac = rng.randrange(self.trace_offsets) / self.trace_offsets
                trace = rotated_trace(trace, frac, cache)
            lines.append(f'trace = "{trace}"')
            scale = 1.0
            if self.trace_scale != (1.0, 1.0):
                scale = float(f"{uni(self.trace_scale):.4f}")
                lines.append(f"trace_scale = {scale:.4f}")
            trace_mbps = trace_mean_mbps(str(trace)) * scale
        elif self.rate_dist == "log-uniform" and self.rate_mbps[0] > 0:
            lo, hi = self.rate_mbps
            rate = math.exp(rng.uniform(math.log(lo), math.log(hi)))
            lines.append(f"rate_mbps = {rate:.4f}")
        else:
            lines.append(f"rate_mbps = {uni(self.rate_mbps):.4f}")
        lo, hi = self.buffer_bdp
        if self.buffer_dist == "log-uniform" and lo > 0:
            buffer = math.exp(rng.uniform(math.log(lo), math.log(hi)))
        else:
            buffer = uni(self.buffer_bdp)
        buffer_at = len(lines)
        lines.append(f"buffer_bdp = {buffer:.4f}")
        lines.append(f"loss = {uni(self.loss):.6f}")
        n = rng.randint(self.learners[0], self.learners[1])
        rtt = uni(self.rtt_ms)
        stagger = uni(self.stagger_s)
        w = rng.choice(list(self.preferences)) if self.preferences else None
        for i in range(n):
            lines += ["[[flow]]", f'alg = "{alg}"']
            rtts.append(rtt if self.same_rtt else uni(self.rtt_ms))
            lines.append(f"rtt_ms = {rtts[-1]:.3f}")
            lines.append(f"start_s = {i * stagger:.3f}")
            wi = w
            # draws only when mixing is on, so other ranges keep their seeded sequences
            if i > 0 and self.mixed_prob > 0 and self.other_preferences:
                if rng.random() < self.mixed_prob:
                    wi = rng.choice(list(self.other_preferences))
            if wi is not None:
                lines.append(f"w = [{wi[0]!r}, {wi[1]!r}, {wi[2]!r}]")
        for c in self.competitors:
            for _ in range(rng.randint(c.count[0], c.count[1])):
                rtts.append(uni(self.rtt_ms))
                lines += ["[[flow]]", f'alg = "{c.alg}"', f"rtt_ms = {rtts[-1]:.3f}"]
        if trace_mbps > 0 and rtts:
            # a fast recording at a long RTT and a deep buffer can ask for more packets than
            # the simulator holds: the buffer is capped there (no draw, so the sequence stays)
            cap = max_buffer_bdp(trace_mbps, min(float(f"{r:.3f}") for r in rtts))
            if buffer > cap:
                lines[buffer_at] = f"buffer_bdp = {math.floor(cap * 1e4) / 1e4:.4f}"
        # drawn last and only when enabled, so other ranges keep their seeded sequences
        if self.netstats_prob > 0 and rng.random() < self.netstats_prob:
            lines += ["[netstats]", f"known_share = {uni(self.known_share):.4f}"]
        return "\n".join(lines) + "\n"

    def describe(self) -> dict[str, Any]:
        """The ranges as a model card's ``training.scenario_ranges``."""
        return {
            "duration_s": list(self.duration_s),
            "rate_mbps": list(self.rate_mbps),
            **({"rate_dist": self.rate_dist} if self.rate_dist != "uniform" else {}),
            "rtt_ms": list(self.rtt_ms),
            "buffer_bdp": list(self.buffer_bdp),
            "buffer_dist": self.buffer_dist,
            "loss": list(self.loss),
            "stagger_s": list(self.stagger_s),
            "traces": [Path(t).name for t in self.traces],
            "trace_prob": self.trace_prob,
            "trace_scale": list(self.trace_scale),
            **({"trace_offsets": self.trace_offsets} if self.trace_offsets > 1 else {}),
            **describe_trace_source(self.traces, self.corpus, self.synthetic_prob,
                                    self.synthetic_kinds),
            "mixed_w_prob": self.mixed_prob,
            "competitors": [{"alg": c.alg, "count": list(c.count)} for c in self.competitors],
            **({"netstats_prob": self.netstats_prob, "known_share": list(self.known_share)}
               if self.netstats_prob > 0 else {}),
        }


@dataclasses.dataclass(frozen=True)
class EpisodeStart:
    """Knobs that set where an episode begins (not the dynamics; left out of the card's
    ``dynamics``): with probability `prob` an episode sets `fixed` and draws each of `drawn`
    log-uniformly from its range (MOCC: skip start-up, begin at a random rate)."""

    prob: float = 0.0
    fixed: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    drawn: Mapping[str, tuple[float, float]] = dataclasses.field(default_factory=dict)

    def draw(self, rng: random.Random) -> dict[str, Any]:
        if self.prob <= 0 or rng.random() >= self.prob:
            return {}
        out = dict(self.fixed)
        for k, (lo, hi) in self.drawn.items():
            out[k] = round(math.exp(rng.uniform(math.log(lo), math.log(hi))), 4)
        return out

    def describe(self) -> dict[str, Any]:
        return {"prob": self.prob, "fixed": dict(self.fixed),
                "drawn_log_uniform": {k: list(v) for k, v in self.drawn.items()}}


@dataclasses.dataclass(frozen=True)
class Episodes:
    """Where a training environment's episodes come from: a scenario from `ranges`, and the
    `[algs.*]` table `algs_toml` (the run's knobs; None: the agent's defaults) followed by the
    episode's start knobs under `[algs.<alg>]` (`start`). Drawn in that order from one seeded
    generator; picklable, so rollout workers draw the same episodes as the trainer would."""

    alg: str
    ranges: ScenarioRanges
    algs_toml: str | None = None
    start: EpisodeStart = EpisodeStart()

    def draw(self, rng: random.Random) -> tuple[str, str | None]:
        scenario = self.ranges.sample(rng, self.alg)
        return scenario, self.algs_for(rng)

    def algs_for(self, rng: random.Random) -> str | None:
        """The `[algs.*]` tables of an episode whose scenario was just drawn from `rng`: the
        run's knobs, then the episode's start knobs (drawn from `rng`) under its own table."""
        extra = self.start.draw(rng)
        if not extra:
            return self.algs_toml
        table = f"[algs.{self.alg}]"
        head = self.algs_toml or table + "\n"
        if head.rfind("[") != head.rfind(table):
            raise ValueError(f"algs_toml must end with its {table} table (the start goes there)")
        body = "".join(f"{k} = {_toml(v)}\n" for k, v in extra.items())
        return head + body

    def with_ranges(self, **changes: Any) -> Episodes:
        return dataclasses.replace(self, ranges=dataclasses.replace(self.ranges, **changes))


def _toml(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v)
