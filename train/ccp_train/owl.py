"""Owl (the Owl paper §IV–VII, Table II) trained with Stable-Baselines3's DQN on the simulator.

    python -m ccp_train.owl train --out DIR [--seed 1] [--steps 2000000] [flags]

One file, every hyper-parameter a flag, seeded (``ccp_train.rl.determinism``), scalars logged
every ``--log-interval`` transitions to ``DIR/owl.train.jsonl`` and plotted as
``DIR/owl.curves.{csv,png}``; the Q-network is exported to ``DIR/owl.onnx`` (inputs ``obs`` and
``mask``, output ``action``: the 7 Q-values) with its card (``DIR/owl.json``, ``output_kind``
``"q_values"``, ``n_actions`` 7) and ``DIR/owl.zip`` (SB3).

**What is trained.** Features, state mask, the window's slow start and loss response, the
action map ``cwnd += {−10, −3, −1, 0, +1, +3, +10}`` packets and the reward (eq. 7) are the Rust
core's (``algs/src/owl/``), run by the agent's own flow driver inside the simulator: the same
code serves the model. The in-network statistics reach the core exactly as under
``ccp-agent --sim``: the episode's scenario has a ``[netstats]`` table or not, the bottleneck
publishes PNC/PNA every ``--netstats-period-s`` and the flow driver hands each new sample to
the core, which masks stale or absent ones. So masking is drawn per episode
(``--netstats-prob``), and with statistics the path's known share is drawn from
``--known-share`` (the paper trains with 0–100 % knowledge and tests at 20 %).

**Q-network.** ``MaskedQNetwork``: SB3's DQN ``QNetwork`` whose input is
``concat(obs, mask)``, whose first layer (:class:`MaskedInput`) multiplies the features by the
mask (absent ones are zero whatever a source wrote) and passes the mask on as an input, then
``--net`` (Table II: 512-256, ReLU) and 7 outputs. The exported graph takes ``obs`` and
``mask`` separately and is exactly that function (:class:`OwlQ`).

**Episodes** (Table II's network ranges): link rate log-uniform in ``--rate-mbps`` (6-100
Mbit/s), minimum RTT uniform in ``--rtt-ms`` (1-40 ms), drop-tail buffer log-uniform in
``--buffer-pkts`` (3-2000 packets; uniform draws would almost never give the shallow buffers),
random loss ``--loss`` (the paper's 0 %). With probability ``--trace-prob`` a trace replaces the
constant rate: a recording of the trace corpus's ``train`` split (a kind drawn by
``--trace-kinds``, then a recording uniformly; the harness evaluates on the ``eval`` split),
explicit ``--traces`` files instead, or with ``--synthetic-prob`` a synthetic capacity log; a
recording starts at one of ``--trace-offsets`` points of its period so episodes see all of it,
and the episode's capacity is the trace's mean times its ``--trace-scale``. With probability
``--multi-prob`` 2 to ``--max-flows`` Owl flows share the bottleneck (same RTT, starts
``--stagger-s`` apart), all learners of one shared network.

**Steps and transitions.** As Jury's trainer: a step ends at any flow's report with a decision
due (``SimEnv(pause="any")``), so every flow decides at each of its own decisions (one per
RTT in congestion avoidance) while the others run on. A decision ``(s_t, m_t, a_t)`` becomes
the transition ``(s_t, m_t, a_t, r, s_t', m_t')`` at the flow's next decision ``t'``. Owl
decides only in congestion avoidance, so between two decisions there may be a loss and its
recovery: ``r`` is the mean of the core's eq. 7 over every report since the action
(``SimEnv.span_rewards``; ``--reward last`` takes only the report at ``t'``, which never
contains a loss, since Owl does not decide on a loss report). Episode ends are time limits:
they bootstrap and the flow's open decision is dropped.

**Why not ``model.learn()``.** As for Jury: SB3's collection loop wants a fixed number of
sub-environments stepping together, here flows come and go and decide when their core says.
The collection is ours (ε-greedy: ``--eps-start`` to ``--eps-end`` linearly over
``--eps-fraction`` of ``--steps``, uniform actions for the first ``--learning-starts``); the
learning is SB3's: its replay buffer, ``DQN.train`` (Huber loss on the one-step target of the
target network, Adam, gradient clipping) and the target network, copied every
``--target-update`` transitions (``--tau`` 1: a hard copy). ``--train-every`` new transitions
make ``--gradient-steps`` updates. ``--envs`` bottlenecks run side by side in this process
(batched inference), each with its own seeded episode stream.

**Selection.** None: the final network is exported (a rule fixed before training). Any
comparison of runs or knobs uses the harness's tune split only
(``python -m ccp_train.harness --split tune --card DIR/owl.json``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import shlex
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import DQN
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.common.utils import polyak_update
from torch import nn

from ccp_train import _native, scenarios
from ccp_train import card as card_mod
from ccp_train.export import export_torch
from ccp_train.rl import curves, determinism
from ccp_train.rl.flags import (
    add_trace_source,
    check_trace_ranges,
    floats,
    ints,
    trace_source_from_args,
)
from ccp_train.rl.log import Logger, sb3_quiet_logger
from ccp_train.rl.spec import AlgSpec, Knobs, parse_knob

if TYPE_CHECKING:
    from ccp_train.corpus import TraceDraw

ALG = "owl"
#: the action index the runtime hands the core (eq. 6): packets added to the window
ACTION_PKTS = (-10, -3, -1, 0, 1, 3, 10)


# --- the Q-network ---------------------------------------------------------------------------


class MaskedInput(BaseFeaturesExtractor):
    """The Q-network's input layer: ``x = concat(obs, mask)`` -> ``concat(obs * mask, mask)``.

    Absent features are zero whatever value they carry, and the network reads which are
    absent (state masking, the Owl paper §IV-A)."""

    def __init__(self, observation_space: gym.spaces.Box) -> None:
        width = int(observation_space.shape[0])
        if width % 2:
            raise ValueError(f"MaskedInput: expected concat(obs, mask), got {width} values")
        super().__init__(observation_space, features_dim=width)
        self.obs_dim = width // 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        obs, mask = x[..., : self.obs_dim], x[..., self.obs_dim:]
        return torch.cat([obs * mask, mask], dim=-1)


class OwlQ(nn.Module):
    """What is exported: ``(obs, mask) -> Q-values``, the DQN's online Q-network."""

    def __init__(self, q_net: nn.Module) -> None:
        super().__init__()
        self.q_net = q_net

    def forward(self, obs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.q_net(torch.cat([obs, mask], dim=-1))


class _Spaces(gym.Env):
    """Only the spaces: SB3 builds the Q-network and replay buffer from them; never stepped."""

    def __init__(self, spec: AlgSpec) -> None:
        assert spec.n_actions is not None and spec.masked
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2 * spec.obs_dim,), np.float32)
        self.action_space = gym.spaces.Discrete(spec.n_actions)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        raise RuntimeError("not an environment: spaces only")

    def step(self, action: Any) -> Any:
        raise RuntimeError("not an environment: spaces only")


def make_dqn(spec: AlgSpec, args: argparse.Namespace) -> DQN:
    """SB3's DQN with the masked Q-network (``--net``) and the run's hyper-parameters."""
    model = DQN(
        "MlpPolicy", _Spaces(spec), learning_rate=args.lr, buffer_size=args.buffer,
        learning_starts=0, batch_size=args.batch_size, tau=args.tau, gamma=args.gamma,
        train_freq=1, gradient_steps=1, target_update_interval=1,
        max_grad_norm=args.max_grad_norm, seed=args.seed, device="cpu",
        policy_kwargs={"net_arch": list(args.net), "features_extractor_class": MaskedInput})
    model.set_logger(sb3_quiet_logger())
    model._current_progress_remaining = 1.0
    return model


# --- episodes --------------------------------------------------------------------------------


def _log_uniform(rng: random.Random, r: tuple[float, float]) -> float:
    return math.exp(rng.uniform(math.log(r[0]), math.log(r[1])))


#: a trace's mean capacity (Mbit/s; mahimahi or throughput log), as the simulator serves it
trace_mean_mbps = scenarios.trace_mean_mbps


@dataclasses.dataclass(frozen=True)
class OwlEpisodes:
    """Table II's networks as simulator scenarios, drawn from one seeded generator."""

    duration_s: tuple[float, float] = (10.0, 30.0)
    rate_mbps: tuple[float, float] = (6.0, 100.0)
    rtt_ms: tuple[float, float] = (1.0, 40.0)
    buffer_pkts: tuple[float, float] = (3.0, 2000.0)
    loss: tuple[float, float] = (0.0, 0.0)
    #: a trace episode's trace: one of these files, or with none a recording of the corpus's
    #: train split (`corpus`), or with probability `synthetic_prob` a synthetic log
    #: (``ccp_train.scenarios.draw_trace``)
    traces: tuple[str, ...] = ()
    trace_prob: float = 0.0
    corpus: TraceDraw | None = None
    synthetic_prob: float = 0.0
    synthetic_kinds: Mapping[str, float] | None = None
    trace_scale: tuple[float, float] = (1.0, 1.0)
    trace_offsets: int = 8
    multi_prob: float = 0.0
    max_flows: int = 1
    stagger_s: tuple[float, float] = (0.0, 0.0)
    netstats_prob: float = 0.5
    netstats_period_s: float = 1.0
    known_share: tuple[float, float] = (0.2, 1.0)
    #: where rotated traces are written (one file per trace and offset)
    trace_cache: str = ""

    def sample(self, rng: random.Random) -> tuple[str, dict[str, Any]]:
        """One scenario's TOML and what was drawn (flows, statistics on or off, trace)."""
        lines = [f"duration_s = {rng.uniform(*self.duration_s):.3f}",
                 f"seed = {rng.randrange(1, 2**31)}", "[link]"]
        trace = None
        if scenarios.trace_on(rng, self.traces, self.corpus, self.synthetic_prob,
                              self.trace_prob):
            trace, synthetic = scenarios.draw_trace(
                rng, self.traces, self.corpus, self.synthetic_prob, self.synthetic_kinds,
                Path(self.trace_cache))
            path = trace
            if not synthetic:  # a synthetic log is drawn fresh: nothing to rotate
                frac = rng.randrange(max(1, self.trace_offsets)) / max(1, self.trace_offsets)
                path = _rotated(trace, frac, Path(self.trace_cache))
            lines.append(f'trace = "{path}"')
            scale = 1.0
            if self.trace_scale != (1.0, 1.0):
                scale = round(rng.uniform(*self.trace_scale), 4)
                lines.append(f"trace_scale = {scale:.4f}")
            capacity = trace_mean_mbps(str(trace)) * scale
        else:
            capacity = round(_log_uniform(rng, self.rate_mbps), 4)
            lines.append(f"rate_mbps = {capacity:.4f}")
        lines.append(f"buffer_pkts = {round(_log_uniform(rng, self.buffer_pkts))}")
        lines.append(f"loss = {rng.uniform(*self.loss):.6f}")
        n = 1
        if self.max_flows > 1 and rng.random() < self.multi_prob:
            n = rng.randint(2, self.max_flows)
        rtt = rng.uniform(*self.rtt_ms)
        stagger = rng.uniform(*self.stagger_s)
        for i in range(n):
            lines += ["[[flow]]", f'alg = "{ALG}"', f"rtt_ms = {rtt:.3f}",
                      f"start_s = {i * stagger:.3f}"]
        netstats = rng.random() < self.netstats_prob
        if netstats:
            lines += ["[netstats]", f"period_s = {self.netstats_period_s!r}",
                      f"known_share = {rng.uniform(*self.known_share):.4f}"]
        info = {"flows": n, "netstats": netstats, "trace": trace.name if trace else None,
                "capacity_mbps": capacity}
        return "\n".join(lines) + "\n", info

    def describe(self) -> dict[str, Any]:
        """The ranges as a model card's ``training.scenario_ranges``."""
        return {
            "duration_s": list(self.duration_s),
            "rate_mbps": list(self.rate_mbps), "rate_dist": "log-uniform",
            "rtt_ms": list(self.rtt_ms),
            "buffer_pkts": list(self.buffer_pkts), "buffer_dist": "log-uniform",
            "loss": list(self.loss),
            "traces": [Path(t).name for t in self.traces], "trace_prob": self.trace_prob,
            "trace_scale": list(self.trace_scale), "trace_offsets": self.trace_offsets,
            **scenarios.describe_trace_source(self.traces, self.corpus, self.synthetic_prob,
                                              self.synthetic_kinds),
            "flows": {"multi_prob": self.multi_prob, "max": self.max_flows,
                      "stagger_s": list(self.stagger_s)},
            "netstats": {"prob": self.netstats_prob, "period_s": self.netstats_period_s,
                         "known_share": list(self.known_share)},
        }


def episodes_from_args(args: argparse.Namespace, out: Path) -> OwlEpisodes:
    """The episodes of the ``train`` flags (rotated and synthetic traces under
    ``out/traces``); raises ``SystemExit`` with the reason for a bad trace flag."""
    check_trace_ranges(args)
    source = trace_source_from_args(args)
    has = bool(source["traces"]) or source["corpus"] is not None or source["synthetic_prob"] > 0
    return OwlEpisodes(
        duration_s=args.duration_s, rate_mbps=args.rate_mbps, rtt_ms=args.rtt_ms,
        buffer_pkts=args.buffer_pkts, loss=args.loss, trace_prob=args.trace_prob if has else 0.0,
        trace_scale=args.trace_scale, trace_offsets=args.trace_offsets,
        multi_prob=args.multi_prob, max_flows=args.max_flows, stagger_s=args.stagger_s,
        netstats_prob=args.netstats_prob, netstats_period_s=args.netstats_period_s,
        known_share=args.known_share, trace_cache=str(out / "traces"), **source)


def _rotated(trace: Path, frac: float, cache: Path) -> Path:
    """The trace started ``frac`` of its period later (the harness's own rotation)."""
    from ccp_train.harness.runner import rotated_trace

    return rotated_trace(trace, frac, cache)


@dataclasses.dataclass
class Bottleneck:
    """One simulated bottleneck and the open decision of each of its flows."""

    rng: random.Random
    episodes_from: OwlEpisodes
    algs_toml: str
    #: eq. 7's unit of λ: "best" (the flow's best delivery rate, the agent's default),
    #: "capacity" (the episode's link capacity, its trace's mean for a trace: set per episode
    #: through the reward knob reward_rate_unit_mbps, with ``knobs``) or "interval" (what the
    #: link offered over each report's interval: the simulator's, per report)
    reward_unit: str = "best"
    knobs: Knobs | None = None
    env: Any = None
    obs: np.ndarray | None = None
    mask: np.ndarray | None = None
    active: np.ndarray | None = None
    prev: dict[int, tuple[np.ndarray, int]] = dataclasses.field(default_factory=dict)
    episodes: int = 0
    with_stats: int = 0
    drawn: dict[str, Any] = dataclasses.field(default_factory=dict)

    def new_episode(self) -> None:
        scenario, self.drawn = self.episodes_from.sample(self.rng)
        algs_toml = self.algs_toml
        if self.reward_unit == "capacity" and self.knobs is not None:
            unit = round(self.drawn["capacity_mbps"], 4)
            algs_toml = self.knobs.toml(extra={"reward_rate_unit_mbps": unit})
        self.env = _native.SimEnv(scenario, ALG, algs_toml=algs_toml, pause="any",
                                  with_mask=True,
                                  reward_in_capacity=self.reward_unit == "interval")
        obs, _rew, active, _done, _t, mask = self.env.reset()
        self.obs, self.mask, self.active = obs, mask, np.asarray(active, bool)
        self.prev.clear()
        self.episodes += 1
        self.with_stats += int(self.drawn["netstats"])


def epsilon(step: int, args: argparse.Namespace) -> float:
    """ε-greedy's ε after ``step`` transitions: 1 before ``--learning-starts``, then linear from
    ``--eps-start`` to ``--eps-end`` over ``--eps-fraction`` of ``--steps``."""
    if step < args.learning_starts and args.init is None:
        return 1.0
    span = max(1.0, args.eps_fraction * args.steps)
    f = min(1.0, step / span)
    return args.eps_start + f * (args.eps_end - args.eps_start)


def _reward(b: Bottleneck, i: int, rew: np.ndarray, mode: str) -> float:
    if mode == "last":
        return float(rew[i])
    sums, counts = b.env.span_rewards()
    return float(sums[i] / counts[i]) if counts[i] > 0 else float(rew[i])


# --- training --------------------------------------------------------------------------------


def train(args: argparse.Namespace, argv: list[str]) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    determinism.seed_everything(args.seed, args.threads)
    spec = AlgSpec.of(ALG)
    assert spec.n_actions == len(ACTION_PKTS) and spec.masked
    defaults = dict(_native.defaults(ALG))
    # the knobs outside the dynamics are the reward's (eq. 7: delta, beta; beta = 0 is
    # Owl-Loss), settable for a run
    reward_names = set(defaults) - set(_native.dynamics(ALG))
    knobs = Knobs(ALG, args.knob, settable=reward_names)
    try:
        episodes = episodes_from_args(args, out)
    except SystemExit as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    command = "python -m ccp_train.owl " + shlex.join(argv)
    log = Logger(Path(args.log) if args.log else out / f"{ALG}.train.jsonl")
    log.log({"kind": "setup", "command": command, "spec": dataclasses.asdict(spec),
             "dynamics": knobs.dynamics(), "ranges": episodes.describe()})

    model = make_dqn(spec, args)
    if args.init:
        model.set_parameters(str(args.init), exact_match=True, device="cpu")
        model.q_net_target.load_state_dict(model.q_net.state_dict())
    explore = np.random.default_rng(args.seed)
    knobs_toml = knobs.toml()
    envs = [Bottleneck(random.Random(args.seed * 1000 + e), episodes, knobs_toml,
                       reward_unit=args.reward_unit, knobs=knobs)
            for e in range(args.envs)]
    for b in envs:
        b.new_episode()

    steps = since_update = since_target = updates = iteration = 0
    next_log = args.log_interval
    window: dict[str, list[float]] = {"reward": [], "delta_pkts": [], "q": [], "stats": []}
    t0 = time.monotonic()
    while steps < args.steps:
        rows = [(b, i) for b in envs for i in np.flatnonzero(b.active)]
        if rows:
            obs = np.stack([b.obs[i] for b, i in rows]).astype(np.float32)
            mask = np.stack([b.mask[i] for b, i in rows]).astype(np.float32)
            x = np.concatenate([obs, mask], axis=1)
            eps = epsilon(steps, args)
            greedy = explore.random(len(rows)) >= eps
            random_a = explore.integers(0, spec.n_actions, len(rows))
            acts = random_a
            if greedy.any():
                with torch.no_grad():
                    q = model.q_net(torch.as_tensor(x))
                window["q"].append(float(q.max(dim=1).values.mean()))
                acts = np.where(greedy, q.argmax(dim=1).numpy(), random_a)
            for k, (b, i) in enumerate(rows):
                b.prev[i] = (x[k], int(acts[k]))
        for b in envs:
            a = np.zeros((b.env.num_learners, 1), np.float32)
            for i, (_x, act) in b.prev.items():
                a[i, 0] = act
            nobs, rew, active, done, _t, nmask = b.env.step(a)
            active = np.asarray(active, bool)
            for i in np.flatnonzero(active):
                if i in b.prev:
                    x0, act = b.prev.pop(i)
                    x1 = np.concatenate([nobs[i], nmask[i]]).astype(np.float32)
                    r = _reward(b, i, rew, args.reward)
                    model.replay_buffer.add(x0[None], x1[None], np.array([[act]]),
                                            np.array([r]), np.array([False]), [{}])
                    steps += 1
                    since_update += 1
                    since_target += 1
                    window["reward"].append(r)
                    window["delta_pkts"].append(float(ACTION_PKTS[act]))
                    window["stats"].append(float(b.drawn["netstats"]))
            b.obs, b.mask, b.active = nobs, nmask, active
            if done:
                b.new_episode()
        if steps >= args.learning_starts and since_update >= args.train_every \
                and model.replay_buffer.size() >= args.batch_size:
            grad = args.gradient_steps * (since_update // args.train_every)
            model.train(gradient_steps=grad, batch_size=args.batch_size)
            updates += grad
            since_update %= args.train_every
        if since_target >= args.target_update:
            polyak_update(model.q_net.parameters(), model.q_net_target.parameters(), args.tau)
            since_target = 0
        if steps >= next_log:
            next_log += args.log_interval
            iteration += 1
            wall = time.monotonic() - t0
            vals = model.logger.name_to_value
            mean = {k: float(np.mean(v)) if v else None for k, v in window.items()}
            rec = {"kind": "iteration", "phase": "dqn", "iteration": iteration,
                   "steps_total": steps, "updates": updates,
                   "episodes": sum(b.episodes for b in envs),
                   "reward": mean["reward"], "q_loss": vals.get("train/loss"),
                   "q_mean": mean["q"], "epsilon": round(epsilon(steps, args), 4),
                   "mean_action_pkts": mean["delta_pkts"], "netstats_share": mean["stats"],
                   "sps": round(steps / wall, 1) if wall > 0 else None,
                   "wall_s": round(wall, 1)}
            if iteration % args.log_every == 0:
                log.log(rec)
            else:
                log.file.write(json.dumps(rec) + "\n")
            window = {k: [] for k in window}
    wall = time.monotonic() - t0
    model.save(out / f"{ALG}.zip")
    n_eps = sum(b.episodes for b in envs)
    with_stats = sum(b.with_stats for b in envs)
    reward_knobs = {k: knobs.overrides.get(k, defaults[k]) for k in sorted(reward_names)}
    per = ("the mean over every report since the action" if args.reward == "mean"
           else "the last report's")
    training = {
        "command": command, "library": _library(), "seed": args.seed, "steps": steps,
        "scenario_ranges": episodes.describe(),
        "notes": (f"DQN (SB3) with a masked Q-network {list(args.net)} (input "
                  f"concat(obs*mask, mask)), lr {args.lr:g}, gamma {args.gamma:g}, batch "
                  f"{args.batch_size}, replay {args.buffer}, target copy every "
                  f"{args.target_update} transitions (tau {args.tau:g}), epsilon "
                  f"{args.eps_start:g} -> {args.eps_end:g} over {args.eps_fraction:g} of the "
                  f"steps, {updates} gradient steps; {n_eps} episodes on {args.envs} "
                  f"bottlenecks, {with_stats} with [netstats]; reward eq. 7 with "
                  + ", ".join(f"{k} = {v}" for k, v in reward_knobs.items())
                  + f", per transition {per}, lambda in units of "
                  + {"capacity": "each episode's link capacity (a trace's mean)",
                     "interval": "the link's capacity over each report's interval",
                     "best": "the flow's best delivery rate"}[args.reward_unit]
                  + "; the final network is exported (no selection)"),
        "wall_s": round(wall, 1),
        "determinism": determinism.record(args.threads),
    }
    onnx_path, card_path = export(model, out / f"{ALG}.onnx", spec, training, knobs_toml)
    log.log({"kind": "done", "steps": steps, "updates": updates, "episodes": n_eps,
             "episodes_with_netstats": with_stats, "wall_s": round(wall, 1),
             "transitions_per_s": round(steps / wall, 1) if wall > 0 else None,
             "onnx": str(onnx_path), "card": str(card_path)})
    log.close()
    curves.export(log.path, out, ALG, Path(args.init) if args.init else None)
    return 0


def export(model: DQN, path: Path, spec: AlgSpec, training: dict,
           algs_toml: str | None) -> tuple[Path, Path]:
    """The online Q-network as ONNX (``obs``, ``mask`` -> ``action``: the Q-values, dynamic
    batch) and its card (``q_values``, ``n_actions``, the run's dynamics)."""
    model.policy.set_training_mode(False)
    onnx_path = export_torch(OwlQ(model.q_net), path, obs_dim=spec.obs_dim, masked=True)
    assert spec.n_actions is not None
    card_path = card_mod.write_card(
        onnx_path, algorithm=ALG, feature_version=spec.feature_version,
        output_kind="q_values", obs_dim=spec.obs_dim, act_dim=1, n_actions=spec.n_actions,
        action_low=[0.0], action_high=[float(spec.n_actions - 1)], masked=True,
        training=training, algs_toml=algs_toml)
    return onnx_path, card_path


def _library() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"stable-baselines3 {version('stable-baselines3')} (DQN)"
    except PackageNotFoundError:  # pragma: no cover
        return "stable-baselines3 (DQN)"


# --- command line ----------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ccp_train.owl", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="train with DQN and export DIR/owl.onnx + card")
    t.add_argument("--out", required=True, help="output folder")
    t.add_argument("--seed", type=int, default=1,
                   help="seeds torch, numpy, episodes, exploration")
    t.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    t.add_argument("--log", default=None, help="JSON-lines log (default OUT/owl.train.jsonl)")
    t.add_argument("--log-interval", type=int, default=1000,
                   help="transitions per logged iteration")
    t.add_argument("--log-every", type=int, default=10, help="print every N iterations")
    t.add_argument("--init", type=Path, default=None, help="start from this SB3 owl.zip")
    t.add_argument("--knob", type=parse_knob, action="append", default=[],
                   help="NAME=VALUE under [algs.owl] (dynamics, or the reward's delta/beta; "
                        "beta=0 is Owl-Loss), repeatable")
    g = t.add_argument_group("DQN (Table II)")
    g.add_argument("--steps", type=int, default=2_000_000, help="transitions to collect")
    g.add_argument("--lr", type=float, default=0.006, help="Adam learning rate")
    g.add_argument("--gamma", type=float, default=0.93, help="discount per decision")
    g.add_argument("--net", type=ints, default="512,256", help="Q-network hidden sizes")
    g.add_argument("--batch-size", type=int, default=64)
    g.add_argument("--buffer", type=int, default=500_000, help="replay buffer size")
    g.add_argument("--learning-starts", type=int, default=2_000,
                   help="transitions of uniform random actions before training")
    g.add_argument("--train-every", type=int, default=4,
                   help="new transitions per --gradient-steps updates")
    g.add_argument("--gradient-steps", type=int, default=1)
    g.add_argument("--target-update", type=int, default=2_000,
                   help="transitions between target-network updates")
    g.add_argument("--tau", type=float, default=1.0,
                   help="target update rate (1: copy the online network)")
    g.add_argument("--max-grad-norm", type=float, default=10.0)
    g.add_argument("--eps-start", type=float, default=1.0)
    g.add_argument("--eps-end", type=float, default=0.05)
    g.add_argument("--eps-fraction", type=float, default=0.1,
                   help="share of --steps over which epsilon decays")
    g.add_argument("--reward", choices=("mean", "last"), default="mean",
                   help="a transition's reward: mean eq. 7 over every report since the "
                        "action, or the last report's")
    g.add_argument("--reward-unit", choices=("best", "capacity", "interval"), default="best",
                   help="eq. 7's unit of the sending rate: the flow's best delivery rate (the "
                        "agent's own), each episode's link capacity (a trace's mean), or the "
                        "link's capacity over each report's interval; the simulator knows the "
                        "last two: a window short of the BDP then earns less")
    g.add_argument("--envs", type=int, default=4, help="bottlenecks simulated side by side")
    s = t.add_argument_group("episodes (Table II)")
    s.add_argument("--duration-s", type=floats(2), default="10,30")
    s.add_argument("--rate-mbps", type=floats(2), default="6,100", help="log-uniform")
    s.add_argument("--rtt-ms", type=floats(2), default="1,40", help="minimum RTT, uniform")
    s.add_argument("--buffer-pkts", type=floats(2), default="3,2000", help="log-uniform")
    s.add_argument("--loss", type=floats(2), default="0,0", help="random loss, uniform")
    s.add_argument("--trace-prob", type=float, default=0.25,
                   help="P(an episode runs a trace instead of a constant rate)")
    s.add_argument("--trace-scale", type=floats(2), default="1,1",
                   help="trace capacity multiplier range")
    s.add_argument("--trace-offsets", type=int, default=8,
                   help="points of a trace's period an episode may start at")
    add_trace_source(s)
    s.add_argument("--multi-prob", type=float, default=0.3,
                   help="P(several Owl flows share the bottleneck)")
    s.add_argument("--max-flows", type=int, default=4, help="most Owl flows per bottleneck")
    s.add_argument("--stagger-s", type=floats(2), default="0,2",
                   help="flows of one bottleneck start this far apart")
    s.add_argument("--netstats-prob", type=float, default=0.5,
                   help="P(the bottleneck exports PNC/PNA: [netstats]) per episode")
    s.add_argument("--netstats-period-s", type=float, default=1.0,
                   help="sampling period of the statistics")
    s.add_argument("--known-share", type=floats(2), default="0.2,1",
                   help="share of the path the statistics cover, uniform, in (0, 1]")
    return p


def check(args: argparse.Namespace) -> str | None:
    """What is wrong with the flags, or None."""
    for name in ("trace_prob", "multi_prob", "netstats_prob", "eps_start", "eps_end"):
        if not 0.0 <= getattr(args, name) <= 1.0:
            return f"--{name.replace('_', '-')}: give a probability in [0, 1]"
    if not 0.0 < args.eps_fraction <= 1.0:
        return "--eps-fraction: give a share in (0, 1]"
    if not (0.0 < args.known_share[0] <= args.known_share[1] <= 1.0):
        return "--known-share: give lo,hi with 0 < lo <= hi <= 1"
    for name, lo in (("rate_mbps", 0.0), ("buffer_pkts", 1.0), ("rtt_ms", 0.0),
                     ("duration_s", 0.0)):
        a, b = getattr(args, name)
        if not lo < a <= b:
            return f"--{name.replace('_', '-')}: give lo,hi with {lo:g} < lo <= hi"
    if args.max_flows < 1 or args.envs < 1 or args.train_every < 1 or args.target_update < 1:
        return "--max-flows, --envs, --train-every, --target-update: give positive integers"
    last = (args.max_flows - 1) * args.stagger_s[1]
    if args.max_flows > 1 and last >= args.duration_s[0]:
        return (f"--stagger-s {args.stagger_s[1]:g} with {args.max_flows} flows starts the last "
                f"at {last:g} s, not before the shortest episode ends")
    return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    problem = check(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    return train(args, argv)


if __name__ == "__main__":
    sys.exit(main())
