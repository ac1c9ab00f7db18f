"""The PPO training loop trainers share: a :class:`Group` (lockstep envs, the critic's reward
memory, the preference they train) and a :class:`Trainer` (one iteration = a rollout per group
and one update on all of them, its scalars logged; checkpoints with counters).

Hyper-parameters come from the flags of :meth:`ccp_train.rl.ppo.PPOConfig.add_flags`
(``--n-steps --lr --ent-* --critic-memory --reward-ema`` and the PPO ones)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ccp_train.rl import checkpoint
from ccp_train.rl.log import Logger
from ccp_train.rl.ppo import PPOConfig, RewardMemory, collect, linear, ppo_update
from ccp_train.rl.spec import AlgSpec
from ccp_train.rl.vec import Lockstep, Pool
from ccp_train.scenarios import Episodes


def fmt_pref(w: Sequence[float]) -> str:
    return ",".join(f"{x:g}" for x in w)


class Group:
    """Lockstep envs (`learners[k]` learners on bottleneck k) with the critic's reward memory
    and the preference every learner of a new episode gets."""

    def __init__(self, pool: Pool, episodes: Episodes, args: argparse.Namespace, seed: int,
                 obs_dim: int) -> None:
        self.episodes = episodes
        self.envs = Lockstep(pool, episodes, args.learners, seed, obs_dim)
        self.memory = RewardMemory(self.envs.num_rows, args.critic_memory, args.reward_ema)
        self.objective: tuple[float, ...] | None = None

    def set_objective(self, w: Sequence[float]) -> None:
        """Every learner of every new episode gets `w`; starts new episodes now."""
        self.envs.set_episodes(self.episodes.with_ranges(preferences=[tuple(w)]))
        self.envs.reset()
        self.memory.clear()
        self.objective = tuple(w)


class Trainer:
    """One iteration = one rollout per group + one PPO update on all of them (several groups:
    e.g. requirement replay). `agent` needs what :mod:`ccp_train.rl.ppo` needs, ``std()`` and
    a ``value_scale`` buffer."""

    def __init__(self, args: argparse.Namespace, agent: torch.nn.Module, spec: AlgSpec,
                 logger: Logger, ckpt_format: str, ckpt: dict | None = None,
                 objective: Callable[[Sequence[float]], str] = fmt_pref) -> None:
        self.args, self.agent, self.spec, self.logger = args, agent, spec, logger
        self.format, self.fmt = ckpt_format, objective
        self.cfg = PPOConfig.from_args(args)
        self.opt = torch.optim.Adam(agent.parameters(), lr=args.lr, eps=1e-5)
        self.gen = torch.Generator().manual_seed(args.seed)
        self.iteration = self.steps = self.env_steps = 0
        self.train_wall = 0.0
        if ckpt is not None:
            self.opt.load_state_dict(ckpt["optimizer"])
            for g in self.opt.param_groups:
                g["lr"] = args.lr
            self.iteration, self.steps = int(ckpt["iteration"]), int(ckpt["steps"])

    def iterate(self, phase: str, groups: Sequence[Group], **extra: Any) -> dict[str, Any]:
        a, t0 = self.args, time.perf_counter()
        rolls = [collect(self.agent, g.envs, g.memory, a.n_steps, self.cfg,
                         self.spec.action_low, self.spec.action_high) for g in groups]
        t1 = time.perf_counter()
        ent = a.ent_scale * linear(a.ent_start, a.ent_end, a.ent_decay_iters, self.iteration)
        upd = ppo_update(self.agent, self.opt, [b for b, _ in rolls], self.cfg, ent, self.gen,
                         float(self.agent.value_scale))
        t2 = time.perf_counter()
        self.iteration += 1
        n = sum(s["transitions"] for _, s in rolls)
        env_steps = sum(s["env_steps"] for _, s in rolls)
        self.steps += n
        self.env_steps += env_steps
        self.train_wall += t2 - t0
        fin = rolls[0][1]["finished"]
        rec = {"kind": "iteration", "phase": phase, "iteration": self.iteration,
               "objective": self.fmt(groups[0].objective or ()), "reward": rolls[0][1]["reward"],
               **upd, "std": self.agent.std(), "ent_coef": ent, "transitions": n,
               "sps": n / (t2 - t0), "env_sps": env_steps / (t2 - t0), "rollout_s": t1 - t0,
               "update_s": t2 - t1, "steps_total": self.steps, "wall_s": self.train_wall,
               "episodes": len(fin),
               "utilization": float(np.nanmean([f["utilization"] for f in fin])) if fin else None}
        if len(groups) > 1:
            rec["replay_objective"] = self.fmt(groups[1].objective or ())
            rec["replay_reward"] = rolls[1][1]["reward"]
        rec.update(extra)
        self.logger.log(rec)
        return rec

    def save(self, path: Path, **meta: Any) -> Path:
        return checkpoint.save(path, self.format, self.agent, self.opt, iteration=self.iteration,
                               steps=self.steps, args=vars(self.args), **meta)
