"""Checkpoints: weights, optimizer, counters, and how they were made (the command chain, the
dynamics), so ``--init CKPT`` continues a run and its card still says how to rebuild it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ccp_train import card as _card


def save(path: Path, fmt: str, agent: torch.nn.Module, opt: torch.optim.Optimizer,
         **meta: Any) -> Path:
    """`agent.config` (how to rebuild it), its weights, the optimizer state, and `meta`
    (iteration, steps, command, dynamics, onnx_sha256, args …; JSON-able)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"format": fmt, "config": agent.config, "state_dict": agent.state_dict(),
                "optimizer": opt.state_dict(), **json.loads(json.dumps(meta, default=str))},
               path)
    return path


def load(path: Path, fmt: str) -> dict[str, Any]:
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    if ckpt.get("format") != fmt:
        raise ValueError(f"{path}: not a {fmt} checkpoint")
    return ckpt


def command_of(path: Path, ckpt: Mapping[str, Any]) -> str:
    """The command (chain) that produced checkpoint `path`: the one it stores, else the one in
    the model card beside it when that card describes the checkpoint's ONNX model."""
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
        "starting point was trained")
