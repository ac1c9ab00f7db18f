"""Jury (the Jury paper §3.5, Table 2) trained with Stable-Baselines3's TD3 on the simulator.

    python -m ccp_train.jury train --out DIR [--seed 1] [--steps 300000] [flags]

One file, every hyper-parameter a flag, seeded (``ccp_train.rl.determinism``), scalars logged
per update to ``DIR/jury.train.jsonl`` and plotted as ``DIR/jury.curves.{csv,png}``; the model is
exported to ``DIR/jury.onnx`` with its card (``DIR/jury.json``) and ``DIR/jury.zip`` (SB3).

**What is trained.** Every flow of an episode is a Jury flow sharing the policy: 2-10 flows
(``--flows``) with staggered starts on one bottleneck drawn from the paper's Table 1 ranges
widened (issue 38): 20-100 Mbit/s, 0.8-1.5 BDP as in Table 1, but RTT 10-200 ms (Table 1:
10-60) and random loss 0-1 % (Table 1: 0-0.1 %), uniform, so that long and lossy paths (the
satellite case) are inside what the policy has seen. With probability ``--trace-prob``
(default 0.25, as MOCC's and Owl's; 0: the paper's constant links only) a trace replaces the
constant rate: a recording of the
trace corpus's ``train`` split (a kind drawn by ``--trace-kinds``, then a recording uniformly),
explicit ``--traces`` files instead, or with ``--synthetic-prob`` a synthetic capacity log; a
recording starts at one of ``--trace-offsets`` points of its period, scaled by
``--trace-scale`` (its mean times the scale is the link rate the episode start's BDP uses).
Observations, the post-processing
(eq. 6 with the occupancy estimate of eq. 5), exploration, the significance rule, the window
update and the reward (eq. 9) are the Rust core's (``algs/src/jury/``), run by the agent's own
flow driver inside the simulator: the policy is trained inside exactly what serves it. The
policy's action is the range ``(μ, δ)``; SB3's actor squashes each output with tanh and the
action box (``μ ∈ [−mu_bound, mu_bound]``, ``δ ∈ [min_delta, 1]``: ``[−0.5, 0.5] × [0.5, 1]``
by default) rescales it, which is the μ/δ head the paper describes. Eq. 5's share estimate is
the core's ``probe`` (a dynamics knob, in the card): by default ``trial``, each flow's own
paired ±ε trials (a deviation from §3.1, ``docs/algorithms/jury.md``).

**Episode starts.** Below capacity eq. 9 pays ``ratio_bw = 0`` whatever a flow does, and the
largest action grows the window 2.5 % per 30 ms, so from the initial window the first reward
lies beyond γ's horizon. With probability ``--start-prob`` an episode's flows begin with a window
of ``BDP/flows × U_log(--start-share)`` (``initial_cwnd_pkts``, a knob that only sets where an
episode begins, so not in the card's dynamics); the others begin as served, from the initial
window.

**Steps.** A step ends at any flow's report with a decision due (``SimEnv(pause="any")``), so
every flow decides at each of its own 30 ms reports while the others keep running, exactly as
under the agent (MOCC's trainer pauses until every flow has one, which would hold established
flows still while a newcomer's significance rule decides alone).

**Transitions.** A flow's decision at its observation ``s_t`` with range ``a_t`` becomes the
transition ``(s_t, a_t, r, s_{t'})`` at the flow's next decision ``t'`` (``r``: the core's eq. 9
reward for the interval observed at ``s_{t'}``; intervals the significance rule decided alone lie
in between). Episode ends are time limits: they bootstrap (``done = False``), and the flow's last
open decision is dropped. Flows that have not started or have no decision due give none.

**Why not ``model.learn()``.** SB3's collection loop needs a fixed number of sub-environments
and adds one transition per sub-environment per step; here the number of flows varies per
episode and a flow decides only when its core says so. So the collection (the loop below) is
ours and the learning is SB3's: its replay buffer and ``TD3.train`` (clipped double Q, delayed
policy updates, target smoothing). ``--actor-lr``/``--critic-lr`` differ as in Table 2.

**Updates** (the paper: one update per 5 s from 8 actors): after every ``--train-every`` new
transitions, ``--utd`` gradient steps per transition. ``--envs`` bottlenecks run side by side in
this process (batched inference), each with its own seeded episode stream.

**Selection.** None: the final policy is exported (a rule fixed before training). The card's
``eval`` figures come from ``python -m ccp_train.harness --card DIR/jury.json``.
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
import tomllib
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import TD3

from ccp_train import _native
from ccp_train.export import export_sb3_actor
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
from ccp_train.scenarios import ScenarioRanges, trace_mean_mbps

ALG = "jury"
#: knobs that set where an episode begins (``EPISODE_START_KNOBS`` in algs/src/jury/config.rs)
EPISODE_START = ("initial_cwnd_pkts",)
#: the simulator's packet size (datapath/sim: MSS = 1500 bytes)
PACKET_BYTES = 1500


class JuryTD3(TD3):
    """TD3 with the paper's separate actor and critic learning rates (Table 2)."""

    actor_lr: float = 5e-4
    critic_lr: float = 1e-3

    def _update_learning_rate(self, optimizers: Any) -> None:
        for group in self.actor.optimizer.param_groups:
            group["lr"] = self.actor_lr
        for group in self.critic.optimizer.param_groups:
            group["lr"] = self.critic_lr
        self.logger.record("train/actor_lr", self.actor_lr)
        self.logger.record("train/critic_lr", self.critic_lr)


class _Spaces(gym.Env):
    """Only the spaces: SB3 builds the policy and replay buffer from them; never stepped."""

    def __init__(self, spec: AlgSpec) -> None:
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (spec.obs_dim,), np.float32)
        self.action_space = gym.spaces.Box(np.asarray(spec.action_low, np.float32),
                                           np.asarray(spec.action_high, np.float32))

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        raise RuntimeError("not an environment: spaces only")

    def step(self, action: Any) -> Any:
        raise RuntimeError("not an environment: spaces only")


@dataclasses.dataclass
class Bottleneck:
    """One simulated bottleneck and the open decision of each of its flows."""

    rng: random.Random
    ranges: ScenarioRanges
    knobs: Knobs
    start_prob: float
    start_share: tuple[float, float]
    env: Any = None
    obs: np.ndarray | None = None
    active: np.ndarray | None = None
    prev_obs: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)
    prev_act: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)
    episodes: int = 0

    def new_episode(self) -> None:
        scenario = self.ranges.sample(self.rng, ALG)
        start: dict[str, Any] = {}
        if self.rng.random() < self.start_prob:
            # every flow's first window near its share of the BDP (the start's knob)
            sc = tomllib.loads(scenario)
            flows = [f for f in sc["flow"] if f["alg"] == ALG]
            bdp = link_rate_mbps(sc["link"]) * 1e6 / 8 * flows[0]["rtt_ms"] / 1e3 / PACKET_BYTES
            lo, hi = self.start_share
            share = math.exp(self.rng.uniform(math.log(lo), math.log(hi)))
            start["initial_cwnd_pkts"] = round(max(1.0, bdp / len(flows) * share), 2)
        self.env = _native.SimEnv(scenario, ALG, algs_toml=self.knobs.toml(start), pause="any")
        obs, _rew, active, _done, _t = self.env.reset()
        self.obs, self.active = obs, np.asarray(active, bool)
        self.prev_obs.clear()
        self.prev_act.clear()
        self.episodes += 1


def link_rate_mbps(link: dict[str, Any]) -> float:
    """A scenario link's rate: its constant rate, or a trace's mean times its scale."""
    if "trace" in link:
        return trace_mean_mbps(str(link["trace"])) * float(link.get("trace_scale", 1.0))
    return float(link["rate_mbps"])


def ranges_from_args(args: argparse.Namespace, out: Path) -> ScenarioRanges:
    """Table 1's ranges of the ``train`` flags, traces included (rotated and synthetic ones
    under ``out/traces``); raises ``SystemExit`` with the reason for a bad flag."""
    if len(args.flows) != 2 or args.flows[0] > args.flows[1]:
        raise SystemExit("--flows: give lo,hi (e.g. 2,10)")
    last_start = (args.flows[1] - 1) * args.stagger_s[1]
    if last_start >= args.duration_s[0]:
        raise SystemExit(f"--stagger-s {args.stagger_s[1]:g} with {args.flows[1]} flows starts "
                         f"the last at {last_start:g} s, after the shortest episode ends")
    check_trace_ranges(args)
    source = trace_source_from_args(args)
    has = bool(source["traces"]) or source["corpus"] is not None or source["synthetic_prob"] > 0
    return ScenarioRanges(
        duration_s=args.duration_s, rate_mbps=args.rate_mbps, rtt_ms=args.rtt_ms,
        buffer_bdp=args.buffer_bdp, loss=args.loss, learners=args.flows,
        stagger_s=args.stagger_s, trace_prob=args.trace_prob if has else 0.0,
        trace_scale=args.trace_scale, trace_offsets=args.trace_offsets,
        trace_cache=str(out / "traces"), **source)


def scaled_to_box(a: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """SB3's ``unscale_action``: [-1, 1] -> the action box."""
    return low + 0.5 * (a + 1.0) * (high - low)


def train(args: argparse.Namespace, argv: list[str]) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    determinism.seed_everything(args.seed, args.threads)
    spec = AlgSpec.of(ALG)
    # the knobs outside the dynamics are the reward's (eq. 9), settable for a run, and the
    # episode start's, which the trainer draws
    defaults = dict(_native.defaults(ALG))
    reward_names = set(defaults) - set(_native.dynamics(ALG)) - set(EPISODE_START)
    knobs = Knobs(ALG, args.knob, settable=reward_names)
    try:
        ranges = ranges_from_args(args, out)
    except SystemExit as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    command = "python -m ccp_train.jury " + shlex.join(argv)
    log = Logger(Path(args.log) if args.log else out / f"{ALG}.train.jsonl")
    log.log({"kind": "setup", "command": command, "spec": dataclasses.asdict(spec),
             "dynamics": knobs.dynamics(), "ranges": ranges.describe()})

    JuryTD3.actor_lr, JuryTD3.critic_lr = args.actor_lr, args.critic_lr
    net = list(args.net)
    model = JuryTD3(
        "MlpPolicy", _Spaces(spec), learning_rate=args.actor_lr, buffer_size=args.buffer,
        learning_starts=0, batch_size=args.batch_size, tau=args.tau, gamma=args.gamma,
        policy_delay=args.policy_delay, target_policy_noise=args.target_noise,
        target_noise_clip=args.target_noise_clip, seed=args.seed, device="cpu",
        policy_kwargs={"net_arch": {"pi": net, "qf": net}})
    if args.init:
        model.set_parameters(str(args.init), exact_match=True, device="cpu")
    model.set_logger(sb3_quiet_logger())
    model._current_progress_remaining = 1.0
    low = np.asarray(spec.action_low, np.float32)
    high = np.asarray(spec.action_high, np.float32)
    noise_rng = np.random.default_rng(args.seed)
    knobs_toml = knobs.toml()
    envs = [Bottleneck(random.Random(args.seed * 1000 + e), ranges, knobs, args.start_prob,
                       args.start_share) for e in range(args.envs)]
    for b in envs:
        b.new_episode()

    steps = since_update = updates = 0
    window: dict[str, list[float]] = {"reward": [], "mu": [], "delta": []}
    t0 = time.monotonic()
    iteration = 0
    while steps < args.steps:
        rows = [(b, i) for b in envs for i in np.flatnonzero(b.active)]
        if rows:
            obs = np.stack([b.obs[i] for b, i in rows]).astype(np.float32)
            if steps < args.learning_starts and args.init is None:
                scaled = noise_rng.uniform(-1.0, 1.0, (len(rows), spec.act_dim))
            else:
                with torch.no_grad():
                    scaled = model.actor(torch.as_tensor(obs)).numpy()
                scaled = scaled + noise_rng.normal(0.0, args.action_noise, scaled.shape)
            scaled = np.clip(scaled, -1.0, 1.0).astype(np.float32)
            for k, (b, i) in enumerate(rows):
                b.prev_obs[i], b.prev_act[i] = obs[k], scaled[k]
        for b in envs:
            acts = np.zeros((b.env.num_learners, spec.act_dim), np.float32)
            for i, a in b.prev_act.items():
                acts[i] = scaled_to_box(a, low, high)
            nobs, rew, active, done, _t = b.env.step(acts)
            active = np.asarray(active, bool)
            for i in np.flatnonzero(active):
                if i in b.prev_obs:
                    model.replay_buffer.add(b.prev_obs[i][None], nobs[i][None],
                                            b.prev_act[i][None], np.array([rew[i]]),
                                            np.array([False]), [{}])
                    steps += 1
                    since_update += 1
                    window["reward"].append(float(rew[i]))
                    box = scaled_to_box(b.prev_act[i], low, high)
                    window["mu"].append(float(box[0]))
                    window["delta"].append(float(box[1]))
                    # the decision is closed; the flow's next one opens at this observation
                    del b.prev_obs[i], b.prev_act[i]
            b.obs, b.active = nobs, active
            if done:
                b.new_episode()
        if since_update >= args.train_every and steps >= args.learning_starts:
            grad = max(1, int(round(since_update * args.utd)))
            model.train(gradient_steps=grad, batch_size=args.batch_size)
            updates += grad
            since_update = 0
            iteration += 1
            vals = model.logger.name_to_value
            rec = {"kind": "iteration", "phase": "td3", "iteration": iteration,
                   "steps_total": steps, "updates": updates,
                   "episodes": sum(b.episodes for b in envs),
                   "reward": float(np.mean(window["reward"])) if window["reward"] else None,
                   "mu": float(np.mean(window["mu"])) if window["mu"] else None,
                   "delta": float(np.mean(window["delta"])) if window["delta"] else None,
                   "actor_loss": vals.get("train/actor_loss"),
                   "critic_loss": vals.get("train/critic_loss"),
                   "wall_s": round(time.monotonic() - t0, 1)}
            if iteration % args.log_every == 0:
                log.log(rec)
            else:
                log.file.write(json.dumps(rec) + "\n")
            window = {k: [] for k in window}
    wall = time.monotonic() - t0
    model.save(out / f"{ALG}.zip")
    reward_knobs = {k: knobs.overrides.get(k, defaults[k]) for k in reward_names}
    training = {
        "command": command, "seed": args.seed, "steps": steps,
        "scenario_ranges": {**ranges.describe(), "flows": list(args.flows),
                            "episode_start": {"prob": args.start_prob,
                                              "initial_cwnd_share_of_bdp_per_flow":
                                                  list(args.start_share)}},
        "notes": (f"TD3 (SB3) actor/critic {net}, actor lr {args.actor_lr:g}, critic lr "
                  f"{args.critic_lr:g}, gamma {args.gamma:g}, batch {args.batch_size}, "
                  f"{updates} gradient steps, {sum(b.episodes for b in envs)} episodes on "
                  f"{args.envs} bottlenecks; reward eq. 9 with "
                  + ", ".join(f"{k} = {v:g}" if isinstance(v, float) else f"{k} = {v}"
                              for k, v in sorted(reward_knobs.items()))
                  + "; the final policy is exported (no selection)"),
        "wall_s": round(wall, 1),
        "determinism": determinism.record(args.threads),
    }
    onnx_path, card_path = export_sb3_actor(
        model, out / f"{ALG}.onnx", algorithm=ALG, feature_version=spec.feature_version,
        training=training, algs_toml=knobs_toml)
    log.log({"kind": "done", "steps": steps, "updates": updates, "wall_s": round(wall, 1),
             "onnx": str(onnx_path), "card": str(card_path)})
    log.close()
    curves.export(log.path, out, ALG, Path(args.init) if args.init else None)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ccp_train.jury", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="train with TD3 and export DIR/jury.onnx + card")
    t.add_argument("--out", required=True, help="output folder")
    t.add_argument("--seed", type=int, default=1, help="seeds torch, numpy, episodes, noise")
    t.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    t.add_argument("--log", default=None, help="JSON-lines log (default OUT/jury.train.jsonl)")
    t.add_argument("--log-every", type=int, default=10, help="print every N updates")
    t.add_argument("--init", type=Path, default=None, help="start from this SB3 jury.zip")
    t.add_argument("--knob", type=parse_knob, action="append", default=[],
                   help="NAME=VALUE under [algs.jury] (dynamics or reward), repeatable")
    g = t.add_argument_group("TD3 (Table 2)")
    g.add_argument("--steps", type=int, default=300_000, help="transitions to collect")
    g.add_argument("--learning-starts", type=int, default=5_000,
                   help="transitions of uniform random ranges before the actor acts")
    g.add_argument("--actor-lr", type=float, default=5e-4)
    g.add_argument("--critic-lr", type=float, default=1e-3)
    g.add_argument("--gamma", type=float, default=0.98)
    g.add_argument("--batch-size", type=int, default=64)
    g.add_argument("--net", type=ints, default="128,128", help="actor and critic hidden sizes")
    g.add_argument("--tau", type=float, default=0.005, help="target network update rate")
    g.add_argument("--policy-delay", type=int, default=2)
    g.add_argument("--target-noise", type=float, default=0.2)
    g.add_argument("--target-noise-clip", type=float, default=0.5)
    g.add_argument("--action-noise", type=float, default=0.1,
                   help="Gaussian exploration noise (std, in the actor's [-1, 1] units)")
    g.add_argument("--buffer", type=int, default=1_000_000, help="replay buffer size")
    g.add_argument("--train-every", type=int, default=1_000,
                   help="new transitions between updates")
    g.add_argument("--utd", type=float, default=0.5, help="gradient steps per new transition")
    g.add_argument("--envs", type=int, default=4, help="bottlenecks simulated side by side")
    s = t.add_argument_group("episodes (Table 1)")
    s.add_argument("--flows", type=ints, default="2,10", help="Jury flows per bottleneck: lo,hi")
    s.add_argument("--duration-s", type=floats(2), default="20,30")
    s.add_argument("--rate-mbps", type=floats(2), default="20,100")
    s.add_argument("--rtt-ms", type=floats(2), default="10,200",
                   help="base RTT, uniform (Table 1: 10,60; widened, issue 38)")
    s.add_argument("--buffer-bdp", type=floats(2), default="0.8,1.5")
    s.add_argument("--loss", type=floats(2), default="0,0.01",
                   help="random loss, uniform (Table 1: 0,0.001; widened, issue 38)")
    s.add_argument("--stagger-s", type=floats(2), default="0,2",
                   help="flows of one bottleneck start this far apart")
    s.add_argument("--trace-prob", type=float, default=0.25,
                   help="P(an episode runs a recording of the corpus's train split (or "
                        "--traces) instead of a constant rate; 0: Table 1's constant links)")
    s.add_argument("--trace-scale", type=floats(2), default="1,1",
                   help="trace capacity multiplier range")
    s.add_argument("--trace-offsets", type=int, default=8,
                   help="points of a trace's period an episode may start at")
    add_trace_source(s)
    s.add_argument("--start-prob", type=float, default=0.8,
                   help="P(an episode's flows start near their share instead of the initial "
                        "window)")
    s.add_argument("--start-share", type=floats(2), default="0.25,2",
                   help="first window as a multiple of BDP/flows, drawn log-uniformly")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    if len(args.flows) != 2 or args.flows[0] > args.flows[1]:
        print("error: --flows: give lo,hi (e.g. 2,10)", file=sys.stderr)
        return 2
    return train(args, argv)


if __name__ == "__main__":
    sys.exit(main())
