"""MOCC training (the MOCC paper §4-5): PPO with a preference sub-network, two-phase landmark
training, requirement replay for online adaptation. CleanRL-style: one file, every
hyper-parameter a flag, fully seeded, scalars logged per iteration; the generic parts are in
``ccp_train.rl``. Design notes and the reasons behind each default: ``docs/training.md``.

    python -m ccp_train.mocc train --out DIR [--seed 1] [--knob NAME=VALUE ...] [--workers N]
    python -m ccp_train.mocc adapt --w 0.5,0.2,0.3 [--model models/mocc.onnx] --out DIR

Train what you serve: episodes run the agent's own MOCC (``algs/src/mocc/``) with the agent's
default knobs, governors included (rate floor, share probe, guard, peers table), overridden
only by ``--knob`` (repeatable); the card's ``dynamics`` record them and the agent refuses the
model under other ones. Only where an episode begins varies: ``--policy-start-prob`` episodes
skip start-up and start the policy at a random rate.

Environment: ``--learners 1,1,2,3`` = one simulator per entry, that many MOCC learners on one
bottleneck, stepped in lockstep (``ccp_train.rl.vec``; ``--workers``/``--ray`` spread them over
processes or a Ray cluster without changing a transition). Observation, action and reward are
Rust's (``_native.spec("mocc")``); the reward is eq. 2 under the flow's ``w``. With probability
``--mixed-w`` every learner after the first carries a random landmark. With probability
``--trace-prob`` a trace replaces the constant rate: a recording of the trace corpus's
``train`` split (a kind drawn by ``--trace-kinds``, then a recording uniformly), explicit
``--traces`` files instead, or with ``--synthetic-prob`` a synthetic capacity log
(``ccp_train.rl.flags.add_trace_source``; docs/training.md).

Networks (§4.1): actor and critic towers, ``w -> PreferenceNet`` concatenated with the network
state, then tanh layers; the actor is a Gaussian mean with a state-independent log std, the
critic also sees the learner's reward memory (asymmetric, ``--critic-memory``) and is scaled
by 1/(1-gamma). Exported: the actor mean (``obs -> action``).

Phases (§4.2): bootstrap over three objectives, then fast traversing of the 36 landmarks in
Algorithm 1's order, ``--iters-per-landmark`` each, until every landmark's held-out reward is
stable (``--conv-*``) or ``--max-cycles``. ``adapt`` (§4.3, eq. 6): PPO on a new ``w``, each
step on 1/2 [L(w_new) + L(w_old)], ``w_old`` drawn from the stored objectives.

Outputs in ``--out``: ``mocc.onnx`` + card ``mocc.json``, ``mocc.pt`` (checkpoint for ``adapt``
and ``--init``), ``mocc.resume.pt`` (after each cycle), the log ``mocc.<cmd>.jsonl`` and its
curves. ``train --init CKPT`` chains CKPT's command before its own in the card.
"""

from __future__ import annotations

import argparse
import math
import random
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.distributions import Normal

from ccp_train import card as _card
from ccp_train.export import export_torch
from ccp_train.rl import checkpoint, curves, determinism, flags
from ccp_train.rl.evaluate import harness_tune
from ccp_train.rl.log import Logger
from ccp_train.rl.loop import Group, Trainer, fmt_pref
from ccp_train.rl.ppo import PPOConfig
from ccp_train.rl.spec import AlgSpec, Knobs, parse_knob
from ccp_train.rl.vec import Pool, make_pool, run_fixed
from ccp_train.scenarios import Episodes, EpisodeStart

ALG = "mocc"
LOG_STD_BOUNDS = (-5.0, 2.0)
CKPT_FORMAT = "ccp_train.mocc/1"
#: the paper's bootstrap objectives (§4.2)
BOOTSTRAP = ((0.6, 0.3, 0.1), (0.1, 0.6, 0.3), (0.3, 0.1, 0.6))
Pref = tuple[float, float, float]

# --- landmarks and Algorithm 1 ---------------------------------------------------------------


def landmarks(den: int = 10) -> list[Pref]:
    """All w on the simplex with step 1/den and no zero component (36 for den = 10)."""
    return [(round(a / den, 10), round(b / den, 10), round((den - a - b) / den, 10))
            for a in range(1, den - 1) for b in range(1, den - a) if den - a - b >= 1]


def _steps(w: Sequence[float], den: int) -> tuple[int, ...]:
    return tuple(round(x * den) for x in w)


def are_neighbours(u: Sequence[float], v: Sequence[float], den: int = 10) -> bool:
    """Differ in at most two dimensions, each by at most one step (and are not equal)."""
    d = [abs(x - y) for x, y in zip(_steps(u, den), _steps(v, den), strict=True)]
    return 0 < sum(1 for x in d if x) <= 2 and max(d) <= 1


def traversal_order(points: Sequence[Pref], boot: Sequence[Pref] = BOOTSTRAP,
                    den: int = 10) -> list[Pref]:
    """Algorithm 1: each bootstrap vertex grows a region of ceil(|V|/|O|) landmarks by
    Dijkstra over the neighbour graph; ties go to a neighbour of the last appended landmark,
    then to the lexicographically smallest (docs/training.md)."""
    pts = [_steps(p, den) for p in points]
    o = [pts.index(_steps(b, den)) for b in boot]
    n = len(pts)
    nbr = [[j for j in range(n) if are_neighbours(points[i], points[j], den)] for i in range(n)]
    d = [[1.0 if oi in nbr[v] else math.inf for oi in o] for v in range(n)]
    visited = [False] * n
    order: list[int] = []
    for i, oi in enumerate(o):
        visits = math.ceil(n / len(o))
        if not visited[oi]:
            order.append(oi)
            visited[oi] = True
            visits -= 1
        while visits > 0 and len(order) < n:
            cand = [v for v in range(n) if not visited[v]]
            best = min(d[v][i] for v in cand)
            ties = [v for v in cand if d[v][i] == best]
            near = [v for v in ties if order and v in nbr[order[-1]]]
            u = min(near or ties, key=lambda v: pts[v])
            order.append(u)
            visited[u] = True
            visits -= 1
            for w in nbr[u]:
                if not visited[w] and d[u][i] + 1 < d[w][i]:
                    d[w][i] = d[u][i] + 1
    return [points[v] for v in order]


def parse_pref(text: str) -> Pref:
    v = [float(x) for x in text.split(",")]
    if len(v) != 3 or any(not 0.0 <= x <= 1.0 for x in v) or abs(sum(v) - 1.0) > 1e-6:
        raise argparse.ArgumentTypeError(
            f"preference {text!r}: expected three weights in [0,1] summing to 1, e.g. 0.4,0.5,0.1")
    return v[0], v[1], v[2]


# --- networks --------------------------------------------------------------------------------


def _layer(i: int, o: int, std: float) -> nn.Linear:
    lin = nn.Linear(i, o)
    nn.init.orthogonal_(lin.weight, std)
    nn.init.zeros_(lin.bias)
    return lin


def _mlp(sizes: Sequence[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, o in zip(sizes[:-1], sizes[1:], strict=True):
        layers += [_layer(i, o, math.sqrt(2)), nn.Tanh()]
    return nn.Sequential(*layers)


class PreferenceNet(nn.Module):
    """w (3) -> tanh MLP: the preference features concatenated with the network state."""

    def __init__(self, sizes: Sequence[int]) -> None:
        super().__init__()
        self.net = _mlp([3, *sizes])
        self.out_dim = int(sizes[-1])

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return self.net(w)


class Tower(nn.Module):
    """concat(obs[state], PreferenceNet(obs[w]), extra[:extra]) -> tanh layers -> 1 output."""

    def __init__(self, spec: AlgSpec, pref: Sequence[int], hidden: Sequence[int],
                 head_std: float, extra: int = 0) -> None:
        super().__init__()
        self.state, self.w = spec.slice("state"), spec.slice("w")
        self.pref = PreferenceNet(pref)
        self.extra = int(extra)
        width = self.state.stop - self.state.start
        self.body = _mlp([width + self.pref.out_dim + self.extra, *hidden])
        self.head = _layer(int(hidden[-1]), 1, head_std)

    def forward(self, obs: torch.Tensor, extra: torch.Tensor | None = None) -> torch.Tensor:
        parts = [obs[..., self.state], self.pref(obs[..., self.w])]
        if self.extra:
            if extra is None:
                raise ValueError("this critic needs its extra inputs")
            parts.append(extra[..., : self.extra])
        return self.head(self.body(torch.cat(parts, dim=-1)))


class MoccAgent(nn.Module):
    """Actor (Gaussian mean, free log std) and critic, each with its own preference net."""

    def __init__(self, spec: AlgSpec, pref: Sequence[int] = (16, 16),
                 hidden: Sequence[int] = (64, 32), log_std_init: float = 0.0,
                 gamma: float = 0.99, critic_extra: int = 2) -> None:
        super().__init__()
        self.config = {"pref": [int(x) for x in pref], "hidden": [int(x) for x in hidden],
                       "log_std_init": float(log_std_init), "gamma": float(gamma),
                       "critic_extra": int(critic_extra)}
        self.actor = Tower(spec, pref, hidden, head_std=0.01)
        self.critic = Tower(spec, pref, hidden, head_std=1.0, extra=critic_extra)
        self.log_std = nn.Parameter(torch.full((1,), float(log_std_init)))
        self.register_buffer("value_scale", torch.tensor(1.0 / (1.0 - gamma)))

    def actor_mean(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor(obs)

    def value(self, obs: torch.Tensor, extra: torch.Tensor | None = None) -> torch.Tensor:
        return self.critic(obs, extra).squeeze(-1) * self.value_scale

    def dist(self, obs: torch.Tensor) -> Normal:
        mean = self.actor(obs)
        std = torch.exp(torch.clamp(self.log_std, *LOG_STD_BOUNDS)).expand_as(mean)
        return Normal(mean, std, validate_args=False)

    def std(self) -> float:
        return float(torch.exp(torch.clamp(self.log_std, *LOG_STD_BOUNDS)).item())

    def actor_params(self) -> list[nn.Parameter]:
        return [*self.actor.parameters(), self.log_std]

    def critic_params(self) -> list[nn.Parameter]:
        return list(self.critic.parameters())


class ActorMean(nn.Module):
    """What is exported: obs [B, obs_dim] -> deterministic action [B, 1]."""

    def __init__(self, agent: MoccAgent) -> None:
        super().__init__()
        self.actor = agent.actor

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor(obs)


def agent_from_checkpoint(ckpt: dict[str, Any], spec: AlgSpec) -> MoccAgent:
    c = ckpt["config"]
    agent = MoccAgent(spec, c["pref"], c["hidden"], c["log_std_init"], c["gamma"],
                      c.get("critic_extra", 0))
    agent.load_state_dict(ckpt["state_dict"])
    return agent


# --- episodes and evaluation -----------------------------------------------------------------


def episodes_from_args(args: argparse.Namespace, knobs: Knobs) -> Episodes:
    ranges = flags.ranges_from_args(args, max(args.learners), landmarks())
    if not 0.0 <= args.policy_start_prob <= 1.0:
        raise SystemExit("--policy-start-prob: give a probability in [0, 1]")
    lo, hi = args.policy_start_mbps
    if not 0.0 < lo <= hi:
        raise SystemExit(f"--policy-start-mbps {lo:g},{hi:g}: expected 0 < low <= high")
    start = EpisodeStart(args.policy_start_prob, {"startup": False},
                         {"initial_rate_mbps": (lo, hi)})
    return Episodes(ALG, ranges, knobs.toml(), start)


def eval_scenarios(episodes: Episodes, count: int, seed: int) -> list[str]:
    """`count` single-learner scenarios without a preference (given per run), seeded."""
    e = episodes.with_ranges(learners=(1, 1), stagger_s=(0.0, 0.0), preferences=None,
                             mixed_prob=0.0)
    rng = random.Random(seed)
    return [e.ranges.sample(rng, ALG) for _ in range(count)]


def evaluate(agent: MoccAgent, pool: Pool, prefs: Sequence[Pref], scenarios: Sequence[str],
             algs_toml: str) -> dict[Pref, dict[str, float]]:
    """Deterministic policy on every (w, scenario): per w the mean per-step reward (eq. 2
    under w) and the learner's utilization, p95 queueing delay and loss rate."""
    def act(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return agent.actor_mean(torch.as_tensor(obs)).numpy()

    runs = [(s, fmt_pref(w), algs_toml) for w in prefs for s in scenarios]
    res = run_fixed(pool, ALG, runs, act)
    out = {}
    for k, w in enumerate(prefs):
        rs = res[k * len(scenarios):(k + 1) * len(scenarios)]
        out[tuple(w)] = {f: float(np.nanmean([r[f] for r in rs])) for f in
                         ("reward", "utilization", "queue_delay_p95_ms", "loss_rate")}
    return out  # type: ignore[return-value]


# --- training --------------------------------------------------------------------------------


def export_model(agent: MoccAgent, spec: AlgSpec, out: Path, training: dict[str, Any],
                 evaluation: dict[str, Any], knobs: Knobs) -> tuple[Path, Path]:
    """`out/mocc.onnx` (the actor mean) and its card, whose dynamics are `knobs`'."""
    onnx_path = export_torch(ActorMean(agent).eval(), out / f"{ALG}.onnx", obs_dim=spec.obs_dim)
    card_path = _card.write_card(
        onnx_path, algorithm=ALG, feature_version=spec.feature_version,
        output_kind="continuous", obs_dim=spec.obs_dim, act_dim=spec.act_dim,
        action_low=spec.action_low, action_high=spec.action_high, training=training,
        evaluation=evaluation, algs_toml=knobs.toml())
    return onnx_path, card_path


def _library() -> str:
    return f"torch {torch.__version__} (own PPO: ccp_train.rl.ppo, see its module doc)"


def cmd_train(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log_path = Path(args.log) if args.log else out / f"{ALG}.train.jsonl"
    logger = Logger(log_path, quiet_keys=("order", "per_landmark"))
    determinism.seed_everything(args.seed, args.threads)
    t_start = time.perf_counter()
    spec, knobs = AlgSpec.of(ALG), make_knobs(args.knob)
    episodes = episodes_from_args(args, knobs)
    command = "python -m ccp_train.mocc " + shlex.join(argv)
    ckpt = checkpoint.load(Path(args.init), CKPT_FORMAT) if args.init else None
    if ckpt is not None:
        agent = agent_from_checkpoint(ckpt, spec)
        command = f"{checkpoint.command_of(Path(args.init), ckpt)} && {command}"
    else:
        agent = MoccAgent(spec, args.pref_layers, args.hidden, args.log_std_init, args.gamma,
                          args.critic_memory)
    tr = Trainer(args, agent, spec, logger, CKPT_FORMAT, ckpt)
    lms, toml = landmarks(), knobs.toml()
    order = traversal_order(lms)
    with make_pool(args.workers, args.ray) as pool:
        group = Group(pool, episodes, args, args.seed, spec.obs_dim)
        logger.log({"kind": "setup", "command": command, "rows": group.envs.num_rows,
                    "params": sum(p.numel() for p in agent.parameters()),
                    "knobs": knobs.overrides, "order": [fmt_pref(w) for w in order]})
        for it in range(args.bootstrap_iters):  # phase 1
            w = BOOTSTRAP[(it // max(1, args.bootstrap_switch)) % len(BOOTSTRAP)]
            if group.objective != w:
                group.set_objective(w)
            tr.iterate("bootstrap", [group])
        # phase 2: cycles over Algorithm 1's order until every landmark converged
        conv_set = eval_scenarios(episodes, args.conv_scenarios, args.seed + 10_000_019)
        history: dict[Pref, list[float]] = {w: [] for w in lms}
        streak = dict.fromkeys(lms, 0)
        cycles, converged, traversed = 0, False, 0
        plan = [w for w in order for _ in range(args.iters_per_landmark)]
        for cycle in range(1, args.max_cycles + 1):
            for w in plan:
                if args.traverse_max_iters and traversed >= args.traverse_max_iters:
                    break
                if group.objective != w:
                    group.set_objective(w)
                tr.iterate("traverse", [group], cycle=cycle)
                traversed += 1
            else:
                cycles = cycle
                t0 = time.perf_counter()
                ev = evaluate(agent, pool, lms, conv_set, toml)
                for w in lms:
                    r, h = ev[w]["reward"], history[w]
                    ok = h and abs(r - h[-1]) <= args.conv_tol * max(abs(h[-1]), 1e-9)
                    streak[w] = streak[w] + 1 if ok else 0
                    h.append(r)
                n_conv = sum(1 for w in lms if streak[w] >= args.conv_patience)
                logger.log({"kind": "cycle", "cycle": cycle, "iteration": tr.iteration,
                            "mean_reward": float(np.mean([history[w][-1] for w in lms])),
                            "converged": n_conv, "eval_s": time.perf_counter() - t0,
                            "per_landmark": {fmt_pref(w): history[w][-1] for w in lms}})
                tr.save(out / f"{ALG}.resume.pt", command=command, pool=lms,
                        dynamics=knobs.dynamics(), onnx_sha256=None)
                if cycle >= args.min_cycles and n_conv == len(lms):
                    converged = True
                    break
                continue
            break  # --traverse-max-iters reached
        t0 = time.perf_counter()  # final evaluation on a held-out set
        held_out = eval_scenarios(episodes, args.eval_scenarios, args.seed + 20_000_003)
        final = evaluate(agent, pool, lms, held_out, toml)
    eval_s = time.perf_counter() - t0
    wall = time.perf_counter() - t_start
    evaluation = {
        "held_out_scenarios": args.eval_scenarios, "held_out_seed": args.seed + 20_000_003,
        "policy": f"deterministic mean, clipped to [{spec.action_low[0]:g}, "
                  f"{spec.action_high[0]:g}]",
        "mean_reward": float(np.mean([final[w]["reward"] for w in lms])),
        "per_landmark": {fmt_pref(w): {k: round(v, 6) for k, v in final[w].items()} for w in lms},
        "training_wall_s": round(wall, 1), "iterations": tr.iteration, "cycles": cycles,
        "converged": converged}
    start = (f"from {args.init} (iteration {int(ckpt['iteration'])}, {int(ckpt['steps'])} "
             "transitions; the command's first part), this run: " if ckpt is not None else "")
    notes = (f"MOCC PPO with preference sub-network under the agent's dynamics (card "
             f"`dynamics`); {start}bootstrap {args.bootstrap_iters} iterations, fast traversing "
             f"{traversed} iterations ({cycles} full cycles, "
             f"{'converged' if converged else 'not converged'}); {tr.iteration} iterations, "
             f"{tr.steps} transitions in all; this run {tr.env_steps} env steps, wall {wall:.0f} s"
             f" ({tr.train_wall:.0f} s in training iterations)")
    training = {"command": command, "library": _library(), "seed": args.seed, "steps": tr.steps,
                "scenario_ranges": {**episodes.ranges.describe(),
                                    "episode_start": episodes.start.describe(),
                                    "learners_per_env": list(args.learners)},
                "notes": notes, "wall_s": round(wall, 1),
                "determinism": determinism.record(args.threads)}
    onnx_path, card_path = export_model(agent, spec, out, training, evaluation, knobs)
    ckpt_path = tr.save(out / f"{ALG}.pt", command=command, pool=lms, dynamics=knobs.dynamics(),
                        onnx_sha256=_card.sha256_file(onnx_path))
    summary = {"kind": "done", "onnx": str(onnx_path), "card": str(card_path),
               "checkpoint": str(ckpt_path), "iterations": tr.iteration,
               "transitions": tr.steps, "env_steps": tr.env_steps, "wall_s": wall,
               "train_wall_s": tr.train_wall, "final_eval_s": eval_s,
               "transitions_per_s": tr.steps / max(tr.train_wall, 1e-9),
               "mean_reward": evaluation["mean_reward"]}
    if args.harness_suites:  # selection figures: tune split only (never recorded as eval)
        summary["harness_tune"] = harness_tune(out, out / "harness-tune",
                                               suites=args.harness_suites.split(","),
                                               seeds=args.harness_seeds)
    logger.log(summary)
    logger.close()
    curves.export(log_path, out, ALG, Path(args.init) if args.init else None)
    return summary


def make_knobs(pairs: Sequence[tuple[str, Any]], base: dict[str, Any] | None = None) -> Knobs:
    """The agent's defaults, then `base` (a card's dynamics), then the ``--knob`` pairs."""
    try:
        defaults = Knobs(ALG).defaults
        base = {k: v for k, v in (base or {}).items() if defaults.get(k, v) != v or k not in
                defaults}
        return Knobs(ALG, {**base, **dict(pairs)})
    except ValueError as e:
        raise SystemExit(str(e)) from e


# --- adapt -----------------------------------------------------------------------------------


def time_to_fraction(curve: Sequence[float], walls: Sequence[float],
                     frac: float) -> tuple[int, float, float]:
    """First index where `curve` reaches `frac` x its best; -> (index, wall there, best)."""
    best = max(curve)
    i = next(i for i, r in enumerate(curve) if r >= frac * best)
    return i, walls[i], best


def cmd_adapt(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    logger = Logger(Path(args.log) if args.log else out / f"{ALG}.adapt.jsonl")
    determinism.seed_everything(args.seed, args.threads)
    model = Path(args.model)
    ckpt_path = Path(args.checkpoint) if args.checkpoint else model.with_suffix(".pt")
    ckpt = checkpoint.load(ckpt_path, CKPT_FORMAT)
    if ckpt.get("onnx_sha256") and model.exists():
        sha = _card.sha256_file(model)
        if sha != ckpt["onnx_sha256"]:
            raise SystemExit(f"{ckpt_path} was saved with a different ONNX model than {model} "
                             f"(sha256 {ckpt['onnx_sha256']} vs {sha}); pass the matching "
                             "--checkpoint")
    # the dynamics the model was trained under (its card's), unless --knob overrides one
    trained = ckpt.get("dynamics") or _card.read_card(model.with_suffix(".json"))["dynamics"]
    spec, knobs = AlgSpec.of(ALG), make_knobs(args.knob, trained)
    agent = agent_from_checkpoint(ckpt, spec)
    tr = Trainer(args, agent, spec, logger, CKPT_FORMAT)
    tr.iteration, tr.steps = int(ckpt["iteration"]), int(ckpt["steps"])
    it0 = tr.iteration
    pool_w: list[Pref] = [(w[0], w[1], w[2]) for w in ckpt["pool"]] or landmarks()
    w_new = args.w
    w_old = args.old_w or max(landmarks(), key=lambda w: sum(abs(a - b) for a, b in
                                                             zip(w, w_new, strict=True)))
    episodes, toml = episodes_from_args(args, knobs), knobs.toml()
    scen = eval_scenarios(episodes, args.adapt_eval_scenarios, args.seed + 30_000_001)
    rng = random.Random(args.seed + 40_000_003)
    with make_pool(args.workers, args.ray) as pool:
        before = evaluate(agent, pool, [w_new, w_old], scen, toml)
        curve, walls = [before[w_new]["reward"]], [0.0]
        logger.log({"kind": "adapt_start", "w_new": fmt_pref(w_new), "w_old_eval": fmt_pref(w_old),
                    "replay": args.replay, "pool": len(pool_w), "reward_new_before": curve[0],
                    "reward_old_before": before[w_old]["reward"]})
        g_new = Group(pool, episodes, args, args.seed, spec.obs_dim)
        g_new.set_objective(w_new)
        g_old = Group(pool, episodes, args, args.seed + 1, spec.obs_dim) if args.replay else None
        for _ in range(args.iters):
            groups = [g_new]
            if g_old is not None:
                g_old.set_objective(rng.choice(pool_w))
                groups.append(g_old)
            rec = tr.iterate("adapt", groups)
            r = evaluate(agent, pool, [w_new], scen, toml)[w_new]["reward"]
            curve.append(r)
            walls.append(tr.train_wall)
            logger.log({"kind": "adapt_eval", "iteration": rec["iteration"], "reward_new": r})
        after = evaluate(agent, pool, [w_new, w_old], scen, toml)
    idx, wall_at, best = time_to_fraction(curve, walls, 0.99)
    r_old0, r_old1 = before[w_old]["reward"], after[w_old]["reward"]
    kept = 100.0 * r_old1 / r_old0 if r_old0 else float("nan")
    report = {"w_new": fmt_pref(w_new), "replay": bool(args.replay), "iterations": args.iters,
              "reward_new_before": curve[0], "reward_new_after": after[w_new]["reward"],
              "reward_new_best": best, "iterations_to_99pct_best": idx,
              "wall_s_to_99pct_best": round(wall_at, 3), "w_old": fmt_pref(w_old),
              "reward_old_before": r_old0, "reward_old_after": r_old1,
              "reward_old_kept_pct": round(kept, 2), "adapt_train_wall_s": round(tr.train_wall, 3),
              "held_out_scenarios": args.adapt_eval_scenarios}
    training = {"command": "python -m ccp_train.mocc " + shlex.join(argv),
                "library": _library(), "seed": args.seed, "steps": tr.steps,
                "scenario_ranges": {**episodes.ranges.describe(),
                                    "episode_start": episodes.start.describe(),
                                    "learners_per_env": list(args.learners)},
                "notes": (f"online adaptation of {model} (checkpoint {ckpt_path}, iteration "
                          f"{it0}) to w={fmt_pref(w_new)} with "
                          f"{'requirement replay (eq. 6)' if args.replay else 'plain PPO'} for "
                          f"{args.iters} iterations, {tr.train_wall:.0f} s")}
    onnx_path, card_path = export_model(agent, spec, out, training, {"adaptation": report}, knobs)
    tr.save(out / f"{ALG}.pt", command=None, dynamics=knobs.dynamics(),
            pool=pool_w if w_new in pool_w else [*pool_w, w_new],
            onnx_sha256=_card.sha256_file(onnx_path))
    logger.log({"kind": "adapt_done", **report, "onnx": str(onnx_path), "card": str(card_path)})
    logger.close()
    print(f"adapt: new objective <{fmt_pref(w_new)}> reached 99% of its best held-out reward "
          f"({best:.4f}) after {idx} iterations, {wall_at:.1f} s of training "
          f"(reward {curve[0]:.4f} before, {report['reward_new_after']:.4f} after)")
    print(f"adapt: old objective <{fmt_pref(w_old)}> held-out reward {r_old0:.4f} before, "
          f"{r_old1:.4f} after: {kept:.1f}% kept")
    return report


# --- command line ----------------------------------------------------------------------------


def _common(p: argparse.ArgumentParser) -> None:
    flags.add_run(p, ALG)
    g = p.add_argument_group("dynamics (what the card records and the agent must serve)")
    g.add_argument("--knob", type=parse_knob, action="append", default=[], metavar="NAME=VALUE",
                   help="an [algs.mocc] knob (MoccConfig) for every episode, repeatable; unset "
                   "knobs are the agent's defaults (adapt: the model's card's)")
    flags.add_scenarios(p)
    g = p.add_argument_group("episodes")
    g.add_argument("--learners", type=flags.ints, default="1,1,2,3",
                   help="one simulator per entry, with that many MOCC learners on a bottleneck")
    g.add_argument("--policy-start-prob", type=float, default=0.5,
                   help="P(an episode skips start-up and starts the policy at a random rate)")
    g.add_argument("--policy-start-mbps", type=flags.floats(2), default="0.2,10",
                   help="log-uniform range of that starting rate")
    PPOConfig.add_flags(p)  # defaults: Table 2 and docs/training.md


def build_parser() -> argparse.ArgumentParser:
    fmt = argparse.ArgumentDefaultsHelpFormatter
    ap = argparse.ArgumentParser(prog="python -m ccp_train.mocc", formatter_class=fmt,
                                 description="MOCC training (two phases, 36 landmarks) and "
                                 "online adaptation.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="offline two-phase training", formatter_class=fmt)
    t.add_argument("--out", default="models", help="output directory")
    _common(t)
    g = t.add_argument_group("network")
    g.add_argument("--hidden", type=flags.ints, default="64,32", help="actor/critic hidden layers")
    g.add_argument("--pref-layers", type=flags.ints, default="16,16", help="preference sub-network")
    g.add_argument("--log-std-init", type=float, default=0.0, help="initial Gaussian log std")
    g.add_argument("--init", default=None, help="start from this checkpoint's weights, "
                   "optimizer and counters (add --bootstrap-iters 0 to go straight to phase 2)")
    g = t.add_argument_group("phases")
    g.add_argument("--bootstrap-iters", type=int, default=600, help="phase 1 iterations")
    g.add_argument("--bootstrap-switch", type=int, default=3,
                   help="iterations per bootstrap objective before the next")
    g.add_argument("--iters-per-landmark", type=int, default=3, help="phase 2, per visit")
    g.add_argument("--max-cycles", type=int, default=15, help="phase 2 cycles at most")
    g.add_argument("--min-cycles", type=int, default=3, help="phase 2 cycles at least")
    g.add_argument("--conv-tol", type=float, default=0.01,
                   help="relative change of a landmark's held-out reward per cycle")
    g.add_argument("--conv-patience", type=int, default=2, help="cycles in a row within tol")
    g.add_argument("--conv-scenarios", type=int, default=2,
                   help="held-out scenarios per landmark for the convergence check")
    g.add_argument("--traverse-max-iters", type=int, default=0, help="phase 2 cap (0: none)")
    g.add_argument("--eval-scenarios", type=int, default=8,
                   help="held-out scenarios per landmark for the final evaluation (card)")
    g = t.add_argument_group("harness (tune split only: selection figures)")
    g.add_argument("--harness-suites", default="",
                   help="after training, score the model on these suites' tune scenarios")
    g.add_argument("--harness-seeds", type=int, default=1, help="harness seeds per scenario")
    a = sub.add_parser("adapt", help="online adaptation with requirement replay",
                       formatter_class=fmt)
    a.add_argument("--w", type=parse_pref, required=True, help="new objective thr,lat,loss")
    a.add_argument("--model", default="models/mocc.onnx", help="the model to adapt")
    a.add_argument("--checkpoint", default=None, help="its checkpoint (default: beside it)")
    a.add_argument("--out", required=True, help="output directory for the adapted model")
    a.add_argument("--iters", type=int, default=50, help="adaptation iterations")
    a.add_argument("--replay", action=argparse.BooleanOptionalAction, default=True,
                   help="requirement replay (eq. 6); --no-replay: plain PPO on w_new")
    a.add_argument("--old-w", type=parse_pref, default=None,
                   help="old objective to report (default: the landmark farthest from --w)")
    a.add_argument("--adapt-eval-scenarios", type=int, default=4,
                   help="held-out scenarios for the adaptation figures")
    _common(a)
    return ap


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    return (cmd_train if args.cmd == "train" else cmd_adapt)(args, argv)


if __name__ == "__main__":
    main()
