"""ccp_train: training-side tools for the CCP portfolio's learned policies.

- ``ccp_train.export``: SB3 actors (PPO/A2C, TD3/DDPG, SAC, DQN, RecurrentPPO) to ONNX in
  the runtime's I/O convention, with a model card next to the file.
- ``ccp_train.card``: the model card (``<alg>.json``, schema 1), read by the Rust agent's
  ``ccp_agent::policy`` module.
- ``ccp_train.fixtures``: small real models with recorded PyTorch outputs, for the Rust
  runtime's parity tests and latency benchmark (``python -m ccp_train.fixtures OUTDIR``).

Import with ``PYTHONPATH=train`` (plain modules; no build step needed).
"""

__all__ = ["card", "export", "fixtures"]
