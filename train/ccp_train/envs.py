"""Gymnasium and Stable-Baselines3 environments over the Rust simulator.

`CcpEnv` is a single-learner `gymnasium.Env`; `CcpVecEnv` is a Stable-Baselines3 `VecEnv`
whose sub-environments are the learning flows of one shared bottleneck (several learners,
one shared policy — what Jury and MOCC train for fairness). Observations, actions and
rewards are the learned algorithm's own, computed by the same Rust code the agent runs
(`algs/src/<alg>.rs`): features of each report, the paper's action space, the paper's
reward. Every episode draws a scenario from a `ScenarioRanges`, seeded.
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


def _spaces(env: _native.SimEnv) -> tuple[gym.spaces.Box, gym.spaces.Box]:
    obs = gym.spaces.Box(-np.inf, np.inf, shape=(env.obs_dim,), dtype=np.float32)
    act = gym.spaces.Box(
        np.asarray(env.act_low, dtype=np.float32),
        np.asarray(env.act_high, dtype=np.float32),
        dtype=np.float32,
    )
    return obs, act


class CcpEnv(gym.Env):
    """One learning flow of `alg` per episode (other flows: `ranges.competitors`).

    info carries the raw figures: simulated time, and at episode end the simulator's
    results (throughput, utilization, delays, losses per flow).
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        alg: str = "mocc",
        ranges: ScenarioRanges | None = None,
        seed: int | None = None,
        algs_toml: str | None = None,
    ) -> None:
        self.alg = alg
        self.ranges = ranges or ScenarioRanges()
        self._rng = random.Random(seed)
        self._algs_toml = algs_toml
        probe = self._make(self._rng)
        self.observation_space, self.action_space = _spaces(probe)
        self._env: _native.SimEnv | None = None
        self._last_obs = np.zeros(self.observation_space.shape, dtype=np.float32)

    def _make(self, rng: random.Random) -> _native.SimEnv:
        ranges = ScenarioRanges(**{**self.ranges.__dict__, "learners": (1, 1)})
        return _native.SimEnv(ranges.sample(rng, self.alg), self.alg, algs_toml=self._algs_toml)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:
            self._rng = random.Random(seed)
        self._env = self._make(self._rng)
        obs, _, _, done, t = self._env.reset()
        self._last_obs = obs[0]
        return obs[0], {"sim_time_s": t, "done_at_reset": done}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        assert self._env is not None, "call reset() first"
        a = np.asarray(action, dtype=np.float32).reshape(1, -1)
        obs, rew, active, done, t = self._env.step(a)
        info: dict[str, Any] = {"sim_time_s": t, "active": bool(active[0])}
        if done:
            info["results"] = self._env.results()
        self._last_obs = obs[0]
        return obs[0], float(rew[0]), False, bool(done), info


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
    ) -> None:
        """`algs_toml`: `[algs.<name>]` tables for every episode, or a function drawing them
        per episode from the env's seeded generator (after the scenario)."""
        self.alg = alg
        self.ranges = ranges or ScenarioRanges(learners=(2, 2))
        if self.ranges.learners[0] != self.ranges.learners[1]:
            raise ValueError("CcpVecEnv needs a fixed number of learners: learners=(n, n)")
        self._rng = random.Random(seed)
        self._algs_toml = algs_toml
        self._env = self._make()
        obs_space, act_space = _spaces(self._env)
        super().__init__(self.ranges.learners[0], obs_space, act_space)
        self._actions: np.ndarray | None = None

    def _make(self) -> _native.SimEnv:
        scenario = self.ranges.sample(self._rng, self.alg)
        algs = self._algs_toml(self._rng) if callable(self._algs_toml) else self._algs_toml
        return _native.SimEnv(scenario, self.alg, algs_toml=algs)

    def reset(self) -> np.ndarray:
        self._env = self._make()
        obs, *_ = self._env.reset()
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions, dtype=np.float32).reshape(self.num_envs, -1)

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        assert self._actions is not None, "step_async first"
        obs, rew, active, done, t = self._env.step(self._actions)
        infos: list[dict[str, Any]] = [
            {"sim_time_s": t, "active": bool(a)} for a in active
        ]
        dones = np.full(self.num_envs, bool(done))
        if done:
            results = self._env.results()
            for i in range(self.num_envs):
                infos[i]["terminal_observation"] = obs[i].copy()
                infos[i]["TimeLimit.truncated"] = True
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
