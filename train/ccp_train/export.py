"""Export trained SB3 actors to ONNX in the runtime's I/O convention, with a model card.

What is exported is the deterministic action, as ``model.predict(obs, deterministic=True)``
computes it before its final clip:

- PPO / A2C (``ActorCriticPolicy``, Box actions): features_extractor → mlp_extractor.
  forward_actor → action_net (the Gaussian mean; ``tanh`` + rescaling when the policy
  squashes). Discrete actions: the logits, ``output_kind`` ``"q_values"`` (argmax in Rust).
- TD3 / DDPG (``policy.actor``, tanh output) and SAC (``actor(obs, deterministic=True)``):
  the squashed action rescaled to the action space, as ``predict``'s ``unscale_action``.
- DQN (``policy.q_net``): the Q-values, ``output_kind`` ``"q_values"``; Rust takes the argmax
  (the index is the action; bounds ``[0, n-1]``).
- RecurrentPPO (sb3-contrib): features → ``lstm_actor`` (one step) → forward_actor →
  action_net, with ``h_in``/``c_in`` → ``h_out``/``c_out`` ``[num_layers, B, hidden]``; the
  runtime keeps the state per flow and zeroes it for a new flow (``episode_start``).

``predict`` clips Box actions to the action space; the Rust runtime does the same clip with
the card's ``action_low``/``action_high``, which are the action space's bounds.

Observation normalization (``VecNormalize``): pass ``obs_rms=(mean, var)`` (and
``clip_obs``/``epsilon``); it is baked into the graph, the card records it for provenance.

Masked observations (Owl): with ``masked=True`` the policy was trained on
``concat(obs * mask, mask)`` (observation space of ``2 * obs_dim``); the exported graph takes
``obs`` and ``mask`` separately and builds that concatenation itself.

Every graph has a dynamic batch dimension (batched inference across flows).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from . import card as _card

OPSET = 17


class _Normalize(nn.Module):
    def __init__(self, mean: np.ndarray, var: np.ndarray, clip_obs: float, epsilon: float) -> None:
        super().__init__()
        self.register_buffer("mean", torch.as_tensor(np.asarray(mean, dtype=np.float32)))
        self.register_buffer(
            "std",
            torch.as_tensor(
                np.sqrt(np.asarray(var, dtype=np.float64) + epsilon).astype(np.float32)
            ),
        )
        self.clip = float(clip_obs)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.clamp((obs - self.mean) / self.std, -self.clip, self.clip)


class _Rescale(nn.Module):
    """[-1, 1] → [low, high] (SB3's ``unscale_action``)."""

    def __init__(self, low: Sequence[float], high: Sequence[float]) -> None:
        super().__init__()
        self.register_buffer("low", torch.as_tensor(np.asarray(low, dtype=np.float32)))
        self.register_buffer("high", torch.as_tensor(np.asarray(high, dtype=np.float32)))

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        return self.low + 0.5 * (a + 1.0) * (self.high - self.low)


class _Stateless(nn.Module):
    def __init__(self, head: nn.Module | None, pre: nn.Module | None, masked: bool) -> None:
        super().__init__()
        self.head = head
        self.pre = pre if pre is not None else nn.Identity()
        self.masked = masked

    def _obs(self, obs: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = self.pre(obs)
        if self.masked:
            x = torch.cat([x * mask, mask], dim=-1)
        return x


class _MaskedActor(_Stateless):
    def forward(self, obs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.head(self._obs(obs, mask))


class _PlainActor(_Stateless):
    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.head(self._obs(obs))


def _features(policy: Any, obs: torch.Tensor, extractor: nn.Module) -> torch.Tensor:
    from stable_baselines3.common.preprocessing import preprocess_obs

    x = preprocess_obs(obs, policy.observation_space, normalize_images=policy.normalize_images)
    return extractor(x)


class _ActorCriticHead(nn.Module):
    def __init__(self, policy: Any, rescale: nn.Module | None) -> None:
        super().__init__()
        self.policy = policy
        self.rescale = rescale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.policy
        latent = p.mlp_extractor.forward_actor(_features(p, x, p.pi_features_extractor))
        a = p.action_net(latent)
        if self.rescale is not None:
            a = self.rescale(torch.tanh(a))
        return a


class _ActorHead(nn.Module):
    """TD3/DDPG ``actor(obs)`` or SAC ``actor(obs, deterministic=True)``, rescaled."""

    def __init__(self, actor: nn.Module, rescale: nn.Module, sac: bool) -> None:
        super().__init__()
        self.actor = actor
        self.rescale = rescale
        self.sac = sac

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.actor(x, deterministic=True) if self.sac else self.actor(x)
        return self.rescale(a)


class _QHead(nn.Module):
    def __init__(self, q_net: nn.Module) -> None:
        super().__init__()
        self.q_net = q_net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.q_net(x)


class _RecurrentActor(nn.Module):
    def __init__(
        self, policy: Any, pre: nn.Module | None, masked: bool, rescale: nn.Module | None
    ) -> None:
        super().__init__()
        self.policy = policy
        self.pre = pre if pre is not None else nn.Identity()
        self.masked = masked
        self.rescale = rescale

    def step(
        self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        p = self.policy
        f = _features(p, x, p.pi_features_extractor)
        out, (h2, c2) = p.lstm_actor(f.unsqueeze(0), (h, c))
        a = p.action_net(p.mlp_extractor.forward_actor(out.squeeze(0)))
        if self.rescale is not None:
            a = self.rescale(torch.tanh(a))
        return a, h2, c2


class _RecurrentPlain(_RecurrentActor):
    def forward(
        self, obs: torch.Tensor, h_in: torch.Tensor, c_in: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.step(self.pre(obs), h_in, c_in)


class _RecurrentMasked(_RecurrentActor):
    def forward(
        self, obs: torch.Tensor, mask: torch.Tensor, h_in: torch.Tensor, c_in: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = torch.cat([self.pre(obs) * mask, mask], dim=-1)
        return self.step(x, h_in, c_in)


def _kind(model: Any) -> str:
    """The SB3 algorithm a model is, or derives from (a trainer may subclass one)."""
    for cls in type(model).__mro__:
        if cls.__name__ in ("PPO", "A2C", "RecurrentPPO", "TD3", "DDPG", "SAC", "DQN"):
            return cls.__name__
    raise TypeError(f"export_sb3_actor: unsupported model type {type(model).__name__}")


def export_torch(
    module: nn.Module,
    path: str | Path,
    *,
    obs_dim: int,
    masked: bool = False,
    recurrent: dict | None = None,
) -> Path:
    """Export ``module`` (forward(obs[, mask][, h_in, c_in]) → action[, h_out, c_out]) with the
    convention's names and a dynamic batch dimension; opset 17, TorchScript exporter."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    module = module.eval()
    args: list[torch.Tensor] = [torch.zeros(1, obs_dim)]
    in_names = ["obs"]
    dyn: dict[str, dict[int, str]] = {"obs": {0: "batch"}, "action": {0: "batch"}}
    if masked:
        args.append(torch.ones(1, obs_dim))
        in_names.append("mask")
        dyn["mask"] = {0: "batch"}
    out_names = ["action"]
    if recurrent:
        s = (recurrent["num_layers"], 1, recurrent["hidden_size"])
        args += [torch.zeros(s), torch.zeros(s)]
        in_names += ["h_in", "c_in"]
        out_names += ["h_out", "c_out"]
        for n in ("h_in", "c_in", "h_out", "c_out"):
            dyn[n] = {1: "batch"}
    with torch.no_grad(), warnings.catch_warnings():
        # The TorchScript exporter is deprecated in favour of dynamo, which the Rust side does
        # not need; the LSTM batch warning does not apply (h0/c0 are inputs).
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        torch.onnx.export(
            module,
            tuple(args),
            str(path),
            input_names=in_names,
            output_names=out_names,
            dynamic_axes=dyn,
            opset_version=OPSET,
            dynamo=False,
        )
    return path


def export_sb3_actor(
    model: Any,
    path: str | Path,
    *,
    algorithm: str,
    feature_version: int,
    masked: bool = False,
    obs_rms: tuple[Sequence[float], Sequence[float]] | None = None,
    clip_obs: float = 10.0,
    epsilon: float = 1e-8,
    training: dict | None = None,
    evaluation: dict | None = None,
    algs_toml: str | None = None,
) -> tuple[Path, Path]:
    """Export an SB3 model's deterministic actor to ``path`` (ONNX) and write the card next to
    it. Returns ``(onnx_path, card_path)``. ``algs_toml``: the ``[algs.*]`` tables the
    environment ran (None: the agent's defaults), recorded as the card's ``dynamics``.

    ``masked``: the policy's observation is ``concat(obs * mask, mask)``; ``obs_rms``:
    ``VecNormalize`` statistics ``(mean, var)`` of the raw observation, baked into the graph.
    ``training`` may hold ``command``, ``library``, ``seed``, ``steps``,
    ``scenario_ranges``, ``notes``; ``evaluation`` free-form figures.
    """
    from gymnasium import spaces

    kind = _kind(model)
    policy = model.policy
    policy.set_training_mode(False)
    policy = policy.to("cpu")
    ospace, aspace = policy.observation_space, policy.action_space
    if not isinstance(ospace, spaces.Box) or len(ospace.shape) != 1:
        raise TypeError("export_sb3_actor: only flat Box observation spaces")
    policy_obs = int(ospace.shape[0])
    obs_dim = policy_obs // 2 if masked else policy_obs
    if masked and policy_obs != 2 * obs_dim:
        raise ValueError("masked=True needs an observation space of 2 * obs_dim")

    pre = None
    normalization = None
    if obs_rms is not None:
        mean, var = (np.asarray(v, dtype=np.float64).reshape(-1) for v in obs_rms)
        if mean.shape != (obs_dim,) or var.shape != (obs_dim,):
            raise ValueError(f"obs_rms must hold {obs_dim} means and variances")
        pre = _Normalize(mean, var, clip_obs, epsilon)
        normalization = {
            "kind": "baked_into_graph",
            "obs_mean": [float(np.float32(x)) for x in mean],
            "obs_std": [float(np.float32(x)) for x in np.sqrt(var + epsilon)],
            "clip_obs": float(clip_obs),
        }

    discrete = isinstance(aspace, spaces.Discrete)
    if discrete:
        n = int(aspace.n)
        output_kind, act_dim, n_actions = "q_values", 1, n
        low, high = [0.0], [float(n - 1)]
    elif isinstance(aspace, spaces.Box) and len(aspace.shape) == 1:
        output_kind, act_dim, n_actions = "continuous", int(aspace.shape[0]), None
        low, high = aspace.low.tolist(), aspace.high.tolist()
    else:
        raise TypeError(f"export_sb3_actor: unsupported action space {aspace}")

    recurrent = None
    squash = (not discrete) and bool(getattr(policy, "squash_output", False))
    rescale = _Rescale(low, high) if squash else None
    if kind in ("PPO", "A2C"):
        head: nn.Module = _ActorCriticHead(policy, rescale)
    elif kind in ("TD3", "DDPG", "SAC"):
        head = _ActorHead(policy.actor, _Rescale(low, high), sac=kind == "SAC")
    elif kind == "DQN":
        head = _QHead(policy.q_net)
    else:  # RecurrentPPO
        lstm = policy.lstm_actor
        recurrent = {
            "kind": "lstm",
            "num_layers": int(lstm.num_layers),
            "hidden_size": int(lstm.hidden_size),
        }
        head = None

    if recurrent is not None:
        module: nn.Module = (_RecurrentMasked if masked else _RecurrentPlain)(
            policy, pre, masked, rescale
        )
    else:
        module = (_MaskedActor if masked else _PlainActor)(head, pre, masked)

    onnx_path = export_torch(module, path, obs_dim=obs_dim, masked=masked, recurrent=recurrent)
    t = dict(training or {})
    t.setdefault("library", _library(kind))
    if t.get("steps") is None and getattr(model, "num_timesteps", None):
        t["steps"] = int(model.num_timesteps)
    if t.get("seed") is None and getattr(model, "seed", None) is not None:
        t["seed"] = int(model.seed)
    card_path = _card.write_card(
        onnx_path,
        algorithm=algorithm,
        feature_version=feature_version,
        output_kind=output_kind,
        obs_dim=obs_dim,
        act_dim=act_dim,
        n_actions=n_actions,
        action_low=low,
        action_high=high,
        masked=masked,
        recurrent=recurrent,
        normalization=normalization,
        training=t,
        evaluation=evaluation,
        algs_toml=algs_toml,
    )
    return onnx_path, card_path


def _library(kind: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    pkg = "sb3-contrib" if kind == "RecurrentPPO" else "stable-baselines3"
    try:
        return f"{pkg} {version(pkg)} ({kind})"
    except PackageNotFoundError:  # pragma: no cover
        return f"{pkg} ({kind})"


def predict_clipped(model: Any, obs: np.ndarray, card: dict) -> np.ndarray:
    """What the Rust runtime returns for ``obs`` given the model's raw ONNX output would be:
    ``model.predict(obs, deterministic=True)`` (which clips to the action space). Handy in
    tests; recurrent models are not covered (they need state)."""
    a, _ = model.predict(obs, deterministic=True)
    if card["output_kind"] == "continuous":
        return np.clip(np.asarray(a, dtype=np.float32), card["action_low"], card["action_high"])
    return np.asarray(a).astype(np.float32).reshape(-1, 1)
