"""Deterministic training: one call seeds every source of randomness, and a record says what
the result depends on besides the seed (written into the model card's
``training.determinism``).

A run is reproducible byte for byte for a given seed and thread count on one machine: Python's
``random``, numpy, torch (deterministic algorithms, a fixed number of CPU threads) and the
simulator's episodes (seeded by the trainer through the scenarios it draws) are the only
sources of randomness, and nothing that shapes data reads the wall clock. Other CPUs, library
versions or thread counts may round differently; the record names them.
"""

from __future__ import annotations

import os
import platform
import random
import subprocess
from pathlib import Path

import numpy as np
import torch

_ROOT = Path(__file__).resolve().parents[3]


def seed_everything(seed: int, threads: int) -> None:
    """Seed ``random``, numpy and torch; fix torch's CPU threads; deterministic kernels only."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    torch.set_num_threads(max(1, threads))
    torch.use_deterministic_algorithms(True)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def code_version() -> str:
    """``git describe --always --dirty`` of the checkout the trainer runs from, or "unknown"."""
    try:
        p = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=12"],
                           cwd=_ROOT, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return p.stdout.strip() if p.returncode == 0 and p.stdout.strip() else "unknown"


def record(threads: int) -> dict:
    """What a training result depends on besides its command and seed."""
    return {
        "threads": max(1, threads),
        "device": "cpu",
        "deterministic_algorithms": True,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu": _cpu_model(),
        "code": code_version(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
    }
