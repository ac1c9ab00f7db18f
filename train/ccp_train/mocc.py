"""MOCC training: PPO with a preference sub-network, two-phase landmark training, requirement
replay for online adaptation (mocc.txt §4-5). One file in the CleanRL spirit: every
hyperparameter is a flag, runs are fully seeded, scalars are logged per iteration.

    python -m ccp_train.mocc train [--out models] [--seed 1] [--log FILE] ...
    python -m ccp_train.mocc adapt --w 0.5,0.2,0.3 [--model models/mocc.onnx] --out DIR ...

(from ``train/`` or with the package installed; ``--help`` lists every flag and its default).

Environment. ``CcpVecEnv`` over the Rust simulator: the observation is the agent's own
(``algs/src/mocc.rs``, feature_version 1): 33 floats = 10 monitor intervals x (sending ratio,
latency ratio, latency gradient), oldest first, then the preference ``w`` at [30:33]; one
action in [-5, 5]; the reward is eq. 2 under the flow's ``w``. Several vector envs run in
lockstep (``--learners 1,1,2,3``: one env per entry, that many MOCC learners sharing one
bottleneck), so some episodes have competing MOCC flows; with probability ``--mixed-w`` each
learner after the first carries a random landmark instead of the phase's objective (flows with
different objectives must learn to share: a policy that only ever met its own kind reads every
queue as its own and starves behind a throughput-seeking neighbour). Scenarios widen Table 3
(1-5 Mbit/s, 10-50 ms, loss 0-3 %) to 1-8 Mbit/s and 10-200 ms, 10-20 s episodes (a 200 ms
path needs seconds to start up, drain and settle); the buffer is drawn log-uniformly in BDP
multiples (0.1-1000 BDP: about 0.1 to 130 000 packets, covering the paper's 0-3000 packets). A
quarter of the episodes (``--trace-prob``) replace the constant rate by a cellular trace (ATT LTE,
T-Mobile UMTS; capacity scaled 0.5-2x): a varying capacity is where throughput and latency
really trade off, so where the preference must show. The acceptance links (10-50 Mbit/s) and
the T-Mobile LTE trace (16.7 Mbit/s mean) stay outside these ranges.
Half of the episodes (``--policy-start-prob``) skip start-up: the policy starts at a rate drawn
log-uniformly from 0.2-10 Mbit/s (MOCC's ``initial_rate_mbps`` knob). After start-up the policy
always begins at the capacity estimate, so without these episodes it would rarely see an
uncongested path below capacity, which looks exactly like one at capacity (every feature is
neutral): it learns to drift down there and starves, above all under a latency-heavy ``w``.
MOCC's additive increase (``--additive-increase-pkts``/``-cap``, ``algs/src/mocc.rs``
"Fairness") changes the dynamics the policy learns, so it is set in every training and
evaluation episode and recorded in the card (``mocc_knobs``); unset, it is the agent's default
(0.1 packet per RTT, only on decisions with ``a >= 0``: ``--additive-increase-min-action``).
``--additive-increase-range`` draws it per training episode instead.
A learner row is *active* while its observation carries a preference (rows of flows that
have not started are all zeros); inactive rows are masked out of the loss.

Networks (§4.1, §5). Actor and critic are separate towers of the same shape:
``w = obs[30:33] -> PreferenceNet (Linear 3->16, tanh, Linear 16->16, tanh)``; its output is
concatenated with the network state ``obs[0:30]`` -> Linear 64, tanh -> Linear 32, tanh ->
Linear 1. The actor's output is the mean of a Gaussian with a state-independent learned log
std (stable-baselines' ``gaussian_fixed_var``, the paper's PPO implementation). The critic also
sees two inputs the policy never does (an asymmetric actor-critic; our choice, the paper is
silent): the learner's last reward and its moving average over about 10 MIs. The policy's
features are ratios, so a flow at a third of the capacity and one at the capacity look alike
(l = 1, p = 1, q = 0); a critic that cannot tell them apart gives the same value to both, and
the long-run gain of a higher rate never reaches the advantages (the policy then drifts down
and starves under a latency-heavy w). The reward, given w, carries O_thr. The critic's
output is scaled by 1/(1-gamma) (the value of a reward in [0, 1] lies in [0, 1/(1-gamma)], so the
network works on O(1) numbers; the value loss is taken on that scale). Exploration samples the
Gaussian, the env gets the sample clipped to [-5, 5], the log-probability is the unclipped
sample's. The exported policy is the deterministic mean (``obs`` [-1, 33] -> ``action``
[-1, 1]); the runtime clips it to the card's bounds.

PPO (eq. 3-5). Clipped surrogate (clip 0.2), GAE(lambda), Adam lr 1e-3, advantages normalized
per minibatch, value loss (optionally clipped) on the 1/(1-gamma) scale, gradient norms clipped
separately for actor and critic (one joint clip would let the critic's gradient scale the
actor's). Time-limit ends of episodes are truncations: the last reward is bootstrapped with the
value of the terminal observation. Entropy coefficient: the paper decays beta from 1 to 0.1 over
1000 iterations; the flags keep that schedule (``--ent-start 1 --ent-end 0.1
--ent-decay-iters 1000``) and multiply it by ``--ent-scale`` (default 0.01, stable-baselines
PPO1's ``entcoeff``, the implementation the paper used). Reason: for a Gaussian with a free log
std, the entropy bonus has gradient beta on log std whatever the reward scale, while the policy
gradient with normalized advantages is O(0.1); beta = 1 makes the std grow without bound and the
rate a random walk. The effective coefficient thus goes 0.01 -> 0.001; ``--ent-scale 1`` gives
the paper's literal numbers.

Two phases (§4.2). Bootstrap: ``--bootstrap-iters`` iterations over <0.6,0.3,0.1>,
<0.1,0.6,0.3>, <0.3,0.1,0.6>, round-robin (``--bootstrap-switch`` iterations each turn). Fast
traversing: the 36 landmarks (step 1/10, no zero weight) in the order of Algorithm 1, ``--iters-
per-landmark`` iterations each, cycling. After each cycle the deterministic policy is evaluated
per landmark on a fixed held-out scenario set (``--conv-scenarios``); a landmark has converged
when its reward changed by at most ``--conv-tol`` (relative) from one cycle to the next for
``--conv-patience`` consecutive cycles; training stops when all have (after ``--min-cycles``),
or after ``--max-cycles``. Switching objective resets the envs (the scenario's flows carry the
new ``w``; an unfinished episode is dropped, its last value bootstraps).

Algorithm 1, as read here: vertices are the landmarks, edges join vectors that differ in two
components by one step (the paper's "at most two dimensions, by less than the step size" — its
own examples differ by exactly one step). For bootstrap vertex O[i] the distances start at 1 for
O[i]'s neighbours (the pseudocode's d[i]), O[i] itself is appended, then ceil(|V|/|O|) - 1
Dijkstra extractions grow O[i]'s region; ties go to a neighbour of the last appended landmark,
then to the lexicographically smallest (the paper leaves ties open; this keeps consecutive
landmarks neighbours where the graph allows).

Online adaptation (§4.3, eq. 6). ``adapt`` loads the torch checkpoint written next to the ONNX
model (``models/mocc.pt``; its recorded ONNX sha256 must match the model), trains on the new
``w`` and, with requirement replay (default), each update minimizes
1/2 [L(w_new) + L(w_old)], w_old drawn uniformly per iteration from the stored objectives (the
36 landmarks plus every objective adapted to before). L(w_old) needs rewards under w_old: the
simulator only returns the reward under the flow's own w, so w_old gets its own rollout of the
same length (separate envs whose flows carry w_old) — fresh on-policy samples, nothing
recomputed. Minibatches pair one chunk of each rollout. It reports the wall time and iterations
to reach 99 % of the best reward on the new objective (deterministic policy, fixed held-out
scenarios, evaluated before adaptation and after every iteration; wall time counts training
only), and the held-out reward on an old objective before and after (%). ``--no-replay`` is
plain fine-tuning, for comparison.

Outputs (``--out``): ``mocc.onnx`` + ``mocc.json`` (card: command, seed, steps, wall time,
scenario ranges, per-landmark evaluation), ``mocc.pt`` (torch checkpoint for ``adapt``),
``mocc.resume.pt`` (weights after each cycle, for ``--init``), and the log
(``mocc.train.jsonl`` / ``mocc.adapt.jsonl`` unless ``--log``). Checkpoints store the command
that produced them; ``train --init CKPT`` writes ``<CKPT's command> && <its own>`` into the
card, so a fine-tuned model's card still says how to rebuild it from scratch.
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
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.distributions import Normal

from ccp_train import card as _card
from ccp_train.export import export_torch
from ccp_train.rl import curves, determinism
from ccp_train.scenarios import ScenarioRanges

ALG = "mocc"
OBS_DIM = 33
STATE_DIM = 30  # obs[0:30]: 10 MIs x (l, p, q)
W_SLICE = slice(30, 33)  # obs[30:33]: the preference w
ACTION_BOUND = 5.0
#: the repository root when running from a checkout (editable install or PYTHONPATH=train)
REPO_ROOT = Path(__file__).resolve().parents[2]
#: training traces (repository-relative); TMobile-LTE-short.down is held out for evaluation
TRAIN_TRACES = (
    "datapath/sim/scenarios/traces/ATT-LTE-driving-2016.down",
    "datapath/sim/scenarios/traces/TMobile-UMTS-driving.down",
)
LOG_STD_BOUNDS = (-5.0, 2.0)
#: the critic's extra inputs: the learner's last reward and its moving average
CRITIC_EXTRA = 2
#: weight of the newest reward in that moving average (about 10 MIs)
REWARD_EMA = 0.1
CKPT_FORMAT = "ccp_train.mocc/1"

#: the paper's bootstrap objectives (§4.2)
BOOTSTRAP: tuple[tuple[float, float, float], ...] = (
    (0.6, 0.3, 0.1),
    (0.1, 0.6, 0.3),
    (0.3, 0.1, 0.6),
)

Pref = tuple[float, float, float]

# ---------------------------------------------------------------------------------------------
# Landmarks and Algorithm 1 ("fast traversing" order)
# ---------------------------------------------------------------------------------------------



def _num(v: float | None) -> float:
    """A figure from the simulator's JSON results: NaN (no sample) arrives as null."""
    return float("nan") if v is None else float(v)

def _steps(w: Sequence[float], den: int) -> tuple[int, int, int]:
    a, b, c = (round(x * den) for x in w)
    return a, b, c


def _pref(v: Sequence[int], den: int) -> Pref:
    a, b, c = (round(x / den, 10) for x in v)
    return a, b, c


def landmarks(den: int = 10) -> list[Pref]:
    """All w on the simplex with step 1/den and no zero component (36 for den = 10)."""
    out = []
    for a in range(1, den - 1):
        for b in range(1, den - a):
            c = den - a - b
            if c >= 1:
                out.append(_pref((a, b, c), den))
    return out


def are_neighbours(u: Sequence[float], v: Sequence[float], den: int = 10) -> bool:
    """Differ in at most two dimensions, each by at most one step (and are not equal)."""
    d = [abs(x - y) for x, y in zip(_steps(u, den), _steps(v, den), strict=True)]
    return 0 < sum(1 for x in d if x) <= 2 and max(d) <= 1


def traversal_order(
    points: Sequence[Pref], boot: Sequence[Pref] = BOOTSTRAP, den: int = 10
) -> list[Pref]:
    """Algorithm 1: the training order of `points` from the bootstrap vertices `boot`."""
    pts = [_steps(p, den) for p in points]
    idx = {p: i for i, p in enumerate(pts)}
    o = [idx[_steps(b, den)] for b in boot]
    n = len(pts)
    nbr = [
        [j for j in range(n) if are_neighbours(points[i], points[j], den)] for i in range(n)
    ]
    inf = math.inf
    d = [[1.0 if oi in nbr[v] else inf for oi in o] for v in range(n)]
    visited = [False] * n
    order: list[int] = []
    quota = math.ceil(n / len(o))
    for i, oi in enumerate(o):
        visits = quota
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
    if len(v) != 3 or any(not (0.0 <= x <= 1.0) for x in v) or abs(sum(v) - 1.0) > 1e-6:
        raise argparse.ArgumentTypeError(
            f"preference {text!r}: expected three weights in [0,1] summing to 1, e.g. 0.4,0.5,0.1"
        )
    return v[0], v[1], v[2]


def fmt_pref(w: Sequence[float]) -> str:
    return ",".join(f"{x:g}" for x in w)


# ---------------------------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class MoccRanges(ScenarioRanges):
    """`ScenarioRanges` with the buffer (in BDP) drawn log-uniformly when `buffer_log`."""

    buffer_log: bool = True
    #: probability that an episode skips start-up: every learner's policy starts at a rate
    #: drawn log-uniformly from `policy_start_mbps` (below or above the capacity)
    policy_start_prob: float = 0.0
    policy_start_mbps: tuple[float, float] = (0.2, 10.0)
    #: MOCC knobs that change the dynamics the policy learns (``MoccConfig`` fields, e.g. the
    #: additive increase), set in every episode, training and evaluation alike; empty: the
    #: agent's defaults
    knobs: tuple[tuple[str, float], ...] = ()
    #: training episodes draw the additive increase uniformly from this range instead of
    #: `knobs`' value (domain randomization); None: `knobs`' value
    additive_increase_range: tuple[float, float] | None = None

    def base_toml(self, overrides: dict[str, float] | None = None) -> str:
        """The ``[algs.mocc]`` table: `TRAINING_OFF`, then `knobs` (with `overrides`)."""
        knobs = {**TRAINING_OFF, **dict(self.knobs), **(overrides or {})}
        return "[algs.mocc]\n" + "".join(f"{k} = {v!r}\n" for k, v in knobs.items())

    def algs_toml(self, rng: random.Random) -> str:
        """MOCC's knobs for one training episode (drawn after its scenario): `knobs` (the
        additive increase drawn from its range, if any), and start-up or a random policy
        start."""
        over = {}
        if self.additive_increase_range is not None:
            lo, hi = self.additive_increase_range
            over["additive_increase_pkts"] = round(rng.uniform(lo, hi), 6)
        base = self.base_toml(over)
        if self.policy_start_prob <= 0 or rng.random() >= self.policy_start_prob:
            return base
        lo, hi = self.policy_start_mbps
        rate = math.exp(rng.uniform(math.log(lo), math.log(hi)))
        start = f"startup = false\ninitial_rate_mbps = {rate:.4f}\n"
        return base + start

    def sample(self, rng: random.Random, alg: str) -> str:
        lo, hi = self.buffer_bdp
        if self.buffer_log and lo > 0:
            b = math.exp(rng.uniform(math.log(lo), math.log(hi)))
        else:
            b = rng.uniform(lo, hi)
        base = {f.name: getattr(self, f.name) for f in dataclasses.fields(ScenarioRanges)}
        base["buffer_bdp"] = (b, b)
        return ScenarioRanges(**base).sample(rng, alg)

    def describe(self) -> dict[str, Any]:
        return {
            "duration_s": list(self.duration_s),
            "rate_mbps": list(self.rate_mbps),
            "rtt_ms": list(self.rtt_ms),
            "buffer_bdp": list(self.buffer_bdp),
            "buffer_dist": "log-uniform" if self.buffer_log else "uniform",
            "loss": list(self.loss),
            "stagger_s": list(self.stagger_s),
            "traces": [Path(t).name for t in self.traces],
            "trace_prob": self.trace_prob,
            "trace_scale": list(self.trace_scale),
            "mixed_w_prob": self.mixed_prob,
            "policy_start_prob": self.policy_start_prob,
            "policy_start_mbps": list(self.policy_start_mbps),
            "mocc_knobs": dict(self.knobs),
            "additive_increase_range": (
                list(self.additive_increase_range) if self.additive_increase_range else None
            ),
        }


def ranges_from_args(args: argparse.Namespace) -> MoccRanges:
    last_start = (max(args.learners) - 1) * args.stagger_s[1]
    if last_start >= args.duration_s[0]:
        raise SystemExit(
            f"--stagger-s {args.stagger_s[1]:g} with {max(args.learners)} learners starts the "
            f"last one at {last_start:g} s, not before the shortest episode "
            f"({args.duration_s[0]:g} s) ends: lower --stagger-s or raise --duration-s"
        )
    traces = []
    for t in (args.traces or "").split(","):
        if not t:
            continue
        # relative paths: the working directory, else the repository this file lives in
        found = next((c for c in (Path(t), REPO_ROOT / t) if c.is_file()), None)
        if found is None:
            raise SystemExit(
                f"--traces: {t} is not a file (relative paths resolve against the working "
                "directory or the repository root; --traces '' trains on constant-rate links "
                "only)"
            )
        traces.append(str(found.resolve()))
    if not all(0.0 <= p <= 1.0 for p in (args.trace_prob, args.mixed_w, args.policy_start_prob)):
        raise SystemExit(
            "--trace-prob, --mixed-w and --policy-start-prob are probabilities: give values "
            "in [0, 1]"
        )
    lo, hi = args.policy_start_mbps
    if not 0.0 < lo <= hi:
        raise SystemExit(f"--policy-start-mbps {lo:g},{hi:g}: expected 0 < low <= high")
    return MoccRanges(
        duration_s=args.duration_s,
        rate_mbps=args.rate_mbps,
        rtt_ms=args.rtt_ms,
        buffer_bdp=args.buffer_bdp,
        loss=args.loss,
        stagger_s=args.stagger_s,
        traces=traces,
        trace_prob=args.trace_prob if traces else 0.0,
        trace_scale=args.trace_scale,
        other_preferences=landmarks(),
        mixed_prob=args.mixed_w,
        buffer_log=args.buffer_dist == "log",
        policy_start_prob=args.policy_start_prob,
        policy_start_mbps=args.policy_start_mbps,
        knobs=mocc_knobs(args),
        additive_increase_range=additive_range(args),
    )


#: MOCC knobs that change the dynamics a policy learns: flags of the same name, default the
#: agent's (``MoccConfig::default()``), recorded in the card and set in every episode
DYNAMICS_KNOBS = ("additive_increase_pkts", "additive_increase_cap", "additive_increase_min_action")
#: the agent's deploy-time fairness guards (algs/src/mocc.rs, "Fairness"), off in every
#: training and evaluation episode: the policy learns the path, not the guards, and the
#: shipped card's commands keep the dynamics they were run under
TRAINING_OFF: dict[str, float] = {"min_rate_pkts": 0.0, "share_probe_every_mis": 0}
#: the least value of each knob (an action threshold may be negative; the others may not)
_KNOB_MIN = {"additive_increase_min_action": -math.inf}


def mocc_knobs(args: argparse.Namespace) -> tuple[tuple[str, float], ...]:
    """The values of `DYNAMICS_KNOBS`: the flag where given, else the agent's default."""
    from ccp_train import _native

    defaults = _native.defaults("mocc")
    out = []
    for k in DYNAMICS_KNOBS:
        v = getattr(args, k, None)
        v = defaults[k] if v is None else v
        lo = _KNOB_MIN.get(k, 0.0)
        if not math.isfinite(v) or v < lo:
            bound = "" if lo == -math.inf else f" >= {lo:g}"
            raise SystemExit(f"--{k.replace('_', '-')} {v}: expected a finite value{bound}")
        out.append((k, float(v)))
    return tuple(out)


def additive_range(args: argparse.Namespace) -> tuple[float, float] | None:
    r = getattr(args, "additive_increase_range", None)
    if r is None:
        return None
    lo, hi = r
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 <= lo <= hi):
        raise SystemExit(f"--additive-increase-range {lo:g},{hi:g}: expected 0 <= low <= high")
    return float(lo), float(hi)


def eval_scenarios(ranges: MoccRanges, count: int, seed: int) -> list[str]:
    """`count` single-learner scenarios without a preference (given per run), seeded."""
    r = dataclasses.replace(
        ranges, learners=(1, 1), stagger_s=(0.0, 0.0), preferences=None, mixed_prob=0.0
    )
    rng = random.Random(seed)
    return [r.sample(rng, ALG) for _ in range(count)]


# ---------------------------------------------------------------------------------------------
# Networks
# ---------------------------------------------------------------------------------------------


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
    """The preference sub-network: w (3) -> tanh MLP -> features concatenated with the state."""

    def __init__(self, sizes: Sequence[int]) -> None:
        super().__init__()
        self.net = _mlp([3, *sizes])
        self.out_dim = int(sizes[-1])

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return self.net(w)


class Tower(nn.Module):
    """concat(obs[0:30], PreferenceNet(obs[30:33]), extra) -> hidden tanh layers -> 1 output.
    `extra` (critic only): inputs the deployed policy never sees (the first `extra` columns of
    what is passed, so a checkpoint with fewer takes the same buffers)."""

    def __init__(
        self, pref: Sequence[int], hidden: Sequence[int], head_std: float, extra: int = 0
    ) -> None:
        super().__init__()
        self.pref = PreferenceNet(pref)
        self.extra = int(extra)
        self.body = _mlp([STATE_DIM + self.pref.out_dim + self.extra, *hidden])
        self.head = _layer(int(hidden[-1]), 1, head_std)

    def forward(self, obs: torch.Tensor, extra: torch.Tensor | None = None) -> torch.Tensor:
        parts = [obs[..., :STATE_DIM], self.pref(obs[..., W_SLICE])]
        if self.extra:
            if extra is None:
                raise ValueError("this critic needs its extra inputs")
            parts.append(extra[..., : self.extra])
        return self.head(self.body(torch.cat(parts, dim=-1)))


class MoccAgent(nn.Module):
    """Actor (Gaussian mean + free log std) and critic, each with its own preference net."""

    def __init__(
        self,
        pref: Sequence[int] = (16, 16),
        hidden: Sequence[int] = (64, 32),
        log_std_init: float = 0.0,
        gamma: float = 0.99,
        critic_extra: int = CRITIC_EXTRA,
    ) -> None:
        super().__init__()
        self.config = {
            "pref": [int(x) for x in pref],
            "hidden": [int(x) for x in hidden],
            "log_std_init": float(log_std_init),
            "gamma": float(gamma),
            "critic_extra": int(critic_extra),
        }
        self.actor = Tower(pref, hidden, head_std=0.01)
        self.critic = Tower(pref, hidden, head_std=1.0, extra=critic_extra)
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


class ActorMean(nn.Module):
    """What is exported: obs [B, 33] -> deterministic action [B, 1]."""

    def __init__(self, agent: MoccAgent) -> None:
        super().__init__()
        self.actor = agent.actor

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor(obs)


# ---------------------------------------------------------------------------------------------
# Environments
# ---------------------------------------------------------------------------------------------


def _active(obs: np.ndarray) -> np.ndarray:
    return np.abs(obs[:, W_SLICE]).sum(axis=1) > 0


class EnvGroup:
    """Several `CcpVecEnv`s stepped in lockstep: rows = all their learners, concatenated."""

    def __init__(self, learners: Sequence[int], ranges: MoccRanges, seed: int) -> None:
        from ccp_train.envs import CcpVecEnv

        with warnings.catch_warnings():  # SB3: "render_mode attribute is not defined"
            warnings.simplefilter("ignore", UserWarning)
            self.envs = [
                CcpVecEnv(
                    ALG,
                    dataclasses.replace(ranges, learners=(n, n)),
                    seed=seed + 7919 * k,
                    algs_toml=ranges.algs_toml,
                )
                for k, n in enumerate(learners)
            ]
        self.sizes = [int(n) for n in learners]
        self.num_rows = sum(self.sizes)
        self.objective: Pref | None = None
        self.obs = np.zeros((self.num_rows, OBS_DIM), dtype=np.float32)
        #: the critic's extra inputs per row: last reward, its moving average (0 at a start)
        self.extra = np.zeros((self.num_rows, CRITIC_EXTRA), dtype=np.float32)
        self.finished: list[dict[str, float]] = []

    def set_objective(self, w: Pref) -> np.ndarray:
        """Every learner of every new episode gets `w`; starts new episodes now."""
        for env in self.envs:
            env.ranges = dataclasses.replace(env.ranges, preferences=[tuple(w)])
        self.objective = tuple(w)  # type: ignore[assignment]
        self.obs = np.concatenate([env.reset() for env in self.envs]).astype(np.float32)
        self.extra[:] = 0.0
        return self.obs

    def remember(self, rew: np.ndarray, done: np.ndarray) -> np.ndarray:
        """Fold this step's rewards into the critic's extra inputs; returns the inputs that
        belong with the step's terminal observations (before episode ends reset them)."""
        active = _active(self.obs) | (rew != 0)
        ema = self.extra[:, 1] + REWARD_EMA * (rew - self.extra[:, 1])
        new = np.stack([rew, np.where(self.extra[:, 0] == 0, rew, ema)], axis=1)
        self.extra = np.where(active[:, None], new, self.extra).astype(np.float32)
        term = self.extra.copy()
        self.extra[done] = 0.0
        return term

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """-> next obs, rewards, dones, terminal obs (= next obs where not done)."""
        obs, rew, done, term = [], [], [], []
        k = 0
        for env, n in zip(self.envs, self.sizes, strict=True):
            o, r, d, infos = env.step(actions[k : k + n])
            t = o.copy()
            if d.any():
                for i in range(n):
                    t[i] = infos[i]["terminal_observation"]
                flows = [f for f in infos[0]["results"]["flows"] if f["alg"] == ALG]
                for f in flows:
                    self.finished.append(
                        {
                            "utilization": _num(f["utilization"]),
                            "queue_delay_p95_ms": _num(f["queue_delay_p95_ms"]),
                            "loss_rate": _num(f["loss_rate"]),
                        }
                    )
            obs.append(o)
            rew.append(r)
            done.append(d)
            term.append(t)
            k += n
        self.obs = np.concatenate(obs).astype(np.float32)
        return (
            self.obs,
            np.concatenate(rew).astype(np.float32),
            np.concatenate(done),
            np.concatenate(term).astype(np.float32),
        )


# ---------------------------------------------------------------------------------------------
# Rollouts, GAE, PPO
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Batch:
    """Valid (active-row) transitions of one rollout, flattened."""

    obs: torch.Tensor
    #: the critic's extra inputs (privileged: never given to the actor)
    extra: torch.Tensor
    actions: torch.Tensor
    logp: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor

    def __len__(self) -> int:
        return int(self.obs.shape[0])


def gae(
    rewards: np.ndarray,
    values: np.ndarray,
    dones: np.ndarray,
    valid: np.ndarray,
    last_values: np.ndarray,
    gamma: float,
    lam: float,
) -> np.ndarray:
    """GAE over [T, N] arrays. `rewards` already hold gamma*V(terminal) at truncations (done);
    invalid steps are skipped (a row's next step is its next valid one)."""
    t_len = rewards.shape[0]
    adv = np.zeros_like(rewards)
    next_v = last_values.astype(np.float64)
    next_a = np.zeros_like(next_v)
    for t in reversed(range(t_len)):
        nv = np.where(dones[t], 0.0, next_v)
        na = np.where(dones[t], 0.0, next_a)
        delta = rewards[t] + gamma * nv - values[t]
        a = delta + gamma * lam * na
        adv[t] = a
        next_v = np.where(valid[t], values[t], next_v)
        next_a = np.where(valid[t], a, next_a)
    return adv


def collect(
    agent: MoccAgent, group: EnvGroup, n_steps: int, gamma: float, lam: float
) -> tuple[Batch, dict[str, float]]:
    """One on-policy rollout of `n_steps` lockstep steps on every env of `group`."""
    n = group.num_rows
    obs_buf = np.zeros((n_steps, n, OBS_DIM), dtype=np.float32)
    ext_buf = np.zeros((n_steps, n, CRITIC_EXTRA), dtype=np.float32)
    act_buf = np.zeros((n_steps, n, 1), dtype=np.float32)
    logp_buf = np.zeros((n_steps, n), dtype=np.float32)
    val_buf = np.zeros((n_steps, n), dtype=np.float64)
    rew_buf = np.zeros((n_steps, n), dtype=np.float64)
    done_buf = np.zeros((n_steps, n), dtype=bool)
    valid_buf = np.zeros((n_steps, n), dtype=bool)
    raw_rewards = []
    obs = group.obs
    with torch.no_grad():
        for t in range(n_steps):
            ot = torch.as_tensor(obs)
            dist = agent.dist(ot)
            action = dist.sample()
            ext = torch.as_tensor(group.extra)
            obs_buf[t] = obs
            ext_buf[t] = group.extra
            act_buf[t] = action.numpy()
            logp_buf[t] = dist.log_prob(action).sum(-1).numpy()
            val_buf[t] = agent.value(ot, ext).numpy()
            valid_buf[t] = _active(obs)
            clipped = np.clip(action.numpy(), -ACTION_BOUND, ACTION_BOUND)
            obs, rew, done, term = group.step(clipped)
            term_ext = group.remember(rew, done)
            raw_rewards.append(rew[valid_buf[t]])
            r = rew.astype(np.float64)
            if done.any():
                te = torch.as_tensor(term_ext[done])
                tv = agent.value(torch.as_tensor(term[done]), te).numpy()
                r[done] += gamma * tv
            rew_buf[t] = r
            done_buf[t] = done
        last_ext = torch.as_tensor(group.extra)
        last_v = agent.value(torch.as_tensor(obs), last_ext).numpy()
    adv = gae(rew_buf, val_buf, done_buf, valid_buf, last_v, gamma, lam)
    ret = adv + val_buf
    m = valid_buf
    batch = Batch(
        obs=torch.as_tensor(obs_buf[m]),
        extra=torch.as_tensor(ext_buf[m]),
        actions=torch.as_tensor(act_buf[m]),
        logp=torch.as_tensor(logp_buf[m]),
        values=torch.as_tensor(val_buf[m], dtype=torch.float32),
        advantages=torch.as_tensor(adv[m], dtype=torch.float32),
        returns=torch.as_tensor(ret[m], dtype=torch.float32),
    )
    rr = np.concatenate(raw_rewards) if raw_rewards else np.zeros(0)
    stats = {
        "reward": float(rr.mean()) if rr.size else float("nan"),
        "transitions": int(m.sum()),
        "env_steps": int(n_steps * len(group.envs)),
    }
    return batch, stats


@dataclasses.dataclass
class PPOConfig:
    clip_coef: float = 0.2
    vf_coef: float = 0.5
    clip_vloss: bool = True
    max_grad_norm: float = 0.5
    num_minibatches: int = 4
    update_epochs: int = 4
    norm_adv: bool = True
    target_kl: float = 0.0

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> PPOConfig:
        return cls(
            clip_coef=args.clip_coef,
            vf_coef=args.vf_coef,
            clip_vloss=args.clip_vloss,
            max_grad_norm=args.max_grad_norm,
            num_minibatches=args.num_minibatches,
            update_epochs=args.update_epochs,
            norm_adv=args.norm_adv,
            target_kl=args.target_kl,
        )


def ppo_loss(
    agent: MoccAgent, b: Batch, idx: torch.Tensor, cfg: PPOConfig, ent_coef: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """L^{CLIP+E} (eq. 5, as a loss to minimize) plus the value loss, on minibatch `idx`."""
    obs, act = b.obs[idx], b.actions[idx]
    dist = agent.dist(obs)
    logp = dist.log_prob(act).sum(-1)
    entropy = dist.entropy().sum(-1).mean()
    logratio = logp - b.logp[idx]
    ratio = logratio.exp()
    adv = b.advantages[idx]
    if cfg.norm_adv and adv.numel() > 1:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    pg_loss = torch.max(
        -adv * ratio, -adv * torch.clamp(ratio, 1 - cfg.clip_coef, 1 + cfg.clip_coef)
    ).mean()
    scale = agent.value_scale
    v = agent.value(obs, b.extra[idx]) / scale
    ret = b.returns[idx] / scale
    if cfg.clip_vloss:
        v_old = b.values[idx] / scale
        v_clipped = v_old + torch.clamp(v - v_old, -cfg.clip_coef, cfg.clip_coef)
        v_loss = 0.5 * torch.max((v - ret) ** 2, (v_clipped - ret) ** 2).mean()
    else:
        v_loss = 0.5 * ((v - ret) ** 2).mean()
    loss = pg_loss - ent_coef * entropy + cfg.vf_coef * v_loss
    with torch.no_grad():
        stats = {
            "pg_loss": float(pg_loss),
            "v_loss": float(v_loss),
            "entropy": float(entropy),
            "approx_kl": float(((ratio - 1) - logratio).mean()),
            "clipfrac": float(((ratio - 1.0).abs() > cfg.clip_coef).float().mean()),
        }
    return loss, stats


def ppo_update(
    agent: MoccAgent,
    opt: torch.optim.Optimizer,
    batches: Sequence[Batch],
    cfg: PPOConfig,
    ent_coef: float,
    gen: torch.Generator,
) -> dict[str, float]:
    """PPO epochs over `batches`; with several batches (requirement replay, eq. 6) every step
    minimizes the mean of their minibatch losses (1/2 [L(w_new) + L(w_old)] for two)."""
    totals: dict[str, float] = {}
    count = 0
    actor_params = [*agent.actor.parameters(), agent.log_std]
    critic_params = list(agent.critic.parameters())
    for _ in range(cfg.update_epochs):
        chunks = [
            torch.tensor_split(torch.randperm(len(b), generator=gen), cfg.num_minibatches)
            for b in batches
        ]
        kls = []
        for m in range(cfg.num_minibatches):
            losses = []
            for b, ch in zip(batches, chunks, strict=True):
                if len(ch[m]) == 0:
                    continue
                loss, st = ppo_loss(agent, b, ch[m], cfg, ent_coef)
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
    out = {k: v / max(count, 1) for k, v in totals.items()}
    out["std"] = float(torch.exp(torch.clamp(agent.log_std, *LOG_STD_BOUNDS)).item())
    return out


def ent_coef_at(it: int, args: argparse.Namespace) -> float:
    frac = min(1.0, it / max(1, args.ent_decay_iters))
    return args.ent_scale * (args.ent_start + frac * (args.ent_end - args.ent_start))


# ---------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------


def evaluate(
    agent: MoccAgent,
    prefs: Sequence[Pref],
    scenarios: Sequence[str],
    algs_toml: str | None = None,
) -> dict[Pref, dict[str, float]]:
    """Deterministic policy (the exported mean, clipped like the runtime) on every
    (w, scenario) pair, all episodes in lockstep with batched inference. Per w: mean
    per-step reward (eq. 2 under w), and the learner's utilization, p95 queueing delay and
    loss rate, averaged over the scenarios."""
    from ccp_train import _native

    runs = []
    for w in prefs:
        for s in scenarios:
            env = _native.SimEnv(s, ALG, w=fmt_pref(w), algs_toml=algs_toml)
            o, _, _, done, _ = env.reset()
            runs.append({"w": tuple(w), "env": env, "obs": o[0], "done": done, "sum": 0.0, "n": 0})
    alive = [r for r in runs if not r["done"]]
    with torch.no_grad():
        while alive:
            obs = torch.as_tensor(np.stack([r["obs"] for r in alive]))
            act = np.clip(agent.actor_mean(obs).numpy(), -ACTION_BOUND, ACTION_BOUND)
            for r, a in zip(alive, act, strict=True):
                o, rew, _, done, _ = r["env"].step(a.reshape(1, 1).astype(np.float32))
                r["sum"] += float(rew[0])
                r["n"] += 1
                r["obs"] = o[0]
                r["done"] = done
            alive = [r for r in alive if not r["done"]]
    out: dict[Pref, dict[str, float]] = {}
    for w in prefs:
        rs = [r for r in runs if r["w"] == tuple(w)]
        figs: dict[str, list[float]] = {
            "reward": [],
            "utilization": [],
            "queue_delay_p95_ms": [],
            "loss_rate": [],
        }
        for r in rs:
            flow = r["env"].results()["flows"][0]
            figs["reward"].append(r["sum"] / max(r["n"], 1))
            for k in ("utilization", "queue_delay_p95_ms", "loss_rate"):
                figs[k].append(_num(flow[k]))
        out[tuple(w)] = {k: float(np.nanmean(v)) for k, v in figs.items()}  # type: ignore[index]
    return out


# ---------------------------------------------------------------------------------------------
# Logging, checkpoints, export
# ---------------------------------------------------------------------------------------------


class Logger:
    """One JSON object per line to `path`, and a short line to stdout."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(path, "w")  # noqa: SIM115

    def log(self, rec: dict[str, Any]) -> None:
        self.file.write(json.dumps(rec) + "\n")
        self.file.flush()
        if rec.get("kind") == "iteration":
            print(
                f"[{rec['phase']:>9} {rec['iteration']:5d}] w={rec['objective']:<11} "
                f"reward={rec['reward']:.4f} pg={rec['pg_loss']:+.4f} v={rec['v_loss']:.4f} "
                f"ent={rec['entropy']:.3f} kl={rec['approx_kl']:.4f} "
                f"clip={rec['clipfrac']:.3f} std={rec['std']:.3f} sps={rec['sps']:.0f}",
                flush=True,
            )
        else:
            short = {k: v for k, v in rec.items() if k not in ("kind", "order", "per_landmark")}
            print(f"[{rec.get('kind')}] " + json.dumps(short), flush=True)

    def close(self) -> None:
        self.file.close()


def set_seed(seed: int, threads: int) -> None:
    """Every source of randomness seeded, deterministic torch (ccp_train.rl.determinism)."""
    determinism.seed_everything(seed, threads)


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(d, default=str))


def save_checkpoint(
    path: Path,
    agent: MoccAgent,
    opt: torch.optim.Optimizer,
    *,
    iteration: int,
    steps: int,
    pool: Sequence[Pref],
    args: argparse.Namespace,
    onnx_sha256: str | None,
    command: str | None = None,
) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(
        {
            "format": CKPT_FORMAT,
            "config": agent.config,
            "state_dict": agent.state_dict(),
            "optimizer": opt.state_dict(),
            "iteration": int(iteration),
            "steps": int(steps),
            "pool": [list(w) for w in pool],
            "args": _jsonable(vars(args)),
            "onnx_sha256": onnx_sha256,
            "command": command,
        },
        path,
    )
    return path


def init_command(path: Path, ckpt: dict[str, Any]) -> str:
    """The command (chain) that produced checkpoint ``path``: the one it stores, else the one
    in the model card beside it when that card describes the checkpoint's ONNX model (older
    checkpoints stored no command)."""
    if ckpt.get("command"):
        return str(ckpt["command"])
    card_path = path.with_suffix(".json")
    try:
        card = _card.read_card(card_path)
    except (OSError, ValueError):
        card = {}
    training = card.get("training") if isinstance(card, dict) else None
    command = training.get("command") if isinstance(training, dict) else None
    if command and card.get("sha256") and card.get("sha256") == ckpt.get("onnx_sha256"):
        return str(command)
    raise SystemExit(
        f"--init {path}: the checkpoint records no training command and no model card beside "
        f"it ({card_path}) matches its ONNX sha256; a fine-tuned model's card must say how its "
        "starting point was trained"
    )


def load_checkpoint(path: Path) -> dict[str, Any]:
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    if ckpt.get("format") != CKPT_FORMAT:
        raise ValueError(f"{path}: not a {CKPT_FORMAT} checkpoint")
    return ckpt


def agent_from_checkpoint(ckpt: dict[str, Any]) -> MoccAgent:
    c = ckpt["config"]
    agent = MoccAgent(
        c["pref"], c["hidden"], c["log_std_init"], c["gamma"], c.get("critic_extra", 0)
    )
    agent.load_state_dict(ckpt["state_dict"])
    return agent


def feature_version() -> int:
    from ccp_train import _native

    probe = _native.SimEnv(eval_scenarios(MoccRanges(), 1, 0)[0], ALG)
    return int(probe.feature_version)


def export_model(
    agent: MoccAgent,
    out: Path,
    training: dict[str, Any],
    evaluation: dict[str, Any],
    algs_toml: str | None,
) -> tuple[Path, Path]:
    """`out/mocc.onnx` (deterministic actor mean, opset 17) and its card `out/mocc.json`, whose
    `dynamics` are those of `algs_toml`, the `[algs.mocc]` table the policy trained under."""
    onnx_path = export_torch(ActorMean(agent).eval(), out / f"{ALG}.onnx", obs_dim=OBS_DIM)
    card_path = _card.write_card(
        onnx_path,
        algorithm=ALG,
        feature_version=feature_version(),
        output_kind="continuous",
        obs_dim=OBS_DIM,
        act_dim=1,
        action_low=[-ACTION_BOUND],
        action_high=[ACTION_BOUND],
        training=training,
        evaluation=evaluation,
        algs_toml=algs_toml,
    )
    return onnx_path, card_path


def _library() -> str:
    return f"torch {torch.__version__} (own PPO: ccp_train.mocc)"


# ---------------------------------------------------------------------------------------------
# train
# ---------------------------------------------------------------------------------------------


class Trainer:
    """Shared by both phases: one iteration = one rollout + one PPO update."""

    def __init__(self, args: argparse.Namespace, agent: MoccAgent, logger: Logger) -> None:
        self.args = args
        self.agent = agent
        self.logger = logger
        self.cfg = PPOConfig.from_args(args)
        self.opt = torch.optim.Adam(agent.parameters(), lr=args.lr, eps=1e-5)
        self.gen = torch.Generator().manual_seed(args.seed)
        self.iteration = 0
        self.steps = 0
        self.env_steps = 0
        self.train_wall = 0.0

    def iterate(
        self, phase: str, groups: Sequence[EnvGroup], extra: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Rollout on each group (one for plain PPO; new + replayed objective for eq. 6),
        then one update on all of them."""
        a = self.args
        t0 = time.perf_counter()
        batches, stats = [], []
        for g in groups:
            g.finished.clear()
            b, s = collect(self.agent, g, a.n_steps, a.gamma, a.gae_lambda)
            batches.append(b)
            stats.append(s)
        t1 = time.perf_counter()
        ent = ent_coef_at(self.iteration, a)
        upd = ppo_update(self.agent, self.opt, batches, self.cfg, ent, self.gen)
        t2 = time.perf_counter()
        self.iteration += 1
        n = sum(s["transitions"] for s in stats)
        self.steps += n
        self.env_steps += sum(s["env_steps"] for s in stats)
        self.train_wall += t2 - t0
        fin = groups[0].finished
        rec: dict[str, Any] = {
            "kind": "iteration",
            "phase": phase,
            "iteration": self.iteration,
            "objective": fmt_pref(groups[0].objective or ()),
            "reward": stats[0]["reward"],
            **upd,
            "ent_coef": ent,
            "transitions": n,
            "sps": n / (t2 - t0),
            "env_sps": sum(s["env_steps"] for s in stats) / (t2 - t0),
            "rollout_s": t1 - t0,
            "update_s": t2 - t1,
            "steps_total": self.steps,
            "wall_s": self.train_wall,
            "episodes": len(fin),
            "utilization": float(np.mean([f["utilization"] for f in fin])) if fin else None,
        }
        if len(groups) > 1:
            rec["replay_objective"] = fmt_pref(groups[1].objective or ())
            rec["replay_reward"] = stats[1]["reward"]
        rec.update(extra or {})
        self.logger.log(rec)
        return rec


def cmd_train(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    logger = Logger(Path(args.log) if args.log else out / f"{ALG}.train.jsonl")
    set_seed(args.seed, args.threads)
    t_start = time.perf_counter()
    ranges = ranges_from_args(args)
    command = "python -m ccp_train.mocc " + shlex.join(argv)
    if args.init:
        ckpt = load_checkpoint(Path(args.init))
        agent = agent_from_checkpoint(ckpt)
        # the card's command reproduces the model: the starting point's chain, then this run
        command = f"{init_command(Path(args.init), ckpt)} && {command}"
    else:
        ckpt = None
        agent = MoccAgent(args.pref_layers, args.hidden, args.log_std_init, args.gamma)
    tr = Trainer(args, agent, logger)
    if ckpt is not None:
        tr.opt.load_state_dict(ckpt["optimizer"])
        for g in tr.opt.param_groups:
            g["lr"] = args.lr
        tr.iteration, tr.steps = int(ckpt["iteration"]), int(ckpt["steps"])
    group = EnvGroup(args.learners, ranges, args.seed)
    lms = landmarks()
    order = traversal_order(lms)
    logger.log(
        {
            "kind": "setup",
            "command": command,
            "landmarks": len(lms),
            "order": [fmt_pref(w) for w in order],
            "rows": group.num_rows,
            "params": sum(p.numel() for p in agent.parameters()),
        }
    )

    # phase 1: bootstrap
    for it in range(args.bootstrap_iters):
        w = BOOTSTRAP[(it // max(1, args.bootstrap_switch)) % len(BOOTSTRAP)]
        if group.objective != w:
            group.set_objective(w)
        tr.iterate("bootstrap", [group])

    # phase 2: fast traversing, cycles over the Algorithm-1 order until every landmark converged
    conv_set = eval_scenarios(ranges, args.conv_scenarios, args.seed + 10_000_019)
    history: dict[Pref, list[float]] = {w: [] for w in lms}
    streak: dict[Pref, int] = dict.fromkeys(lms, 0)
    cycles = 0
    converged = False
    traverse_iters = 0
    capped = False
    for cycle in range(1, args.max_cycles + 1):
        for w in order:
            for _ in range(args.iters_per_landmark):
                if args.traverse_max_iters and traverse_iters >= args.traverse_max_iters:
                    capped = True
                    break
                if group.objective != w:
                    group.set_objective(w)
                tr.iterate("traverse", [group], {"cycle": cycle})
                traverse_iters += 1
            if capped:
                break
        if capped:
            break
        cycles = cycle
        t0 = time.perf_counter()
        ev = evaluate(agent, lms, conv_set, ranges.base_toml())
        for w in lms:
            r = ev[w]["reward"]
            h = history[w]
            if h and abs(r - h[-1]) <= args.conv_tol * max(abs(h[-1]), 1e-9):
                streak[w] += 1
            else:
                streak[w] = 0
            h.append(r)
        n_conv = sum(1 for w in lms if streak[w] >= args.conv_patience)
        logger.log(
            {
                "kind": "cycle",
                "cycle": cycle,
                "iteration": tr.iteration,
                "mean_reward": float(np.mean([history[w][-1] for w in lms])),
                "converged": n_conv,
                "eval_s": time.perf_counter() - t0,
                "per_landmark": {fmt_pref(w): history[w][-1] for w in lms},
            }
        )
        save_checkpoint(
            out / f"{ALG}.resume.pt", agent, tr.opt, iteration=tr.iteration, steps=tr.steps,
            pool=lms, args=args, onnx_sha256=None, command=command,
        )
        if cycle >= args.min_cycles and n_conv == len(lms):
            converged = True
            break

    # final evaluation on a held-out set, export, checkpoint
    t0 = time.perf_counter()
    held_out = eval_scenarios(ranges, args.eval_scenarios, args.seed + 20_000_003)
    final = evaluate(agent, lms, held_out, ranges.base_toml())
    eval_s = time.perf_counter() - t0
    wall = time.perf_counter() - t_start
    per_lm = {fmt_pref(w): {k: round(v, 6) for k, v in final[w].items()} for w in lms}
    evaluation = {
        "held_out_scenarios": args.eval_scenarios,
        "held_out_seed": args.seed + 20_000_003,
        "policy": "deterministic mean, clipped to [-5, 5]",
        "mean_reward": float(np.mean([final[w]["reward"] for w in lms])),
        "per_landmark": per_lm,
        "training_wall_s": round(wall, 1),
        "iterations": tr.iteration,
        "cycles": cycles,
        "converged": converged,
    }
    start = (
        f"from {args.init} (iteration {int(ckpt['iteration'])}, {int(ckpt['steps'])} "
        "transitions; the command's first part), this run: "
        if ckpt is not None
        else ""
    )
    notes = (
        f"MOCC PPO with preference sub-network; {start}bootstrap {args.bootstrap_iters} "
        f"iterations, fast traversing {traverse_iters} iterations ({cycles} full cycles, "
        f"{'converged' if converged else 'not converged'}); {tr.iteration} iterations, "
        f"{tr.steps} transitions in all; this run {tr.env_steps} env steps, wall {wall:.0f} s "
        f"({tr.train_wall:.0f} s in training iterations)"
    )
    training = {
        "command": command,
        "library": _library(),
        "seed": args.seed,
        "steps": tr.steps,
        "scenario_ranges": {**ranges.describe(), "learners_per_env": list(args.learners)},
        "notes": notes,
        "wall_s": round(wall, 1),
        "determinism": determinism.record(args.threads),
    }
    onnx_path, card_path = export_model(agent, out, training, evaluation, ranges.base_toml())
    ckpt_path = save_checkpoint(
        out / f"{ALG}.pt", agent, tr.opt, iteration=tr.iteration, steps=tr.steps, pool=lms,
        args=args, onnx_sha256=_card.sha256_file(onnx_path), command=command,
    )
    summary = {
        "kind": "done",
        "onnx": str(onnx_path),
        "card": str(card_path),
        "checkpoint": str(ckpt_path),
        "iterations": tr.iteration,
        "transitions": tr.steps,
        "env_steps": tr.env_steps,
        "wall_s": wall,
        "train_wall_s": tr.train_wall,
        "final_eval_s": eval_s,
        "transitions_per_s": tr.steps / max(tr.train_wall, 1e-9),
        "iterations_per_s": tr.iteration / max(tr.train_wall, 1e-9),
        "mean_reward": evaluation["mean_reward"],
    }
    logger.log(summary)
    logger.close()
    # this run's curves next to its card
    curves.export(Path(args.log) if args.log else out / f"{ALG}.train.jsonl", out, ALG)
    return summary


# ---------------------------------------------------------------------------------------------
# adapt
# ---------------------------------------------------------------------------------------------


def time_to_fraction(curve: Sequence[float], walls: Sequence[float], frac: float) -> tuple[
    int, float, float
]:
    """First index where `curve` reaches `frac` x its best; -> (index, wall there, best)."""
    best = max(curve)
    for i, r in enumerate(curve):
        if r >= frac * best:
            return i, walls[i], best
    return len(curve) - 1, walls[-1], best  # pragma: no cover  (the max itself qualifies)


def cmd_adapt(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    logger = Logger(Path(args.log) if args.log else out / f"{ALG}.adapt.jsonl")
    set_seed(args.seed, args.threads)
    model = Path(args.model)
    ckpt_path = Path(args.checkpoint) if args.checkpoint else model.with_suffix(".pt")
    ckpt = load_checkpoint(ckpt_path)
    if ckpt.get("onnx_sha256") and model.exists():
        sha = _card.sha256_file(model)
        if sha != ckpt["onnx_sha256"]:
            raise SystemExit(
                f"{ckpt_path} was saved with a different ONNX model than {model} "
                f"(sha256 {ckpt['onnx_sha256']} vs {sha}); pass the matching --checkpoint"
            )
    agent = agent_from_checkpoint(ckpt)
    tr = Trainer(args, agent, logger)
    tr.iteration, tr.steps = int(ckpt["iteration"]), int(ckpt["steps"])
    it0 = tr.iteration
    pool: list[Pref] = [(w[0], w[1], w[2]) for w in ckpt["pool"]] or landmarks()
    w_new = args.w
    if args.old_w is not None:
        w_old_eval = args.old_w
    else:
        w_old_eval = max(
            landmarks(), key=lambda w: sum(abs(a - b) for a, b in zip(w, w_new, strict=True))
        )
    # the dynamics the model was trained under, unless overridden
    trained_args = ckpt.get("args") or {}
    for knob in (*DYNAMICS_KNOBS, "additive_increase_range"):
        if getattr(args, knob) is None:
            setattr(args, knob, trained_args.get(knob))
    ranges = ranges_from_args(args)
    eval_toml = ranges.base_toml()
    scen = eval_scenarios(ranges, args.adapt_eval_scenarios, args.seed + 30_000_001)
    before = evaluate(agent, [w_new, w_old_eval], scen, eval_toml)
    curve = [before[w_new]["reward"]]
    walls = [0.0]
    logger.log(
        {
            "kind": "adapt_start",
            "w_new": fmt_pref(w_new),
            "w_old_eval": fmt_pref(w_old_eval),
            "replay": args.replay,
            "pool": len(pool),
            "reward_new_before": curve[0],
            "reward_old_before": before[w_old_eval]["reward"],
        }
    )
    g_new = EnvGroup(args.learners, ranges, args.seed)
    g_new.set_objective(w_new)
    g_old = EnvGroup(args.learners, ranges, args.seed + 1) if args.replay else None
    rng = random.Random(args.seed + 40_000_003)
    for _ in range(args.iters):
        groups = [g_new]
        if g_old is not None:
            g_old.set_objective(rng.choice(pool))
            groups.append(g_old)
        rec = tr.iterate("adapt", groups)
        r = evaluate(agent, [w_new], scen, eval_toml)[w_new]["reward"]
        curve.append(r)
        walls.append(tr.train_wall)
        logger.log({"kind": "adapt_eval", "iteration": rec["iteration"], "reward_new": r})
    after = evaluate(agent, [w_new, w_old_eval], scen, eval_toml)
    idx, wall_at, best = time_to_fraction(curve, walls, 0.99)
    r_old0, r_old1 = before[w_old_eval]["reward"], after[w_old_eval]["reward"]
    kept = 100.0 * r_old1 / r_old0 if r_old0 else float("nan")
    report = {
        "w_new": fmt_pref(w_new),
        "replay": bool(args.replay),
        "iterations": args.iters,
        "reward_new_before": curve[0],
        "reward_new_after": after[w_new]["reward"],
        "reward_new_best": best,
        "iterations_to_99pct_best": idx,
        "wall_s_to_99pct_best": round(wall_at, 3),
        "w_old": fmt_pref(w_old_eval),
        "reward_old_before": r_old0,
        "reward_old_after": r_old1,
        "reward_old_kept_pct": round(kept, 2),
        "adapt_train_wall_s": round(tr.train_wall, 3),
        "held_out_scenarios": args.adapt_eval_scenarios,
    }
    command = "python -m ccp_train.mocc " + shlex.join(argv)
    training = {
        "command": command,
        "library": _library(),
        "seed": args.seed,
        "steps": tr.steps,
        "scenario_ranges": {**ranges.describe(), "learners_per_env": list(args.learners)},
        "notes": (
            f"online adaptation of {model} (checkpoint {ckpt_path}, iteration {it0}) to "
            f"w={fmt_pref(w_new)} with "
            f"{'requirement replay (eq. 6)' if args.replay else 'plain PPO'} "
            f"for {args.iters} iterations, {tr.train_wall:.0f} s"
        ),
    }
    onnx_path, card_path = export_model(
        agent, out, training, {"adaptation": report}, eval_toml
    )
    new_pool = pool if w_new in pool else [*pool, w_new]
    save_checkpoint(
        out / f"{ALG}.pt", agent, tr.opt, iteration=tr.iteration, steps=tr.steps, pool=new_pool,
        args=args, onnx_sha256=_card.sha256_file(onnx_path),
    )
    logger.log({"kind": "adapt_done", **report, "onnx": str(onnx_path), "card": str(card_path)})
    logger.close()
    print(
        f"adapt: new objective <{fmt_pref(w_new)}> reached 99% of its best held-out reward "
        f"({best:.4f}) after {idx} iterations, {wall_at:.1f} s of training "
        f"(reward {curve[0]:.4f} before, {report['reward_new_after']:.4f} after)"
    )
    print(
        f"adapt: old objective <{fmt_pref(w_old_eval)}> held-out reward {r_old0:.4f} before, "
        f"{r_old1:.4f} after: {kept:.1f}% kept"
    )
    return report


# ---------------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------------


def _floats(n: int | None = None) -> Any:
    def parse(text: str) -> tuple[float, ...]:
        v = tuple(float(x) for x in text.split(","))
        if n is not None and len(v) != n:
            raise argparse.ArgumentTypeError(f"expected {n} comma-separated numbers: {text!r}")
        return v

    return parse


def _ints(text: str) -> tuple[int, ...]:
    v = tuple(int(x) for x in text.split(",") if x.strip())
    if not v or any(x < 1 for x in v):
        raise argparse.ArgumentTypeError(f"expected positive integers, comma-separated: {text!r}")
    return v


def _common(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("run")
    g.add_argument("--seed", type=int, default=1, help="seeds torch, numpy, envs, evaluation")
    g.add_argument("--log", default=None, help="JSONL log; None: OUT/mocc.<cmd>.jsonl")
    g.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    g = p.add_argument_group("environment (Table 3 ranges, widened)")
    g.add_argument("--learners", type=_ints, default="1,1,2,3",
                   help="one vector env per entry, with that many MOCC learners sharing a "
                   "bottleneck")
    g.add_argument("--duration-s", type=_floats(2), default="10,20",
                   help="episode (scenario) length range, s")
    g.add_argument("--rate-mbps", type=_floats(2), default="1,8", help="link rate range")
    g.add_argument("--rtt-ms", type=_floats(2), default="10,200", help="base RTT range")
    g.add_argument("--buffer-bdp", type=_floats(2), default="0.1,1000",
                   help="bottleneck buffer range in BDP multiples")
    g.add_argument("--buffer-dist", choices=("log", "uniform"), default="log",
                   help="how --buffer-bdp is drawn")
    g.add_argument("--loss", type=_floats(2), default="0,0.03", help="random loss range")
    g.add_argument("--stagger-s", type=_floats(2), default="0,2",
                   help="learners of one env start this far apart")
    g.add_argument("--traces", default=",".join(TRAIN_TRACES),
                   help="mahimahi traces (comma-separated) that replace the constant rate in "
                   "a fraction of episodes; '' for none")
    g.add_argument("--trace-prob", type=float, default=0.25,
                   help="probability that an episode runs on a trace")
    g.add_argument("--trace-scale", type=_floats(2), default="0.5,2",
                   help="trace capacity multiplier range")
    g.add_argument("--mixed-w", type=float, default=0.5,
                   help="probability that each learner after the first of a multi-learner "
                   "episode gets a random landmark instead of the phase's objective")
    g.add_argument("--policy-start-prob", type=float, default=0.5,
                   help="probability that an episode skips start-up and starts the policy at a "
                   "random rate (it must learn to climb to, and drain back to, the capacity)")
    g.add_argument("--policy-start-mbps", type=_floats(2), default="0.2,10",
                   help="log-uniform range of that starting rate")
    g.add_argument("--additive-increase-pkts", type=float, default=None,
                   help="MOCC's additive increase (packets per RTT, every MI, on top of eq. 1) "
                   "the policy trains under; default: the agent's (MoccConfig). adapt: the "
                   "checkpoint's")
    g.add_argument("--additive-increase-cap", type=float, default=None,
                   help="its cap as a fraction of the rate; default: the agent's")
    g.add_argument("--additive-increase-min-action", type=float, default=None,
                   help="the term only on decisions with a >= this (0, the agent's default: "
                   "AIMD-like; -5: every decision); default: the agent's")
    g.add_argument("--additive-increase-range", type=_floats(2), default=None,
                   help="training episodes draw the additive increase from LOW,HIGH (domain "
                   "randomization: the policy cannot see it and must not lean on one value); "
                   "evaluation and the card's knobs keep --additive-increase-pkts")
    g = p.add_argument_group("PPO")
    g.add_argument("--n-steps", type=int, default=512, help="lockstep steps per rollout")
    g.add_argument("--gamma", type=float, default=0.99, help="discount (Table 2)")
    g.add_argument("--gae-lambda", type=float, default=0.95, help="GAE lambda")
    g.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate")
    g.add_argument("--clip-coef", type=float, default=0.2,
                   help="PPO ratio clip (also the value clip, on the 1/(1-gamma) scale)")
    g.add_argument("--ent-start", type=float, default=1.0, help="paper's beta at iteration 0")
    g.add_argument("--ent-end", type=float, default=0.1, help="paper's beta after the decay")
    g.add_argument("--ent-decay-iters", type=int, default=1000,
                   help="iterations of the linear beta decay (counted over both phases)")
    g.add_argument("--ent-scale", type=float, default=0.01,
                   help="effective entropy coefficient = scale x beta (see module doc)")
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


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m ccp_train.mocc",
        description="MOCC training (two-phase, 36 landmarks) and online adaptation.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    fmt = argparse.ArgumentDefaultsHelpFormatter

    t = sub.add_parser("train", help="offline two-phase training", formatter_class=fmt)
    t.add_argument("--out", default="models", help="output directory")
    _common(t)
    g = t.add_argument_group("network")
    g.add_argument("--hidden", type=_ints, default="64,32", help="actor/critic hidden layers")
    g.add_argument("--pref-layers", type=_ints, default="16,16",
                   help="preference sub-network layers")
    g.add_argument("--log-std-init", type=float, default=0.0,
                   help="initial log std of the Gaussian (state-independent, learned)")
    g.add_argument("--init", default=None,
                   help="start from this checkpoint's weights, optimizer and counters (e.g. "
                   "OUT/mocc.resume.pt; add --bootstrap-iters 0 to go straight to phase 2)")
    g = t.add_argument_group("phases")
    g.add_argument("--bootstrap-iters", type=int, default=600,
                   help="phase 1 iterations over the 3 bootstrap objectives")
    g.add_argument("--bootstrap-switch", type=int, default=3,
                   help="iterations per bootstrap objective before the next")
    g.add_argument("--iters-per-landmark", type=int, default=3,
                   help="phase 2 iterations on a landmark per visit")
    g.add_argument("--max-cycles", type=int, default=15, help="phase 2 cycles at most")
    g.add_argument("--min-cycles", type=int, default=3, help="phase 2 cycles at least")
    g.add_argument("--conv-tol", type=float, default=0.01,
                   help="relative change of a landmark's held-out reward per cycle")
    g.add_argument("--conv-patience", type=int, default=2,
                   help="cycles in a row within --conv-tol")
    g.add_argument("--conv-scenarios", type=int, default=2,
                   help="held-out scenarios per landmark for the convergence check")
    g.add_argument("--traverse-max-iters", type=int, default=0,
                   help="cap on phase-2 iterations (0: none)")
    g.add_argument("--eval-scenarios", type=int, default=8,
                   help="held-out scenarios per landmark for the final evaluation (card)")

    a = sub.add_parser("adapt", help="online adaptation with requirement replay",
                       formatter_class=fmt)
    a.add_argument("--w", type=parse_pref, required=True, help="new objective thr,lat,loss")
    a.add_argument("--model", default="models/mocc.onnx", help="the shipped model")
    a.add_argument("--checkpoint", default=None,
                   help="its torch checkpoint; None: the .pt next to --model")
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
    if args.cmd == "train":
        return cmd_train(args, argv)
    return cmd_adapt(args, argv)


if __name__ == "__main__":
    main()
