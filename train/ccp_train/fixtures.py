"""Small real models for the Rust runtime's tests and benchmark, with fixed seeds.

``python -m ccp_train.fixtures OUTDIR`` (with ``PYTHONPATH=train``) writes, per fixture,
``<name>.onnx``, its card ``<name>.json`` and ``<name>.records.json`` (observations and the
PyTorch outputs for them):

- ``fx_mlp``  — MOCC-like: obs 30 = 27 network features + 3 preference weights; a preference
  sub-network (3→8, tanh) concatenated with the features, then MLP 64→32 tanh → 1 action in
  [-1, 1]. 128 recorded rows.
- ``fx_owl``  — Owl-like DQN: obs 60 + mask 60, ``concat(obs * mask, mask)`` → 512 → 256
  (ReLU) → 7 Q-values (``output_kind`` ``q_values``). 128 rows with random masks.
- ``fx_lstm`` — Nuwa-like: LSTM(4→64), 1 layer, then Linear(64→1); ``h``/``c`` in and out.
  Two sequences of 120 steps, each from zero state.
- ``fx_wild`` — outputs that must be clamped: ``[obs0 / (obs1 - obs1), 1e6 + obs2,
  tanh(obs2)]`` (±inf or NaN, a huge value, an in-range value), bounds [-1, 1]. No records.

Records format: ``{"name", "sequences": [{"obs": [[...]], "mask": [[...]] | null,
"raw": [[...]] (the model's "action" output), "action": [[...]] (after clipping to the
bounds, or the argmax index for q_values)}]}``. Stateless fixtures have one sequence of
independent rows; recurrent ones carry state along each sequence.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

from . import card as _card
from .export import export_torch

FEATURE_VERSION = 1
ROWS = 128
SEQ_LEN = 120


class MoccLike(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pref = nn.Sequential(nn.Linear(3, 8), nn.Tanh())
        self.body = nn.Sequential(
            nn.Linear(27 + 8, 64),
            nn.Tanh(),
            nn.Linear(64, 32),
            nn.Tanh(),
            nn.Linear(32, 1),
            nn.Tanh(),
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.body(torch.cat([obs[:, :27], self.pref(obs[:, 27:])], dim=-1))


class OwlLike(nn.Module):
    def __init__(self, obs_dim: int = 60, n_actions: int = 7) -> None:
        super().__init__()
        self.q = nn.Sequential(
            nn.Linear(2 * obs_dim, 512),
            nn.ReLU(),
            nn.Linear(512, 256),
            nn.ReLU(),
            nn.Linear(256, n_actions),
        )

    def forward(self, obs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.q(torch.cat([obs * mask, mask], dim=-1))


class NuwaLike(nn.Module):
    def __init__(self, obs_dim: int = 4, hidden: int = 64) -> None:
        super().__init__()
        self.lstm = nn.LSTM(obs_dim, hidden, num_layers=1)
        self.head = nn.Linear(hidden, 1)

    def forward(
        self, obs: torch.Tensor, h_in: torch.Tensor, c_in: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out, (h, c) = self.lstm(obs.unsqueeze(0), (h_in, c_in))
        return self.head(out.squeeze(0)), h, c


class Wild(nn.Module):
    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x0, x1, x2 = obs[:, 0:1], obs[:, 1:2], obs[:, 2:3]
        return torch.cat([x0 / (x1 - x1), 1e6 + x2, torch.tanh(x2)], dim=-1)


def _rows(a: np.ndarray) -> list[list[float]]:
    return [[float(v) for v in r] for r in np.asarray(a, dtype=np.float32)]


def _training(name: str, seed: int) -> dict:
    return {
        "command": f"python -m ccp_train.fixtures OUTDIR  # {name}",
        "library": f"torch {torch.__version__} (random weights, no training)",
        "seed": seed,
        "steps": 0,
        "notes": "test fixture: random weights with a fixed seed",
    }


def build_mlp(out: Path) -> dict:
    torch.manual_seed(1)
    net = MoccLike().eval()
    path = export_torch(net, out / "fx_mlp.onnx", obs_dim=30)
    _card.write_card(
        path,
        algorithm="fx_mlp",
        feature_version=FEATURE_VERSION,
        output_kind="continuous",
        obs_dim=30,
        act_dim=1,
        action_low=[-1.0],
        action_high=[1.0],
        training=_training("fx_mlp", 1),
        dynamics={},  # no algorithm of the agent: nothing to check
    )
    rng = np.random.default_rng(11)
    obs = rng.normal(size=(ROWS, 30)).astype(np.float32)
    w = rng.dirichlet([1.0, 1.0, 1.0], size=ROWS).astype(np.float32)
    obs[:, 27:] = w
    with torch.no_grad():
        raw = net(torch.from_numpy(obs)).numpy()
    return {
        "name": "fx_mlp",
        "sequences": [
            {
                "obs": _rows(obs),
                "mask": None,
                "raw": _rows(raw),
                "action": _rows(np.clip(raw, -1.0, 1.0)),
            }
        ],
    }


def build_owl(out: Path) -> dict:
    torch.manual_seed(2)
    net = OwlLike().eval()
    path = export_torch(net, out / "fx_owl.onnx", obs_dim=60, masked=True)
    _card.write_card(
        path,
        algorithm="fx_owl",
        feature_version=FEATURE_VERSION,
        output_kind="q_values",
        obs_dim=60,
        act_dim=1,
        n_actions=7,
        action_low=[0.0],
        action_high=[6.0],
        masked=True,
        training=_training("fx_owl", 2),
        dynamics={},  # no algorithm of the agent: nothing to check
    )
    rng = np.random.default_rng(22)
    mask = (rng.random(size=(ROWS, 60)) < 0.8).astype(np.float32)
    mask[: ROWS // 2, :] = 1.0  # half the rows with full network knowledge
    obs = (rng.normal(size=(ROWS, 60)) * mask).astype(np.float32)
    with torch.no_grad():
        q = net(torch.from_numpy(obs), torch.from_numpy(mask)).numpy()
    idx = q.argmax(axis=1).astype(np.float32).reshape(-1, 1)
    return {
        "name": "fx_owl",
        "sequences": [
            {
                "obs": _rows(obs),
                "mask": _rows(mask),
                "raw": _rows(q),
                "action": _rows(idx),
            }
        ],
    }


def build_lstm(out: Path) -> dict:
    torch.manual_seed(3)
    net = NuwaLike().eval()
    rec = {"kind": "lstm", "num_layers": 1, "hidden_size": 64}
    path = export_torch(net, out / "fx_lstm.onnx", obs_dim=4, recurrent=rec)
    _card.write_card(
        path,
        algorithm="fx_lstm",
        feature_version=FEATURE_VERSION,
        output_kind="continuous",
        obs_dim=4,
        act_dim=1,
        action_low=[-5.0],
        action_high=[5.0],
        recurrent=rec,
        training=_training("fx_lstm", 3),
        dynamics={},  # no algorithm of the agent: nothing to check
    )
    rng = np.random.default_rng(33)
    seqs = []
    for _ in range(2):
        obs = rng.normal(size=(SEQ_LEN, 4)).astype(np.float32)
        h = torch.zeros(1, 1, 64)
        c = torch.zeros(1, 1, 64)
        raw = []
        with torch.no_grad():
            for t in range(SEQ_LEN):
                a, h, c = net(torch.from_numpy(obs[t : t + 1]), h, c)
                raw.append(a.numpy()[0])
        raw = np.asarray(raw, dtype=np.float32)
        seqs.append(
            {
                "obs": _rows(obs),
                "mask": None,
                "raw": _rows(raw),
                "action": _rows(np.clip(raw, -5.0, 5.0)),
            }
        )
    return {"name": "fx_lstm", "sequences": seqs}


def build_wild(out: Path) -> None:
    path = export_torch(Wild().eval(), out / "fx_wild.onnx", obs_dim=3)
    _card.write_card(
        path,
        algorithm="fx_wild",
        feature_version=FEATURE_VERSION,
        output_kind="continuous",
        obs_dim=3,
        act_dim=3,
        action_low=[-1.0] * 3,
        action_high=[1.0] * 3,
        training=_training("fx_wild", 0),
        dynamics={},  # no algorithm of the agent: nothing to check
    )


def build_all(out: str | Path) -> list[Path]:
    """Write every fixture into ``out``; returns the written paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for build in (build_mlp, build_owl, build_lstm):
        rec = build(out)
        p = out / f"{rec['name']}.records.json"
        p.write_text(json.dumps(rec, allow_nan=False))
        written += [out / f"{rec['name']}.onnx", out / f"{rec['name']}.json", p]
    build_wild(out)
    written += [out / "fx_wild.onnx", out / "fx_wild.json"]
    for p in written:
        if p.suffix == ".json" and not p.name.endswith(".records.json"):
            _card.check_card(p)
    return written


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m ccp_train.fixtures OUTDIR", file=sys.stderr)
        return 2
    for p in build_all(argv[0]):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
