"""PPO for lockstep multi-flow simulator rollouts (hand-written; why not Stable-Baselines3 below).

- :func:`collect`: one on-policy rollout over a :class:`~ccp_train.rl.vec.Lockstep` (rows =
  learning flows of several shared bottlenecks); rows Rust marks inactive (a flow not started,
  or closed) are left out of the batch and skipped by GAE; time-limit ends are truncations
  (the last reward is bootstrapped with the value of the terminal observation);
- :func:`gae`, :func:`ppo_loss` (clipped surrogate, value loss optionally clipped, entropy
  bonus), :func:`ppo_update` (epochs over one or several rollouts, each gradient step on the
  mean of their minibatch losses; actor and critic gradients clipped separately);
- :class:`RewardMemory`: privileged critic inputs (the row's last reward and its moving
  average), an asymmetric actor-critic: the critic sees them, the exported actor never does.

The agent is any ``nn.Module`` with ``dist(obs) -> torch.distributions.Distribution``,
``value(obs, extra) -> [B]``, and ``actor_params()`` / ``critic_params()``.

Why not SB3's PPO: it has no notion of (1) a row that is inactive in the middle of a rollout
(a learner of a shared bottleneck that has not started yet or whose episode is between draws:
SB3 would train on its zero observations and chain GAE through them); (2) critic inputs that
are not in the observation (SB3's critic reads the policy's observation only: an asymmetric
critic would need the extras in the observation, and the exported actor would then see them);
(3) one gradient step on the mean of two rollouts' losses under different objectives (MOCC's
requirement replay, eq. 6); (4) separate gradient clipping for actor and critic. Each is a
change inside SB3's rollout buffer and train loop, not a wrapper; the whole loop here is about
200 lines. Algorithms that fit SB3/sb3-contrib (TD3, DQN, RecurrentPPO over
:class:`ccp_train.envs.CcpVecEnv`) use them.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from ccp_train.rl.vec import Lockstep


@dataclasses.dataclass
class PPOConfig:
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_coef: float = 0.2
    vf_coef: float = 0.5
    clip_vloss: bool = True
    max_grad_norm: float = 0.5
    num_minibatches: int = 4
    update_epochs: int = 4
    norm_adv: bool = True
    target_kl: float = 0.0

    @staticmethod
    def add_flags(p: argparse.ArgumentParser) -> None:
        g = p.add_argument_group("PPO")
        g.add_argument("--gamma", type=float, default=0.99, help="discount")
        g.add_argument("--gae-lambda", type=float, default=0.95, help="GAE lambda")
        g.add_argument("--clip-coef", type=float, default=0.2,
                       help="PPO ratio clip (also the value clip, on the value's own scale)")
        g.add_argument("--vf-coef", type=float, default=0.5, help="value-loss weight")
        g.add_argument("--clip-vloss", action=argparse.BooleanOptionalAction, default=True,
                       help="clip the value update like the ratio")
        g.add_argument("--max-grad-norm", type=float, default=0.5,
                       help="applied to actor and critic separately")
        g.add_argument("--num-minibatches", type=int, default=4, help="per epoch")
        g.add_argument("--update-epochs", type=int, default=4, help="PPO epochs per rollout")
        g.add_argument("--norm-adv", action=argparse.BooleanOptionalAction, default=True,
                       help="normalize advantages per minibatch")
        g.add_argument("--target-kl", type=float, default=0.0, help="stop epochs above (0: off)")
        g.add_argument("--n-steps", type=int, default=512, help="lockstep steps per rollout")
        g.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate")
        g.add_argument("--ent-start", type=float, default=1.0, help="entropy beta at iteration 0")
        g.add_argument("--ent-end", type=float, default=0.1, help="beta after the decay")
        g.add_argument("--ent-decay-iters", type=int, default=1000,
                       help="iterations of the linear beta decay")
        g.add_argument("--ent-scale", type=float, default=0.01,
                       help="entropy coefficient = scale x beta")
        g.add_argument("--critic-memory", type=int, choices=(0, 2), default=2,
                       help="the critic's privileged inputs: last reward and its moving average")
        g.add_argument("--reward-ema", type=float, default=0.1,
                       help="that moving average's weight of the newest reward")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> PPOConfig:
        return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})


def linear(start: float, end: float, iters: int, it: int) -> float:
    """A linear schedule from `start` to `end` over `iters` iterations, then `end`."""
    frac = min(1.0, it / max(1, iters))
    return start + frac * (end - start)


class RewardMemory:
    """The critic's privileged inputs per row: the last reward and its moving average (weight
    `ema` for the newest), 0 at an episode's start; width 2 (or 0: no memory)."""

    def __init__(self, rows: int, width: int = 2, ema: float = 0.1) -> None:
        self.width = int(width)
        self.ema = float(ema)
        self.values = np.zeros((rows, self.width), dtype=np.float32)

    def clear(self) -> None:
        self.values[:] = 0.0

    def remember(self, rew: np.ndarray, active: np.ndarray, done: np.ndarray) -> np.ndarray:
        """Fold this step's rewards of the `active` rows in; returns the inputs that belong
        with the step's terminal observations (rows that are `done` then start over at 0)."""
        if self.width == 0:
            return self.values.copy()
        v = self.values
        avg = v[:, 1] + self.ema * (rew - v[:, 1])
        new = np.stack([rew, np.where(v[:, 0] == 0, rew, avg)], axis=1)
        self.values = np.where(active[:, None], new, v).astype(np.float32)
        term = self.values.copy()
        self.values[done] = 0.0
        return term


@dataclasses.dataclass
class Batch:
    """The valid (active-row) transitions of one rollout, flattened."""

    obs: torch.Tensor
    #: the critic's privileged inputs (never given to the actor)
    extra: torch.Tensor
    actions: torch.Tensor
    logp: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor

    def __len__(self) -> int:
        return int(self.obs.shape[0])


def gae(rewards: np.ndarray, values: np.ndarray, dones: np.ndarray, valid: np.ndarray,
        last_values: np.ndarray, gamma: float, lam: float) -> np.ndarray:
    """GAE over [T, N] arrays. `rewards` already hold gamma*V(terminal) at truncations (done);
    invalid steps are skipped (a row's next step is its next valid one)."""
    adv = np.zeros_like(rewards)
    next_v = last_values.astype(np.float64)
    next_a = np.zeros_like(next_v)
    for t in reversed(range(rewards.shape[0])):
        nv = np.where(dones[t], 0.0, next_v)
        na = np.where(dones[t], 0.0, next_a)
        a = rewards[t] + gamma * nv - values[t] + gamma * lam * na
        adv[t] = a
        next_v = np.where(valid[t], values[t], next_v)
        next_a = np.where(valid[t], a, next_a)
    return adv


def collect(agent: nn.Module, envs: Lockstep, memory: RewardMemory, n_steps: int,
            cfg: PPOConfig, low: Sequence[float], high: Sequence[float]) -> tuple[Batch, dict]:
    """One rollout of `n_steps` lockstep steps. Exploration samples the policy's distribution
    (torch's seeded generator), the env gets the sample clipped to [low, high], the
    log-probability is the unclipped sample's. Returns the batch and {reward (mean over valid
    rows), transitions, env_steps, finished (the learners' figures of episodes that ended)}."""
    n, d = envs.num_rows, envs.obs_dim
    act_dim = len(low)
    obs_buf = np.zeros((n_steps, n, d), dtype=np.float32)
    ext_buf = np.zeros((n_steps, n, memory.width), dtype=np.float32)
    act_buf = np.zeros((n_steps, n, act_dim), dtype=np.float32)
    logp_buf = np.zeros((n_steps, n), dtype=np.float32)
    val_buf = np.zeros((n_steps, n), dtype=np.float64)
    rew_buf = np.zeros((n_steps, n), dtype=np.float64)
    done_buf = np.zeros((n_steps, n), dtype=bool)
    valid_buf = np.zeros((n_steps, n), dtype=bool)
    raw, finished = [], []
    obs, active = envs.obs, envs.active
    lo, hi = np.asarray(low, dtype=np.float32), np.asarray(high, dtype=np.float32)
    with torch.no_grad():
        for t in range(n_steps):
            ot, et = torch.as_tensor(obs), torch.as_tensor(memory.values)
            dist = agent.dist(ot)
            action = dist.sample()
            obs_buf[t], ext_buf[t], valid_buf[t] = obs, memory.values, active
            act_buf[t] = action.numpy()
            logp_buf[t] = dist.log_prob(action).sum(-1).numpy()
            val_buf[t] = agent.value(ot, et).numpy()
            b = envs.step(np.clip(action.numpy(), lo, hi))
            term_ext = memory.remember(b.rewards, active | (b.rewards != 0), b.done)
            raw.append(b.rewards[valid_buf[t]])
            r = b.rewards.copy()
            if b.done.any():
                tv = agent.value(torch.as_tensor(b.terminal[b.done]),
                                 torch.as_tensor(term_ext[b.done])).numpy()
                r[b.done] += cfg.gamma * tv
            rew_buf[t], done_buf[t] = r, b.done
            finished.extend(b.finished)
            obs, active = b.obs, b.active
        last_v = agent.value(torch.as_tensor(obs), torch.as_tensor(memory.values)).numpy()
    adv = gae(rew_buf, val_buf, done_buf, valid_buf, last_v, cfg.gamma, cfg.gae_lambda)
    m = valid_buf
    batch = Batch(
        obs=torch.as_tensor(obs_buf[m]), extra=torch.as_tensor(ext_buf[m]),
        actions=torch.as_tensor(act_buf[m]), logp=torch.as_tensor(logp_buf[m]),
        values=torch.as_tensor(val_buf[m], dtype=torch.float32),
        advantages=torch.as_tensor(adv[m], dtype=torch.float32),
        returns=torch.as_tensor((adv + val_buf)[m], dtype=torch.float32))
    rr = np.concatenate(raw) if raw else np.zeros(0)
    return batch, {"reward": float(rr.mean()) if rr.size else float("nan"),
                   "transitions": int(m.sum()), "env_steps": n_steps * len(envs.sizes),
                   "finished": finished}


def ppo_loss(agent: nn.Module, b: Batch, idx: torch.Tensor, cfg: PPOConfig, ent_coef: float,
             value_scale: float = 1.0) -> tuple[torch.Tensor, dict[str, float]]:
    """L^{CLIP} - ent_coef * entropy + vf_coef * value loss on minibatch `idx`; the value loss
    is taken on values divided by `value_scale`."""
    obs, act = b.obs[idx], b.actions[idx]
    dist = agent.dist(obs)
    logp = dist.log_prob(act).sum(-1)
    entropy = dist.entropy().sum(-1).mean()
    logratio = logp - b.logp[idx]
    ratio = logratio.exp()
    adv = b.advantages[idx]
    if cfg.norm_adv and adv.numel() > 1:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    pg_loss = torch.max(-adv * ratio,
                        -adv * torch.clamp(ratio, 1 - cfg.clip_coef, 1 + cfg.clip_coef)).mean()
    v = agent.value(obs, b.extra[idx]) / value_scale
    ret = b.returns[idx] / value_scale
    if cfg.clip_vloss:
        v_old = b.values[idx] / value_scale
        v_clipped = v_old + torch.clamp(v - v_old, -cfg.clip_coef, cfg.clip_coef)
        v_loss = 0.5 * torch.max((v - ret) ** 2, (v_clipped - ret) ** 2).mean()
    else:
        v_loss = 0.5 * ((v - ret) ** 2).mean()
    loss = pg_loss - ent_coef * entropy + cfg.vf_coef * v_loss
    with torch.no_grad():
        stats = {"pg_loss": float(pg_loss), "v_loss": float(v_loss), "entropy": float(entropy),
                 "approx_kl": float(((ratio - 1) - logratio).mean()),
                 "clipfrac": float(((ratio - 1.0).abs() > cfg.clip_coef).float().mean())}
    return loss, stats


def ppo_update(agent: nn.Module, opt: torch.optim.Optimizer, batches: Sequence[Batch],
               cfg: PPOConfig, ent_coef: float, gen: torch.Generator,
               value_scale: float = 1.0) -> dict[str, float]:
    """PPO epochs over `batches`; with several (e.g. requirement replay) every step minimizes
    the mean of their minibatch losses. Returns the mean of each loss statistic."""
    totals: dict[str, float] = {}
    count = 0
    actor_params, critic_params = list(agent.actor_params()), list(agent.critic_params())
    for _ in range(cfg.update_epochs):
        chunks = [torch.tensor_split(torch.randperm(len(b), generator=gen), cfg.num_minibatches)
                  for b in batches]
        kls = []
        for m in range(cfg.num_minibatches):
            losses = []
            for b, ch in zip(batches, chunks, strict=True):
                if len(ch[m]) == 0:
                    continue
                loss, st = ppo_loss(agent, b, ch[m], cfg, ent_coef, value_scale)
                losses.append(loss)
                for k, v in st.items():
                    totals[k] = totals.get(k, 0.0) + v
                count += 1
                kls.append(st["approx_kl"])
            if not losses:
                continue
            opt.zero_grad()
            (sum(losses) / len(losses)).backward()
            nn.utils.clip_grad_norm_(actor_params, cfg.max_grad_norm)
            nn.utils.clip_grad_norm_(critic_params, cfg.max_grad_norm)
            opt.step()
        if cfg.target_kl > 0 and kls and float(np.mean(kls)) > cfg.target_kl:
            break
    return {k: v / max(count, 1) for k, v in totals.items()}
