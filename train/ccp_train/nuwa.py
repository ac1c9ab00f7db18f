"""Nuwa-RL (the Nuwa-RL paper §III-IV) trained with sb3-contrib's RecurrentPPO on the simulator.

    python -m ccp_train.nuwa train --out DIR [--seed 1] [--steps 400000] [flags]
    python -m ccp_train.nuwa hold --out DIR [--knob NAME=VALUE]   # the bare law as a model

One file, every hyper-parameter a flag, seeded (``ccp_train.rl.determinism``), one JSON line
of scalars per PPO iteration in ``DIR/nuwa.train.jsonl`` plotted as ``DIR/nuwa.curves.{csv,png}``;
the actor is exported to ``DIR/nuwa.onnx`` (inputs ``obs``, ``h_in``, ``c_in``; outputs
``action``: the 5 logits, ``h_out``, ``c_out``) with its card (``DIR/nuwa.json``, ``output_kind``
``"q_values"``, ``n_actions`` 5, ``recurrent`` an LSTM of the core's ``lstm_hidden``) and
``DIR/nuwa.zip`` (sb3-contrib).

**What is trained.** The per-ACK law (in the fold program), the features, the five
multiplicative actions on the gain ``k`` and eq. 10's reward are the Rust core's
(``algs/src/nuwa/``), run by the agent's own flow driver inside the simulator
(``_native.SimEnv``): the same code serves the model. A step ends at the flow's next
decision, when its core asks for one (once per report, not in slow start, not on a report
without ACKs or RTT), as under ``ccp-agent``; between decisions the flow holds ``k``.
Reward knobs (eq. 10's gamma, theta, phi, alpha) are the core's defaults (0.4, 0.4, 0.2, 0.6),
``--knob reward_delay=0.5`` etc. overrides one for a run; they are not the dynamics (the card's
notes record them). Two decided deviations from eq. 10 (issue 39) are the defaults: the
throughput ``x`` in units of what the bottleneck offered over each report (``--reward-unit
capacity``; ``mbps`` is eq. 10 as printed, ``reward_rate_unit_mbps``), and the delay term
charging only the queue beyond ``T_d`` (``reward_delay_over_target``, on unless ``--knob
reward_delay_over_target=false``).

**Environment.** ``ccp_train.envs.CcpEnv`` (``ccp/Nuwa-v0``: ``Discrete(5)`` over the 5
features), one Nuwa flow per episode, ``--envs`` of them side by side (SB3's ``DummyVecEnv``),
and beside them, for each count of ``--multi-flows`` (2 and 4), a bottleneck shared by that
many Nuwa flows started ``--multi-stagger-s`` apart (``CcpVecEnv``: one sub-environment and
LSTM state per flow, one decision per flow per step), the paper's fairness and what a
deployed receiver meets.
An episode is ``--episode-steps`` decisions (the paper's 800; a truncation, bootstrapped) or
the scenario's end, whichever comes first; the simulator runs only as far as the decisions
need, so ``--duration-s`` is an upper bound. A step's reward is the mean of eq. 10 over every
report since the action (``--reward mean``; ``last``: the decision report's alone).

**Episodes.** A constant link (rate log-uniform in ``--rate-mbps``) or, with probability
``--trace-prob``, a trace: a recording of the trace corpus's ``train`` split (a kind drawn by
``--trace-kinds``, then a recording uniformly; ``tune`` and ``eval`` stay unseen), explicit
``--traces`` files instead, or with ``--synthetic-prob`` a synthetic capacity log; a recording
starts at one of ``--trace-offsets`` points of its period; scaled by ``--trace-scale``;
minimum RTT uniform in ``--rtt-ms``, a drop-tail buffer log-uniform in ``--buffer-bdp`` BDPs,
random loss uniform in ``--loss``. The target delay
``T_d`` is drawn per episode, log-uniformly from ``--target-delay-ms`` (``target_delay_ms`` is not
in the dynamics: every delay the policy sees is in units of ``T_d``, so one model serves any
target).

**Policy.** ``MlpLstmPolicy``: features -> LSTM(``lstm_hidden``, from the core's spec) -> ``--net``
tanh layers -> 5 logits (actor); the critic has its own LSTM and layers (sb3-contrib's
default). The agent's runtime carries ``h``/``c`` per flow, zero at the flow's start (an
episode start here), and takes the argmax of the logits: the deterministic policy.

**Selection.** None: the final policy is exported. Comparing runs or knobs uses the harness's
tune split only (``--harness-suites``, ``ccp_train.rl.evaluate.harness_tune``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecNormalize

from ccp_train import _native
from ccp_train import card as card_mod
from ccp_train.envs import CcpEnv, CcpVecEnv, ConcatVecEnv
from ccp_train.export import export_sb3_actor, export_torch
from ccp_train.rl import curves, determinism
from ccp_train.rl.evaluate import agent_config, harness_tune
from ccp_train.rl.flags import (
    add_trace_source,
    check_trace_ranges,
    floats,
    ints,
    trace_source_from_args,
)
from ccp_train.rl.log import Logger, sb3_quiet_logger
from ccp_train.rl.spec import AlgSpec, Knobs, parse_knob
from ccp_train.scenarios import Episodes, EpisodeStart, ScenarioRanges

ALG = "nuwa"
#: knobs outside the dynamics a run may not set: the model's shape (the spec's) and the target,
#: drawn per episode (``--target-delay-ms``)
NOT_SETTABLE = ("lstm_hidden", "target_delay_ms")
#: the episode-start knob drawn per episode
TARGET = "target_delay_ms"
#: the action index of x1 (the core's ``HOLD_ACTION``, which the bindings do not carry)
HOLD = 1
#: the reward knob that charges only the queue beyond ``T_d`` (on unless a run sets it)
OVER_TARGET = "reward_delay_over_target"


# --- knobs, episodes, environments ------------------------------------------------------------


def make_knobs(pairs: list[tuple[str, Any]]) -> Knobs:
    """The agent's defaults with the ``--knob`` overrides: any dynamics knob, or eq. 10's reward
    knobs (the knobs outside the dynamics but those of :data:`NOT_SETTABLE`)."""
    defaults = dict(_native.defaults(ALG))
    reward = set(defaults) - set(_native.dynamics(ALG)) - set(NOT_SETTABLE)
    for k, _ in pairs:
        if k in NOT_SETTABLE:
            why = {"lstm_hidden": "the model's shape is the core's spec",
                   "target_delay_ms": "it is drawn per episode: --target-delay-ms"}[k]
            raise ValueError(f"--knob {k}: not settable for a run ({why})")
    if all(k != OVER_TARGET for k, _ in pairs):
        # the delay term charges only the queue beyond T_d: issue 39's decided deviation
        # (``--knob reward_delay_over_target=false`` is eq. 10 as printed)
        pairs = [(OVER_TARGET, True), *pairs]
    return Knobs(ALG, pairs, settable=reward)


def reward_knobs(knobs: Knobs) -> dict[str, Any]:
    """Eq. 10's knobs as the run used them (the defaults but where ``--knob`` set one)."""
    names = set(knobs.defaults) - set(knobs.dynamics()) - set(NOT_SETTABLE)
    return {k: knobs.overrides.get(k, knobs.defaults[k]) for k in sorted(names)}


def episodes_from_args(args: argparse.Namespace, knobs: Knobs, out: Path) -> Episodes:
    """The episodes of the ``train`` flags (rotated and synthetic traces under
    ``out/traces``); raises ``SystemExit`` with the reason for a bad trace flag."""
    check_trace_ranges(args)
    source = trace_source_from_args(args)
    has = bool(source["traces"]) or source["corpus"] is not None or source["synthetic_prob"] > 0
    ranges = ScenarioRanges(
        duration_s=args.duration_s, rate_mbps=args.rate_mbps, rate_dist="log-uniform",
        rtt_ms=args.rtt_ms, buffer_bdp=args.buffer_bdp, buffer_dist="log-uniform",
        loss=args.loss, trace_prob=args.trace_prob if has else 0.0,
        trace_scale=args.trace_scale, trace_offsets=args.trace_offsets,
        trace_cache=str(out / "traces"), **source)
    start = EpisodeStart(1.0, {}, {TARGET: tuple(args.target_delay_ms)})
    return Episodes(ALG, ranges, knobs.toml(), start)


def make_env(episodes: Episodes, seed: int, args: argparse.Namespace) -> CcpEnv:
    """One Nuwa flow per episode, ``--episode-steps`` decisions at most (``ccp/Nuwa-v0``)."""
    return CcpEnv(ALG, episodes.ranges, seed=seed, algs_toml=episodes.algs_for,
                  max_steps=args.episode_steps, reward=args.reward,
                  reward_in_capacity=args.reward_unit == "capacity")


def make_shared(episodes: Episodes, n: int, seed: int, args: argparse.Namespace) -> CcpVecEnv:
    """``n`` Nuwa flows on one bottleneck, one sub-environment each (their own LSTM state),
    started ``--multi-stagger-s`` apart, every RTT drawn on its own: one decision per flow per
    step (``pause = "all"``: a flow that reports twice before the others decide holds its
    gain in between), ``--episode-steps`` steps at most."""
    ranges = dataclasses.replace(episodes.ranges, learners=(n, n),
                                 stagger_s=tuple(args.multi_stagger_s), same_rtt=False)
    return CcpVecEnv(ALG, ranges, seed=seed, algs_toml=episodes.algs_for,
                     max_steps=args.episode_steps, reward=args.reward,
                     reward_in_capacity=args.reward_unit == "capacity")


def make_venv(episodes: Episodes, args: argparse.Namespace) -> VecEnv:
    """``--envs`` single-flow environments side by side, seeded ``--seed`` + i, then one
    bottleneck shared by n Nuwa flows for each n of ``--multi-flows`` (seeded ``--seed`` + 100
    + j); with ``--norm-reward`` the rewards PPO learns from are divided by a running deviation
    of the discounted return (SB3's ``VecNormalize``, observations untouched: the policy sees
    what the agent feeds it)."""
    venv: VecEnv = DummyVecEnv([lambda i=i: make_env(episodes, args.seed + i, args)
                                for i in range(args.envs)])
    if args.multi_flows:
        venv = ConcatVecEnv([venv, *(make_shared(episodes, n, args.seed + 100 + j, args)
                                     for j, n in enumerate(args.multi_flows))])
    if args.norm_reward:
        venv = VecNormalize(venv, norm_obs=False, norm_reward=True, gamma=args.gamma,
                            clip_reward=args.clip_reward)
    return venv


def make_model(env: Any, spec: AlgSpec, args: argparse.Namespace) -> RecurrentPPO:
    """RecurrentPPO with an LSTM of the core's ``lstm_hidden`` and the run's hyper-parameters."""
    assert spec.recurrent_hidden is not None
    model = RecurrentPPO(
        "MlpLstmPolicy", env, learning_rate=args.lr, n_steps=args.n_steps,
        batch_size=args.batch_size, n_epochs=args.n_epochs, gamma=args.gamma,
        gae_lambda=args.gae_lambda, clip_range=args.clip_range, ent_coef=args.ent_coef,
        vf_coef=args.vf_coef, max_grad_norm=args.max_grad_norm,
        target_kl=args.target_kl if args.target_kl > 0 else None, seed=args.seed,
        device="cpu",
        policy_kwargs={"lstm_hidden_size": int(spec.recurrent_hidden), "n_lstm_layers": 1,
                       "net_arch": {"pi": list(args.net), "vf": list(args.net)}})
    if args.hold_prior:
        # the x1 action's logit starts this much above the others (the network's own init
        # gives near-equal logits): the deterministic policy holds k until PPO learns otherwise
        with torch.no_grad():
            model.policy.action_net.bias[HOLD] += args.hold_prior
    model.set_logger(sb3_quiet_logger())
    return model


# --- scalars -----------------------------------------------------------------------------------


class Scalars(BaseCallback):
    """One ``kind: iteration`` record per rollout + update: the rollout's mean reward, the
    actions' shares, the mean gain ``k`` and ``D_c / T_d`` at the decisions (from the features),
    and the update's losses (SB3's ``train/*``, read after the update)."""

    def __init__(self, log: Logger, args: argparse.Namespace, dynamics: dict[str, Any]) -> None:
        super().__init__()
        self.log_ = log
        self.args = args
        self.k_min, self.k_max = float(dynamics["k_min"]), float(dynamics["k_max"])
        spec = AlgSpec.of(ALG)
        self.gain_at, self.space_at = spec.slice("gain").start, spec.slice("space").start
        self.iteration = self.rollouts = 0
        self.episodes = 0
        self.t0 = time.monotonic()
        self._clear()

    def _clear(self) -> None:
        self.rewards: list[float] = []
        self.actions = np.zeros(5, np.int64)
        self.gain: list[float] = []
        self.space: list[float] = []
        self.ended = 0

    def _on_step(self) -> bool:
        loc = self.locals
        env = self.training_env
        raw = env.get_original_reward() if isinstance(env, VecNormalize) else loc["rewards"]
        self.rewards.extend(float(r) for r in raw)
        self.actions += np.bincount(np.asarray(loc["actions"]).reshape(-1).astype(int),
                                    minlength=5)[:5]
        obs = np.asarray(loc["new_obs"])
        self.gain.extend(obs[:, self.gain_at].tolist())
        self.space.extend(obs[:, self.space_at].tolist())
        self.ended += int(np.sum(loc["dones"]))
        return True

    def _on_rollout_end(self) -> None:
        self.rollouts += 1

    # the update follows the rollout: its scalars are there when the next rollout starts
    def _on_rollout_start(self) -> None:
        if self.rollouts > self.iteration:
            self._emit()

    def _on_training_end(self) -> None:
        if self.rollouts > self.iteration:
            self._emit()

    def _emit(self) -> None:
        vals = self.model.logger.name_to_value
        wall = time.monotonic() - self.t0
        self.episodes += self.ended
        n = max(1, int(self.actions.sum()))
        span = math.log(self.k_max / self.k_min)
        ks = [self.k_min * math.exp(g * span) for g in self.gain]
        rec = {"kind": "iteration", "phase": "rppo", "iteration": self.iteration + 1,
               "steps_total": int(self.num_timesteps),
               "reward": float(np.mean(self.rewards)) if self.rewards else None,
               "pg_loss": _num(vals.get("train/policy_gradient_loss")),
               "v_loss": _num(vals.get("train/value_loss")),
               "entropy": _num(-vals["train/entropy_loss"]) if "train/entropy_loss" in vals
               else None,
               "approx_kl": _num(vals.get("train/approx_kl")),
               "clipfrac": _num(vals.get("train/clip_fraction")),
               "k_mean": float(np.exp(np.mean(np.log(ks)))) if ks else None,
               "dc_over_td": float(1.0 - np.mean(self.space)) if self.space else None,
               "action_share": [round(float(a) / n, 4) for a in self.actions],
               "episodes": self.episodes,
               "sps": round(self.num_timesteps / wall, 1) if wall > 0 else None,
               "wall_s": round(wall, 1)}
        self.iteration += 1
        if self.iteration % self.args.log_every == 0:
            self.log_.log(rec)
        else:
            self.log_.file.write(json.dumps(rec) + "\n")
            self.log_.file.flush()
        self._clear()


def _num(v: Any) -> float | None:
    return None if v is None else float(v)


# --- training --------------------------------------------------------------------------------


def train(args: argparse.Namespace, argv: list[str]) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    determinism.seed_everything(args.seed, args.threads)
    spec = AlgSpec.of(ALG)
    assert spec.n_actions == 5 and not spec.masked and spec.recurrent_hidden
    knobs = make_knobs(args.knob)
    episodes = episodes_from_args(args, knobs, out)
    command = "python -m ccp_train.nuwa " + shlex.join(argv)
    log = Logger(Path(args.log) if args.log else out / f"{ALG}.train.jsonl")
    ranges = {**episodes.ranges.describe(), "target_delay_ms": list(args.target_delay_ms),
              "target_dist": "log-uniform, per episode", "episode_steps": args.episode_steps,
              "envs": args.envs, "multi_flows": list(args.multi_flows),
              "multi_stagger_s": list(args.multi_stagger_s), "reward_unit": args.reward_unit}
    log.log({"kind": "setup", "command": command, "spec": dataclasses.asdict(spec),
             "dynamics": knobs.dynamics(), "reward": reward_knobs(knobs), "ranges": ranges})

    venv = make_venv(episodes, args)
    model = make_model(venv, spec, args)
    if args.init:
        model.set_parameters(str(args.init), exact_match=True, device="cpu")
    scalars = Scalars(log, args, knobs.dynamics())
    t0 = time.monotonic()
    model.learn(total_timesteps=args.steps, callback=scalars, log_interval=None)
    wall = time.monotonic() - t0
    model.save(out / f"{ALG}.zip")
    rk = reward_knobs(knobs)
    per = ("the mean over every report since the action" if args.reward == "mean"
           else "the decision report's")
    training = {
        "command": command, "seed": args.seed, "steps": int(model.num_timesteps),
        "scenario_ranges": ranges,
        "notes": (f"RecurrentPPO (sb3-contrib), MlpLstmPolicy: LSTM {spec.recurrent_hidden} "
                  f"then {list(args.net)} tanh (actor and critic each their own); lr {args.lr:g}, "
                  f"gamma {args.gamma:g}, GAE {args.gae_lambda:g}, clip {args.clip_range:g}, "
                  f"entropy {args.ent_coef:g}, {args.n_epochs} epochs of {args.batch_size} per "
                  f"rollout of {args.envs + sum(args.multi_flows)} x {args.n_steps} decisions "
                  f"({args.envs} single-flow episodes, shared bottlenecks of "
                  f"{list(args.multi_flows)} flows); {scalars.episodes} "
                  f"episodes of at most {args.episode_steps} decisions; reward eq. 10 with "
                  + ("x in units of the bottleneck's capacity over each report (issue 39's "
                     "deviation), " if args.reward_unit == "capacity" else "x in Mbit/s, ")
                  + ", ".join(f"{k} = {v}" for k, v in rk.items())
                  + f", per step {per}"
                  + (f", scaled for PPO by a running deviation of the discounted return "
                     f"(VecNormalize, clip {args.clip_reward:g})" if args.norm_reward else "")
                  + f"; T_d drawn per episode from {list(args.target_delay_ms)} ms; the final "
                  "policy is exported (no selection)"),
        "wall_s": round(wall, 1),
        "determinism": determinism.record(args.threads),
    }
    its = curves.iterations(log.path)
    tail = [r["reward"] for r in its[-max(1, len(its) // 10):] if r.get("reward") is not None]
    evaluation = {"train_reward_last_tenth": float(np.mean(tail)) if tail else None}
    onnx_path, card_path = export(model, out, spec, training, evaluation, knobs)
    summary: dict[str, Any] = {
        "kind": "done", "steps": int(model.num_timesteps), "episodes": scalars.episodes,
        "iterations": scalars.iteration, "wall_s": round(wall, 1),
        "steps_per_s": round(model.num_timesteps / wall, 1) if wall > 0 else None,
        "onnx": str(onnx_path), "card": str(card_path)}
    if args.harness_suites:  # selection figures: tune split only (never recorded as eval)
        summary["harness_tune"] = harness_tune(out, out / "harness-tune",
                                               suites=args.harness_suites.split(","),
                                               seeds=args.harness_seeds,
                                               agent=args.harness_agent)
    log.log(summary)
    log.close()
    curves.export(log.path, out, ALG, Path(args.init) if args.init else None)
    return 0


def export(model: RecurrentPPO, out: Path, spec: AlgSpec, training: dict,
           evaluation: dict, knobs: Knobs) -> tuple[Path, Path]:
    """The actor as ONNX (``obs``, ``h_in``, ``c_in`` -> ``action`` (5 logits), ``h_out``,
    ``c_out``; dynamic batch) and its card (``q_values``, ``n_actions`` 5, the LSTM, the run's
    dynamics)."""
    onnx_path, card_path = export_sb3_actor(
        model, out / f"{ALG}.onnx", algorithm=ALG, feature_version=spec.feature_version,
        training=training, evaluation=evaluation, algs_toml=knobs.toml())
    card = card_mod.read_card(card_path)
    assert card["output_kind"] == "q_values" and card["n_actions"] == spec.n_actions
    assert card["recurrent"]["hidden_size"] == spec.recurrent_hidden
    return onnx_path, card_path


# --- command line ----------------------------------------------------------------------------


def flow_counts(text: str) -> tuple[int, ...]:
    """``--multi-flows``: flow counts of 2 or more, comma-separated, or '' for none."""
    try:
        v = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        v = (0,)
    if any(n < 2 or n > 16 for n in v):
        raise argparse.ArgumentTypeError(
            f"expected flow counts from 2 to 16, comma-separated, or '' for none: {text!r}")
    return v


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ccp_train.nuwa", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="train with RecurrentPPO and export DIR/nuwa.onnx + card",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    t.add_argument("--out", required=True, help="output folder")
    t.add_argument("--seed", type=int, default=1, help="seeds torch, numpy, episodes, sampling")
    t.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    t.add_argument("--log", default=None, help="JSON-lines log (default OUT/nuwa.train.jsonl)")
    t.add_argument("--log-every", type=int, default=1, help="print every N iterations")
    t.add_argument("--init", type=Path, default=None, help="start from this nuwa.zip's weights")
    t.add_argument("--knob", type=parse_knob, action="append", default=[], metavar="NAME=VALUE",
                   help="under [algs.nuwa]: a dynamics knob (recorded in the card; the agent "
                        "must run the same), or eq. 10's reward_throughput, reward_delay, "
                        "reward_loss, alpha; repeatable")
    g = t.add_argument_group("RecurrentPPO (sb3-contrib defaults where the paper is silent)")
    g.add_argument("--steps", type=int, default=400_000, help="decisions to collect, all envs")
    g.add_argument("--envs", type=int, default=6,
                   help="single-flow episodes simulated side by side")
    g.add_argument("--n-steps", type=int, default=128, help="decisions per env per rollout")
    g.add_argument("--batch-size", type=int, default=256, help="minibatch (decisions)")
    g.add_argument("--n-epochs", type=int, default=4, help="epochs per rollout")
    g.add_argument("--lr", type=float, default=3e-4, help="Adam learning rate")
    g.add_argument("--gamma", type=float, default=0.99, help="discount per decision")
    g.add_argument("--gae-lambda", type=float, default=0.95)
    g.add_argument("--clip-range", type=float, default=0.2)
    g.add_argument("--ent-coef", type=float, default=0.01, help="entropy bonus")
    g.add_argument("--hold-prior", type=float, default=0.0,
                   help="added to the x1 action's logit bias at initialization (0: sb3's init; "
                        "§IV-B: action 1 keeps the behaviour at the operating point)")
    g.add_argument("--vf-coef", type=float, default=0.5)
    g.add_argument("--max-grad-norm", type=float, default=0.5)
    g.add_argument("--target-kl", type=float, default=0.0, help="stop epochs above (0: off)")
    g.add_argument("--net", type=ints, default="64,64",
                   help="tanh layers after the LSTM, actor and critic each")
    g.add_argument("--episode-steps", type=int, default=800,
                   help="decisions per episode at most (the paper's 800)")
    g.add_argument("--norm-reward", action=argparse.BooleanOptionalAction, default=True,
                   help="scale the rewards PPO learns from by a running deviation of the "
                        "discounted return (the value loss would drown the policy's gradient "
                        "under the joint clip: eq. 10 sits near -0.6 per decision)")
    g.add_argument("--clip-reward", type=float, default=10.0, help="after that scaling")
    g.add_argument("--reward-unit", choices=("capacity", "mbps"), default="capacity",
                   help="eq. 10's throughput x: the flow's share of what the bottleneck offered "
                        "over each report (issue 39's deviation) or, as printed, Mbit/s "
                        "(reward_rate_unit_mbps)")
    g.add_argument("--reward", choices=("mean", "last"), default="mean",
                   help="a step's reward: eq. 10's mean over every report since the action, or "
                        "the decision report's")
    s = t.add_argument_group("episodes")
    s.add_argument("--duration-s", type=floats(2), default="200,200",
                   help="scenario length, an upper bound (episodes end at --episode-steps)")
    s.add_argument("--rate-mbps", type=floats(2), default="2,100", help="log-uniform")
    s.add_argument("--rtt-ms", type=floats(2), default="10,150", help="minimum RTT, uniform")
    s.add_argument("--buffer-bdp", type=floats(2), default="0.5,4",
                   help="drop-tail buffer in BDPs, log-uniform")
    s.add_argument("--loss", type=floats(2), default="0,0.01", help="random loss, uniform")
    s.add_argument("--trace-prob", type=float, default=0.5,
                   help="P(an episode runs a trace instead of a constant link)")
    s.add_argument("--trace-scale", type=floats(2), default="0.5,2",
                   help="trace capacity multiplier, uniform")
    s.add_argument("--trace-offsets", type=int, default=8,
                   help="points of a trace's period an episode may start at")
    add_trace_source(s)
    s.add_argument("--multi-flows", type=flow_counts, default="2,4",
                   help="besides --envs, one bottleneck shared by this many Nuwa flows for each "
                        "entry (the paper's fairness; '' for none)")
    s.add_argument("--multi-stagger-s", type=floats(2), default="0,2",
                   help="on a shared bottleneck, the flows start this many seconds apart")
    s.add_argument("--target-delay-ms", type=floats(2), default="10,40",
                   help="T_d per episode, log-uniform")
    h = t.add_argument_group("harness (tune split only: selection figures)")
    h.add_argument("--harness-suites", default="",
                   help="after training, score the model on these suites' tune scenarios")
    h.add_argument("--harness-seeds", type=int, default=1, help="harness seeds per scenario")
    h.add_argument("--harness-agent", default=None, help="ccp-agent binary for the harness")
    b = sub.add_parser("hold", help="export the bare law (always x1: k stays k_init) as a model, "
                       "a baseline for the harness")
    b.add_argument("--out", required=True, help="output folder")
    b.add_argument("--knob", type=parse_knob, action="append", default=[], metavar="NAME=VALUE",
                   help="a dynamics knob under [algs.nuwa] (the card records it), repeatable")
    return p


class Hold(torch.nn.Module):
    """The bare law as a model: logits that always pick x1 (``HOLD``), the LSTM state passed
    through; the I/O of a trained actor."""

    def __init__(self, n_actions: int, hold: int) -> None:
        super().__init__()
        logits = torch.zeros(1, n_actions)
        logits[0, hold] = 1.0
        self.register_buffer("logits", logits)

    def forward(self, obs: torch.Tensor, h_in: torch.Tensor,
                c_in: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return obs[:, :1] * 0.0 + self.logits, h_in + 0.0, c_in + 0.0


def hold(args: argparse.Namespace, argv: list[str]) -> int:
    """``DIR/nuwa.onnx`` + card that serve the bare law under the knobs' dynamics."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    spec, knobs = AlgSpec.of(ALG), make_knobs(args.knob)
    assert spec.n_actions is not None and spec.recurrent_hidden is not None
    recurrent = {"kind": "lstm", "num_layers": 1, "hidden_size": int(spec.recurrent_hidden)}
    onnx_path = export_torch(Hold(spec.n_actions, HOLD), out / f"{ALG}.onnx",
                             obs_dim=spec.obs_dim, recurrent=recurrent)
    card_mod.write_card(
        onnx_path, algorithm=ALG, feature_version=spec.feature_version, output_kind="q_values",
        obs_dim=spec.obs_dim, act_dim=1, n_actions=spec.n_actions, action_low=[0.0],
        action_high=[float(spec.n_actions - 1)], recurrent=recurrent,
        training={"command": "python -m ccp_train.nuwa " + shlex.join(argv),
                  "notes": "not trained: the bare law (every decision x1, k stays k_init), a "
                           "baseline for the harness"},
        algs_toml=knobs.toml())
    (out / "agent.toml").write_text(agent_config(card_mod.read_card(out / f"{ALG}.json")))
    print(f"{onnx_path}: the bare law; serve it with --config {out / 'agent.toml'}")
    return 0


def check(args: argparse.Namespace) -> str | None:
    """What is wrong with the flags, or None."""
    if not 0.0 <= args.trace_prob <= 1.0:
        return "--trace-prob: give a probability in [0, 1]"
    for name, lo in (("rate_mbps", 0.0), ("rtt_ms", 0.0), ("buffer_bdp", 0.0),
                     ("duration_s", 0.0), ("target_delay_ms", 0.0), ("trace_scale", 0.0)):
        a, b = getattr(args, name)
        if not lo < a <= b:
            return f"--{name.replace('_', '-')}: give lo,hi with {lo:g} < lo <= hi"
    if not 0.0 <= args.loss[0] <= args.loss[1] <= 1.0:
        return "--loss: give lo,hi with 0 <= lo <= hi <= 1"
    for name in ("steps", "envs", "n_steps", "batch_size", "n_epochs", "episode_steps",
                 "log_every"):
        if getattr(args, name) < 1:
            return f"--{name.replace('_', '-')}: give a positive integer"
    if args.batch_size > args.envs * args.n_steps:
        return (f"--batch-size {args.batch_size} is larger than a rollout ({args.envs} envs x "
                f"{args.n_steps} steps)")
    return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    if args.cmd == "hold":
        try:
            return hold(args, argv)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    problem = check(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        make_knobs(args.knob)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return train(args, argv)


if __name__ == "__main__":
    sys.exit(main())
