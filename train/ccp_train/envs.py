"""Gymnasium and Stable-Baselines3 environments over the Rust simulator.

`CcpEnv` is a single-learner `gymnasium.Env`; `CcpVecEnv` is a Stable-Baselines3 `VecEnv`
whose sub-environments are the learning flows of one shared bottleneck (several learners,
one shared policy — what Jury and MOCC train for fairness). Observations, actions and
rewards are the learned algorithm's own, computed by the same Rust code the agent runs
(`algs/src/<alg>.rs`): features of each report, the paper's action space, the paper's
reward. Every episode draws a scenario from a `ScenarioRanges`, seeded.

Discrete and masked algorithms (Owl: 7 window changes, a state mask over its features): the
action space is ``Discrete(n_actions)`` (the index is handed to the core as is) and the
observation is ``concat(obs * mask, mask)``, a ``Box`` of ``2 * obs_dim`` values in ``[-1, 1]``:
the features with absent ones zeroed, then the mask (1 present, 0 absent). That is the input
``ccp_train.export.export_sb3_actor(..., masked=True)`` rebuilds from the ONNX model's
``obs`` and ``mask`` inputs, so a policy trained on it exports as the runtime serves it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3.common.vec_env import VecEnv

from ccp_train import _native
from ccp_train.scenarios import ScenarioRanges


def _spaces(env: _native.SimEnv) -> tuple[gym.spaces.Box, gym.spaces.Space]:
    if env.masked:
        obs = gym.spaces.Box(-1.0, 1.0, shape=(2 * env.obs_dim,), dtype=np.float32)
    else:
        obs = gym.spaces.Box(-np.inf, np.inf, shape=(env.obs_dim,), dtype=np.float32)
    act: gym.spaces.Space
    if env.n_actions is not None:
        act = gym.spaces.Discrete(env.n_actions)
    else:
        act = gym.spaces.Box(
            np.asarray(env.act_low, dtype=np.float32),
            np.asarray(env.act_high, dtype=np.float32),
            dtype=np.float32,
        )
    return obs, act


def _observation(out: tuple, masked: bool) -> np.ndarray:
    """The policy's observation from a ``SimEnv`` step tuple: ``obs``, or for a masked
    algorithm (``with_mask=True``, the mask last) ``concat(obs * mask, mask)`` per learner."""
    if not masked:
        return out[0]
    obs, mask = out[0], out[5]
    return np.concatenate([obs * mask, mask], axis=-1).astype(np.float32)


def _actions(a: Any, n: int) -> np.ndarray:
    """``n`` learners' actions as the ``SimEnv`` takes them (a discrete index as its float)."""
    return np.asarray(a, dtype=np.float32).reshape(n, -1)


class CcpEnv(gym.Env):
    """One learning flow of `alg` per episode (other flows: `ranges.competitors`).

    A step ends at the flow's next decision (its core says when: e.g. Nuwa not in slow
    start). `max_steps`: the episode is truncated after that many decisions (Nuwa-RL's
    800-step episodes; None: when the scenario's time is up). `reward`: ``"last"``, the
    core's reward of the report the decision came with, or ``"mean"``, the mean of the
    core's rewards over every report since the action (``SimEnv.span_rewards``: reports
    without a decision included). `reward_in_capacity`: the core's reward with the flow's rate
    in units of what the bottleneck offered over each report (``SimEnv``'s flag).
    `algs_toml`: the `[algs.*]` tables of every episode, or a function drawing them per
    episode from the env's seeded generator (after the scenario).

    info carries the raw figures: simulated time, and at the scenario's end the simulator's
    results (throughput, utilization, delays, losses per flow).
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        alg: str = "mocc",
        ranges: ScenarioRanges | None = None,
        seed: int | None = None,
        algs_toml: str | Callable[[random.Random], str | None] | None = None,
        max_steps: int | None = None,
        reward: str = "last",
        reward_in_capacity: bool = False,
    ) -> None:
        if reward not in ("last", "mean"):
            raise ValueError(f"reward = {reward!r}: expected \"last\" or \"mean\"")
        if max_steps is not None and max_steps < 1:
            raise ValueError(f"max_steps = {max_steps}: expected a positive number or None")
        self.alg = alg
        self.ranges = ranges or ScenarioRanges()
        self._rng = random.Random(seed)
        self._algs_toml = algs_toml
        self.max_steps = max_steps
        self.reward_mode = reward
        self.reward_in_capacity = reward_in_capacity
        self._masked = bool(_native.spec(alg)["masked"])
        probe = self._make(self._rng)
        self.observation_space, self.action_space = _spaces(probe)
        self._env: _native.SimEnv | None = None
        self._steps = 0
        self._last_obs = np.zeros(self.observation_space.shape, dtype=np.float32)

    def _make(self, rng: random.Random) -> _native.SimEnv:
        ranges = ScenarioRanges(**{**self.ranges.__dict__, "learners": (1, 1)})
        scenario = ranges.sample(rng, self.alg)
        algs = self._algs_toml(rng) if callable(self._algs_toml) else self._algs_toml
        return _native.SimEnv(scenario, self.alg, algs_toml=algs, with_mask=self._masked,
                              reward_in_capacity=self.reward_in_capacity)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:
            self._rng = random.Random(seed)
        self._env = self._make(self._rng)
        self._steps = 0
        self._results: dict[str, Any] | None = None
        out = self._env.reset()
        done, t = out[3], out[4]
        obs = _observation(out, self._masked)
        self._last_obs = obs[0]
        return obs[0], {"sim_time_s": t, "done_at_reset": done}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        assert self._env is not None, "call reset() first"
        out = self._env.step(_actions(action, 1))
        self._steps += 1
        rew, active, done, t = out[1:5]
        reward = float(rew[0])
        if self.reward_mode == "mean":
            sums, counts = self._env.span_rewards()
            if counts[0] > 0:
                reward = float(sums[0] / counts[0])
        obs = _observation(out, self._masked)
        info: dict[str, Any] = {"sim_time_s": t, "active": bool(active[0])}
        if done:
            # once per episode (a step after the end returns the same figures)
            if self._results is None:
                self._results = self._env.results()
            info["results"] = self._results
        self._last_obs = obs[0]
        truncated = bool(done) or (self.max_steps is not None and self._steps >= self.max_steps)
        return obs[0], reward, False, truncated, info


class CcpVecEnv(VecEnv):
    """Learning flows of one bottleneck as SB3 sub-environments, sharing one policy.

    `num_envs` = `ranges.learners` (fixed: both ends of the range must agree). When the
    scenario ends every sub-environment is done and a new scenario starts (SB3's auto-reset
    convention: the returned observation is the new episode's first, the last one is in
    `infos[i]["terminal_observation"]`). Learners that have not started yet, or have
    stopped, return zero observations and rewards and `infos[i]["active"] = False`.
    """

    def __init__(
        self,
        alg: str = "mocc",
        ranges: ScenarioRanges | None = None,
        seed: int | None = None,
        algs_toml: str | Callable[[random.Random], str | None] | None = None,
        max_steps: int | None = None,
        reward: str = "last",
        reward_in_capacity: bool = False,
    ) -> None:
        """`algs_toml`: `[algs.<name>]` tables for every episode, or a function drawing them
        per episode from the env's seeded generator (after the scenario). `max_steps`,
        `reward`, `reward_in_capacity`: as :class:`CcpEnv`'s (a step is one decision of every
        active learner; ``"mean"`` is each learner's mean over its reports since its action)."""
        if reward not in ("last", "mean"):
            raise ValueError(f"reward = {reward!r}: expected \"last\" or \"mean\"")
        if max_steps is not None and max_steps < 1:
            raise ValueError(f"max_steps = {max_steps}: expected a positive number or None")
        self.max_steps = max_steps
        self.reward_mode = reward
        self.reward_in_capacity = reward_in_capacity
        self._steps = 0
        self.alg = alg
        self.ranges = ranges or ScenarioRanges(learners=(2, 2))
        if self.ranges.learners[0] != self.ranges.learners[1]:
            raise ValueError("CcpVecEnv needs a fixed number of learners: learners=(n, n)")
        self._rng = random.Random(seed)
        self._algs_toml = algs_toml
        self._masked = bool(_native.spec(alg)["masked"])
        self._env = self._make()
        obs_space, act_space = _spaces(self._env)
        super().__init__(self.ranges.learners[0], obs_space, act_space)
        self._actions: np.ndarray | None = None

    def _make(self) -> _native.SimEnv:
        scenario = self.ranges.sample(self._rng, self.alg)
        algs = self._algs_toml(self._rng) if callable(self._algs_toml) else self._algs_toml
        return _native.SimEnv(scenario, self.alg, algs_toml=algs, with_mask=self._masked,
                              reward_in_capacity=self.reward_in_capacity)

    def reset(self) -> np.ndarray:
        self._env = self._make()
        self._steps = 0
        return _observation(self._env.reset(), self._masked)

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = _actions(actions, self.num_envs)

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        assert self._actions is not None, "step_async first"
        out = self._env.step(self._actions)
        self._steps += 1
        rew, active, done, t = out[1:5]
        rew = np.asarray(rew, dtype=np.float64).copy()
        if self.reward_mode == "mean":
            sums, counts = self._env.span_rewards()
            spans = np.asarray(counts) > 0
            rew[spans] = np.asarray(sums)[spans] / np.asarray(counts)[spans]
        obs = _observation(out, self._masked)
        infos: list[dict[str, Any]] = [
            {"sim_time_s": t, "active": bool(a)} for a in active
        ]
        sim_done = bool(done)
        done = sim_done or (self.max_steps is not None and self._steps >= self.max_steps)
        dones = np.full(self.num_envs, done)
        if done:
            # the simulator's figures only once its scenario is over (not at a truncation)
            results = self._env.results() if sim_done else None
            for i in range(self.num_envs):
                infos[i]["terminal_observation"] = obs[i].copy()
                infos[i]["TimeLimit.truncated"] = True
                if results is not None:
                    infos[i]["results"] = results
            obs = self.reset()
        return obs, rew.astype(np.float32), dones, infos

    def close(self) -> None:
        pass

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        return [getattr(self, attr_name)] * self.num_envs

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        setattr(self, attr_name, value)

    def env_method(
        self, method_name: str, *args: Any, indices: Any = None, **kwargs: Any
    ) -> list[Any]:
        return [getattr(self, method_name)(*args, **kwargs)] * self.num_envs

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        return [False] * self.num_envs

    def seed(self, seed: int | None = None) -> list[int | None]:
        self._rng = random.Random(seed)
        return [seed] * self.num_envs


class ConcatVecEnv(VecEnv):
    """Several ``VecEnv`` side by side as one: e.g. single-flow episodes beside a bottleneck
    shared by several learners, for a learner (RecurrentPPO's) that takes one ``VecEnv``. Each
    part keeps its own auto-reset; the sub-environments are numbered part after part. The
    parts must agree on the spaces."""

    def __init__(self, parts: list[VecEnv]) -> None:
        if not parts:
            raise ValueError("ConcatVecEnv needs at least one part")
        first = parts[0]
        for p in parts[1:]:
            if p.observation_space != first.observation_space or \
                    p.action_space != first.action_space:
                raise ValueError("ConcatVecEnv: the parts' spaces differ")
        self.parts = parts
        self._bounds = np.cumsum([0] + [p.num_envs for p in parts])
        super().__init__(int(self._bounds[-1]), first.observation_space, first.action_space)

    def reset(self) -> np.ndarray:
        return np.concatenate([p.reset() for p in self.parts])

    def step_async(self, actions: np.ndarray) -> None:
        for p, lo, hi in zip(self.parts, self._bounds[:-1], self._bounds[1:], strict=True):
            p.step_async(actions[lo:hi])

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        obs, rews, dones, infos = [], [], [], []
        for p in self.parts:
            o, r, d, i = p.step_wait()
            obs.append(o)
            rews.append(np.asarray(r, dtype=np.float32))
            dones.append(np.asarray(d, dtype=bool))
            infos.extend(i)
        return np.concatenate(obs), np.concatenate(rews), np.concatenate(dones), infos

    def close(self) -> None:
        for p in self.parts:
            p.close()

    def _part_indices(self, indices: Any) -> list[tuple[VecEnv, list[int]]]:
        wanted = range(self.num_envs) if indices is None else (
            [indices] if isinstance(indices, int) else list(indices))
        out: list[tuple[VecEnv, list[int]]] = []
        for p, lo, hi in zip(self.parts, self._bounds[:-1], self._bounds[1:], strict=True):
            mine = [int(i - lo) for i in wanted if lo <= i < hi]
            if mine:
                out.append((p, mine))
        return out

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        return [v for p, ix in self._part_indices(indices) for v in p.get_attr(attr_name, ix)]

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        for p, ix in self._part_indices(indices):
            p.set_attr(attr_name, value, ix)

    def env_method(
        self, method_name: str, *args: Any, indices: Any = None, **kwargs: Any
    ) -> list[Any]:
        return [v for p, ix in self._part_indices(indices)
                for v in p.env_method(method_name, *args, indices=ix, **kwargs)]

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        return [v for p, ix in self._part_indices(indices)
                for v in p.env_is_wrapped(wrapper_class, ix)]

    def seed(self, seed: int | None = None) -> list[int | None]:
        out: list[int | None] = []
        for k, p in enumerate(self.parts):
            out.extend(p.seed(None if seed is None else seed + 1000 * k))
        return out
