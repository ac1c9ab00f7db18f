"""Scenario distributions for training: ranges in, seeded scenario TOML out.

A `ScenarioRanges` describes a family of dumbbell scenarios (link rate, RTT, buffer, random
loss, optional cellular traces, competing flows and their algorithms, learning flows and
their preferences). `sample(rng)` draws one and renders it in the simulator's scenario
format (see datapath/sim/scenarios/*.toml), so training and `ccp-agent --sim` read the same
files.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from pathlib import Path


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
    rtt_ms: tuple[float, float] = (10.0, 50.0)
    buffer_bdp: tuple[float, float] = (0.5, 3.0)
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
    #: all learners share one RTT (True) or draw their own
    same_rtt: bool = True

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
            lines.append(f'trace = "{trace}"')
            if self.trace_scale != (1.0, 1.0):
                lines.append(f"trace_scale = {uni(self.trace_scale):.4f}")
        else:
            lines.append(f"rate_mbps = {uni(self.rate_mbps):.4f}")
        lines.append(f"buffer_bdp = {uni(self.buffer_bdp):.4f}")
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
        return "\n".join(lines) + "\n"
