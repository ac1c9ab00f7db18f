"""What a trainer knows about a learned algorithm, read from the Rust bindings, never copied.

:class:`AlgSpec` is ``_native.spec(alg)``: observation and action sizes, action bounds, feature
version, and the named slices of the observation a trainer builds its networks on (MOCC: its
preference ``w``). :class:`Knobs` is the ``[algs.<alg>]`` table a trainer runs: the agent's
defaults (``_native.defaults(alg)``) with the ``--knob NAME=VALUE`` overrides of the command
line; its :meth:`Knobs.dynamics` are what the model card records and what the agent checks
on load (``_native.dynamics``, the algorithm's ``LearnedAlgorithm::dynamics()``).

Train what you serve: the knobs that shape observations and actions (the dynamics) are fixed
for a run and recorded; only knobs that set where an episode begins (the ones the defaults
have and the dynamics do not, e.g. MOCC's ``startup``, ``initial_rate_mbps``) may vary per
episode (:class:`ccp_train.scenarios.EpisodeStart`).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import tomllib
from collections.abc import Iterable, Mapping
from typing import Any

from ccp_train import _native


@dataclasses.dataclass(frozen=True)
class AlgSpec:
    """``_native.spec(alg)``: the model contract of a learned algorithm."""

    alg: str
    feature_version: int
    obs_dim: int
    act_dim: int
    action_low: tuple[float, ...]
    action_high: tuple[float, ...]
    masked: bool
    recurrent_hidden: int | None
    layout: Mapping[str, tuple[int, int]]
    #: a discrete policy's number of Q-values (the action is their argmax index); None:
    #: continuous actions
    n_actions: int | None = None

    @classmethod
    def of(cls, alg: str) -> AlgSpec:
        s = _native.spec(alg)
        return cls(
            alg=alg,
            feature_version=int(s["feature_version"]),
            obs_dim=int(s["obs_dim"]),
            act_dim=int(s["act_dim"]),
            action_low=tuple(float(x) for x in s["action_low"]),
            action_high=tuple(float(x) for x in s["action_high"]),
            masked=bool(s["masked"]),
            recurrent_hidden=s["recurrent_hidden"],
            layout={k: (int(v[0]), int(v[1])) for k, v in s["layout"].items()},
            n_actions=None if s.get("n_actions") is None else int(s["n_actions"]),
        )

    def slice(self, name: str) -> slice:
        """The observation slice ``name`` of the layout (``KeyError`` names the known ones)."""
        if name not in self.layout:
            raise KeyError(f"{self.alg}'s observation has no {name!r} slice: {sorted(self.layout)}")
        a, b = self.layout[name]
        return slice(a, b)


def parse_knob(text: str) -> tuple[str, Any]:
    """``NAME=VALUE`` with a TOML value (``0.1``, ``10``, ``true``) -> ``(name, value)``."""
    name, sep, value = text.partition("=")
    name = name.strip().replace("-", "_")
    if not sep or not name or not value.strip():
        raise argparse.ArgumentTypeError(f"--knob {text!r}: expected NAME=VALUE, e.g. alpha=0.05")
    try:
        v = tomllib.loads(f"v = {value.strip()}")["v"]
    except tomllib.TOMLDecodeError as e:
        raise argparse.ArgumentTypeError(f"--knob {text!r}: {value!r} is not a value") from e
    return name, v


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ("nan" if math.isnan(v) else
                                                   ("inf" if v > 0 else "-inf"))
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    raise TypeError(f"knob value {v!r}: expected a number, bool or string")


class Knobs:
    """The ``[algs.<alg>]`` table a trainer runs: the agent's defaults, with ``overrides``.

    Unknown knobs, values out of range (the algorithm's own ``validate()``) and knobs outside
    the dynamics are refused with the reason, unless the trainer names them in ``settable``
    (Jury's reward knobs: fixed for a run, not the dynamics); the others only set an episode's
    start, which the trainer draws."""

    def __init__(self, alg: str,
                 overrides: Mapping[str, Any] | Iterable[tuple[str, Any]] = (),
                 settable: Iterable[str] = ()) -> None:
        self.alg = alg
        self.defaults = dict(_native.defaults(alg))
        self.overrides = dict(overrides)
        dyn = set(_native.dynamics(alg))
        for k in self.overrides:
            if k not in self.defaults:
                raise ValueError(f"--knob {k}: {alg} has no such knob; its knobs: "
                                 + ", ".join(sorted(dyn)))
            if k not in dyn and k not in set(settable):
                raise ValueError(f"--knob {k}: sets where an episode begins, not the dynamics; "
                                 "the trainer draws it per episode")
        try:
            self._dynamics = dict(_native.dynamics(alg, self.toml()))
        except ValueError as e:
            raise ValueError(f"--knob: {e}") from e

    def toml(self, extra: Mapping[str, Any] | None = None) -> str:
        """The ``[algs.<alg>]`` table: the overrides (the rest are the agent's defaults), then
        ``extra`` (an episode's start)."""
        items = {**self.overrides, **(extra or {})}
        return f"[algs.{self.alg}]\n" + "".join(f"{k} = {toml_value(v)}\n"
                                                for k, v in items.items())

    def dynamics(self) -> dict[str, Any]:
        """What the card records and the agent checks: ``_native.dynamics(alg, self.toml())``."""
        return dict(self._dynamics)

    def flags(self) -> list[str]:
        """The overrides as command-line flags (``--knob k=v`` each)."""
        return [a for k, v in self.overrides.items() for a in ("--knob", f"{k}={toml_value(v)}")]
