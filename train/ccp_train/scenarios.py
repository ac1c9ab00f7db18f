"""Scenario distributions for training: ranges in, seeded scenario TOML out.

A `ScenarioRanges` describes a family of dumbbell scenarios (link rate, RTT, buffer, random
loss, optional cellular traces, competing flows and their algorithms, learning flows and
their preferences). `sample(rng)` draws one and renders it in the simulator's scenario
format (see datapath/sim/scenarios/*.toml), so training and `ccp-agent --sim` read the same
files. An `Episodes` adds the algorithm's `[algs.*]` table to each scenario: the run's fixed
knobs (its dynamics) and, per episode, an optional `EpisodeStart` (knobs that only set where
an episode begins).
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


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
    #: mahimahi traces; with probability `trace_prob` one replaces the constant rate
    traces: Sequence[str] = ()
    trace_prob: float = 0.0
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

        lines = [
            f"duration_s = {uni(self.duration_s):.3f}",
            f"seed = {rng.randrange(1, 2**31)}",
            "[link]",
        ]
        if self.traces and rng.random() < self.trace_prob:
            trace = Path(rng.choice(list(self.traces))).resolve()
            # drawn only when enabled, so other ranges keep their seeded sequences
            if self.trace_offsets > 1:
                from ccp_train.harness.runner import rotated_trace

                frac = rng.randrange(self.trace_offsets) / self.trace_offsets
                trace = rotated_trace(trace, frac, Path(self.trace_cache or "traces"))
            lines.append(f'trace = "{trace}"')
            if self.trace_scale != (1.0, 1.0):
                lines.append(f"trace_scale = {uni(self.trace_scale):.4f}")
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
        lines.append(f"buffer_bdp = {buffer:.4f}")
        lines.append(f"loss = {uni(self.loss):.6f}")
        n = rng.randint(self.learners[0], self.learners[1])
        rtt = uni(self.rtt_ms)
        stagger = uni(self.stagger_s)
        w = rng.choice(list(self.preferences)) if self.preferences else None
        for i in range(n):
            lines += ["[[flow]]", f'alg = "{alg}"']
            lines.append(f"rtt_ms = {(rtt if self.same_rtt else uni(self.rtt_ms)):.3f}")
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
                lines += ["[[flow]]", f'alg = "{c.alg}"', f"rtt_ms = {uni(self.rtt_ms):.3f}"]
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
