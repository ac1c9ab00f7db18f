"""Vectorised rollouts over the simulator, in this process, in worker processes or on Ray.

A *slot* is one simulator environment (``_native.SimEnv``) with its own seeded generator: it
draws its episodes from an :class:`~ccp_train.scenarios.Episodes` (a new one at every end:
auto-reset, the terminal observation returned beside the next episode's first), or runs one
fixed scenario (evaluation). A *pool* hosts slots and calls their methods in batches:

- :class:`SerialPool`: in this process;
- :class:`ProcessPool`: ``workers`` processes (``spawn``), slots spread over them;
- :class:`RayPool`: Ray actors (``--ray ADDRESS``: ``local`` starts a cluster on this machine,
  ``auto`` or ``ray://host:10001`` joins one; every node needs this package).

Each slot's episodes depend only on its seed and the actions it is given, so the backend and
the worker count never change the transitions: one seed gives the same data serially, in
processes or on Ray. :class:`Lockstep` steps several slots together as one batch of rows (one
row per learning flow; ``active`` per row comes from Rust: the learner has a decision to make).
This module imports no torch, so workers start light.
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import random
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ccp_train import _native
from ccp_train.scenarios import Episodes

#: per learning flow at an episode's end (the simulator's results for the flow)
FLOW_FIGURES = ("throughput_mbps", "utilization", "queue_delay_p95_ms", "loss_rate")


def _num(v: float | None) -> float:
    """A figure from the simulator's JSON results: NaN (no sample) arrives as null."""
    return float("nan") if v is None else float(v)


@dataclasses.dataclass(frozen=True)
class SlotSpec:
    """One slot: episodes drawn from `episodes` with generator `seed`, or the one `scenario`
    (with `algs_toml` and default preference `w`)."""

    alg: str
    seed: int = 0
    episodes: Episodes | None = None
    scenario: str | None = None
    algs_toml: str | None = None
    w: str | None = None


#: what a slot's step returns: obs, rewards, active, done, terminal obs (done only), the
#: learners' figures (done only)
Step = tuple[np.ndarray, np.ndarray, np.ndarray, bool, "np.ndarray | None", "list | None"]


class Slot:
    """One simulator environment (see the module doc)."""

    def __init__(self, spec: SlotSpec) -> None:
        self.spec = spec
        self.episodes = spec.episodes
        self.rng = random.Random(spec.seed)
        self.env: Any = None

    def set_episodes(self, episodes: Episodes) -> None:
        self.episodes = episodes

    def reset(self) -> tuple[np.ndarray, np.ndarray, bool]:
        s = self.spec
        if s.scenario is not None:
            scenario, algs = s.scenario, s.algs_toml
        else:
            assert self.episodes is not None, "a slot needs episodes or a scenario"
            scenario, algs = self.episodes.draw(self.rng)
        self.env = _native.SimEnv(scenario, s.alg, w=s.w, algs_toml=algs)
        obs, _, active, done, _ = self.env.reset()
        return obs, active, bool(done)

    def step(self, actions: np.ndarray) -> Step:
        obs, rew, active, done, _ = self.env.step(np.asarray(actions, dtype=np.float32))
        if not done:
            return obs, rew, active, False, None, None
        flows = self.results()
        term = obs
        if self.spec.scenario is None:
            obs, active, _ = self.reset()
        return obs, rew, active, True, term, flows

    def results(self) -> list[dict[str, float]]:
        """The learning flows' figures of the finished episode."""
        res = self.env.results()
        return [{k: _num(f.get(k)) for k in FLOW_FIGURES}
                for f in res["flows"] if f["alg"] == self.spec.alg]


class _Slots:
    """Slots by id: what a pool, a worker process and a Ray actor each hold."""

    def __init__(self) -> None:
        self.slots: dict[int, Slot] = {}

    def add(self, specs: Mapping[int, SlotSpec]) -> None:
        for i, s in specs.items():
            self.slots[i] = Slot(s)

    def remove(self, ids: Sequence[int]) -> None:
        for i in ids:
            self.slots.pop(i, None)

    def call(self, method: str, args: Mapping[int, tuple]) -> dict[int, Any]:
        return {i: getattr(self.slots[i], method)(*a) for i, a in args.items()}


class Pool:
    """Hosts slots; subclasses decide where."""

    def __init__(self) -> None:
        self._next = 0

    def add(self, specs: Sequence[SlotSpec]) -> list[int]:
        ids = list(range(self._next, self._next + len(specs)))
        self._next += len(specs)
        self._add(dict(zip(ids, specs, strict=True)))
        return ids

    def _add(self, specs: dict[int, SlotSpec]) -> None:
        raise NotImplementedError

    def call(self, method: str, args: Mapping[int, tuple]) -> dict[int, Any]:
        raise NotImplementedError

    def remove(self, ids: Sequence[int]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SerialPool(Pool):
    """Every slot in this process."""

    def __init__(self) -> None:
        super().__init__()
        self.local = _Slots()

    def _add(self, specs: dict[int, SlotSpec]) -> None:
        self.local.add(specs)

    def call(self, method: str, args: Mapping[int, tuple]) -> dict[int, Any]:
        return self.local.call(method, args)

    def remove(self, ids: Sequence[int]) -> None:
        self.local.remove(ids)


class _Sharded(Pool):
    """Slots spread over workers (each new slot to the least loaded); one call fans out to
    every worker concerned and gathers their answers."""

    def __init__(self, workers: int) -> None:
        super().__init__()
        self.n = max(1, int(workers))
        self.owner: dict[int, int] = {}
        self.load = [0] * self.n

    def _add(self, specs: dict[int, SlotSpec]) -> None:
        per: dict[int, dict[int, SlotSpec]] = {}
        for i, s in specs.items():
            w = min(range(self.n), key=lambda k: (self.load[k], k))
            self.owner[i] = w
            self.load[w] += 1
            per.setdefault(w, {})[i] = s
        self._fan("add", {w: (sub,) for w, sub in per.items()})

    def call(self, method: str, args: Mapping[int, tuple]) -> dict[int, Any]:
        per: dict[int, dict[int, tuple]] = {}
        for i, a in args.items():
            per.setdefault(self.owner[i], {})[i] = a
        out: dict[int, Any] = {}
        for part in self._fan("call", {w: (method, sub) for w, sub in per.items()}).values():
            out.update(part)
        return out

    def remove(self, ids: Sequence[int]) -> None:
        per: dict[int, list[int]] = {}
        for i in ids:
            w = self.owner.pop(i)
            self.load[w] -= 1
            per.setdefault(w, []).append(i)
        self._fan("remove", {w: (sub,) for w, sub in per.items()})

    def _fan(self, op: str, per_worker: dict[int, tuple]) -> dict[int, Any]:
        raise NotImplementedError


def _serve(conn: Any) -> None:
    """A worker process: `_Slots` behind a pipe."""
    slots = _Slots()
    while True:
        msg = conn.recv()
        if msg is None:
            break
        op, args = msg
        try:
            conn.send(("ok", getattr(slots, op)(*args)))
        except Exception:  # the trainer re-raises it with the worker's traceback
            conn.send(("error", traceback.format_exc()))


class ProcessPool(_Sharded):
    """Slots in `workers` local processes (``spawn``: no state inherited but the arguments)."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        ctx = mp.get_context("spawn")
        self.conns = []
        self.procs = []
        for _ in range(self.n):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_serve, args=(child,), daemon=True)
            p.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(p)

    def _fan(self, op: str, per_worker: dict[int, tuple]) -> dict[int, Any]:
        for w, args in per_worker.items():
            self.conns[w].send((op, args))
        out = {}
        for w in per_worker:
            status, value = self.conns[w].recv()
            if status != "ok":
                raise RuntimeError(f"rollout worker {w} failed:\n{value}")
            out[w] = value
        return out

    def close(self) -> None:
        for c in self.conns:
            try:
                c.send(None)
            except (BrokenPipeError, OSError):
                pass
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
        self.conns, self.procs = [], []


class RayPool(_Sharded):
    """Slots in `workers` Ray actors (one CPU each) on the cluster at `address`."""

    def __init__(self, workers: int, address: str) -> None:
        try:
            import ray
        except ImportError as e:  # pragma: no cover
            raise RuntimeError("--ray needs the `ray` package (pip install ray)") from e
        super().__init__(workers)
        self.ray = ray
        self.owned = not ray.is_initialized()
        if self.owned:
            if address == "local":
                ray.init(num_cpus=max(self.n, os.cpu_count() or 1), include_dashboard=False,
                         log_to_driver=False)
            else:
                ray.init(address=address, log_to_driver=False)
        actor = ray.remote(num_cpus=1)(_Slots)
        self.actors = [actor.remote() for _ in range(self.n)]

    def _fan(self, op: str, per_worker: dict[int, tuple]) -> dict[int, Any]:
        futures = {w: getattr(self.actors[w], op).remote(*a) for w, a in per_worker.items()}
        return dict(zip(futures, self.ray.get(list(futures.values())), strict=True))

    def close(self) -> None:
        for a in self.actors:
            self.ray.kill(a)
        self.actors = []
        if self.owned:
            self.ray.shutdown()
            self.owned = False


def make_pool(workers: int = 0, ray: str | None = None) -> Pool:
    """`ray` set: Ray actors (`workers` of them, default the machine's cores); else `workers`
    local processes; 0: this process."""
    if ray:
        return RayPool(workers or os.cpu_count() or 1, ray)
    if workers > 0:
        return ProcessPool(workers)
    return SerialPool()


@dataclasses.dataclass
class Batch:
    """One lockstep step over every row."""

    obs: np.ndarray
    rewards: np.ndarray
    active: np.ndarray
    done: np.ndarray
    #: the rows' last observations where `done` (else the next ones)
    terminal: np.ndarray
    #: the learning flows' figures of every episode that ended in this step
    finished: list[dict[str, float]]


class Lockstep:
    """Slots with `sizes[k]` learners each, stepped together: rows = their learners,
    concatenated. Slot k's generator is seeded `seed + 7919 k`."""

    def __init__(self, pool: Pool, episodes: Episodes, sizes: Sequence[int], seed: int,
                 obs_dim: int) -> None:
        self.pool = pool
        self.sizes = [int(n) for n in sizes]
        self.num_rows = sum(self.sizes)
        self.obs_dim = obs_dim
        self.episodes = episodes
        self.ids = pool.add([
            SlotSpec(episodes.alg, seed + 7919 * k, self._sized(episodes, n))
            for k, n in enumerate(self.sizes)])
        self.obs = np.zeros((self.num_rows, obs_dim), dtype=np.float32)
        self.active = np.zeros(self.num_rows, dtype=bool)

    @staticmethod
    def _sized(episodes: Episodes, n: int) -> Episodes:
        return episodes.with_ranges(learners=(n, n))

    def set_episodes(self, episodes: Episodes) -> None:
        """New episodes come from `episodes` (e.g. another objective); call `reset` to start."""
        self.episodes = episodes
        self.pool.call("set_episodes", {i: (self._sized(episodes, n),)
                                        for i, n in zip(self.ids, self.sizes, strict=True)})

    def reset(self) -> tuple[np.ndarray, np.ndarray]:
        """Start a new episode on every slot (an unfinished one is dropped)."""
        res = self.pool.call("reset", {i: () for i in self.ids})
        self.obs = np.concatenate([res[i][0] for i in self.ids]).astype(np.float32)
        self.active = np.concatenate([res[i][1] for i in self.ids]).astype(bool)
        return self.obs, self.active

    def step(self, actions: np.ndarray) -> Batch:
        args, k = {}, 0
        for i, n in zip(self.ids, self.sizes, strict=True):
            args[i] = (actions[k:k + n],)
            k += n
        res = self.pool.call("step", args)
        obs, rew, act, done, term, fin = [], [], [], [], [], []
        for i, n in zip(self.ids, self.sizes, strict=True):
            o, r, a, d, t, flows = res[i]
            obs.append(o)
            rew.append(r)
            act.append(a)
            done.append(np.full(n, d))
            term.append(t if d else o)
            fin.extend(flows or [])
        self.obs = np.concatenate(obs).astype(np.float32)
        self.active = np.concatenate(act).astype(bool)
        return Batch(self.obs, np.concatenate(rew).astype(np.float64), self.active,
                     np.concatenate(done), np.concatenate(term).astype(np.float32), fin)

    def close(self) -> None:
        self.pool.remove(self.ids)


def run_fixed(pool: Pool, alg: str, runs: Sequence[tuple[str, str | None, str | None]],
              act: Callable[[np.ndarray], np.ndarray]) -> list[dict[str, float]]:
    """Each ``(scenario, w, algs_toml)`` once with the deterministic policy `act` (a batch of
    observations -> actions), all in lockstep with batched inference. Per run: the mean
    per-step reward of its first learner and that learner's figures."""
    ids = pool.add([SlotSpec(alg, scenario=s, w=w, algs_toml=t) for s, w, t in runs])
    try:
        first = pool.call("reset", {i: () for i in ids})
        obs = {i: first[i][0][0] for i in ids}
        total = dict.fromkeys(ids, 0.0)
        steps = dict.fromkeys(ids, 0)
        flows: dict[int, list] = {}
        ended = [i for i in ids if first[i][2]]
        flows.update(pool.call("results", {i: () for i in ended}))
        alive = [i for i in ids if not first[i][2]]
        while alive:
            a = act(np.stack([obs[i] for i in alive]))
            res = pool.call("step", {i: (a[j:j + 1],) for j, i in enumerate(alive)})
            for i in alive:
                o, r, _, d, _, f = res[i]
                total[i] += float(r[0])
                steps[i] += 1
                obs[i] = o[0]
                if d:
                    flows[i] = f
            alive = [i for i in alive if i not in flows]
    finally:
        pool.remove(ids)
    return [{"reward": total[i] / max(steps[i], 1), **flows[i][0]} for i in ids]
