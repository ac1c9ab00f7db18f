"""ccp_train: training-side tools for the CCP portfolio's learned policies.

- ``ccp_train.export``: SB3 actors (PPO/A2C, TD3/DDPG, SAC, DQN, RecurrentPPO) to ONNX in
  the runtime's I/O convention, with a model card next to the file.
- ``ccp_train.card``: the model card (``<alg>.json``, schema 1), read by the Rust agent's
  ``ccp_runtime::policy`` module.
- ``ccp_train.fixtures``: small real models with recorded PyTorch outputs, for the Rust
  runtime's parity tests and latency benchmark (``python -m ccp_train.fixtures OUTDIR``).

- ``ccp_train.envs``: Gymnasium (``CcpEnv``) and Stable-Baselines3 (``CcpVecEnv``)
  environments over the Rust simulator (the native module ``ccp_train._native``, built by
  ``pip install .`` or ``maturin develop``); registered as ``ccp/<Alg>-v0``. A discrete,
  masked algorithm's env (``ccp/Owl-v0``) has ``Discrete(n_actions)`` actions and observes
  ``concat(obs * mask, mask)`` (``2 * obs_dim`` values: features with absent ones zeroed, then
  the state mask), the input ``export_sb3_actor(..., masked=True)`` exports.
- ``ccp_train.scenarios``: scenario distributions (ranges of rate, RTT, buffer, loss, traces,
  competing flows) rendered as the simulator's TOML.

- ``ccp_train.rl``: what every trainer shares (specs and knobs from the bindings, rollouts in
  processes or on Ray, PPO, checkpoints, logs, harness hooks); ``ccp_train.mocc``: MOCC's
  trainer; ``ccp_train.jury``: Jury's (TD3); ``ccp_train.owl``: Owl's (DQN with a masked
  Q-network); ``ccp_train.nuwa``: Nuwa-RL's (sb3-contrib's RecurrentPPO). ``docs/training.md``
  explains them.

``export`` and ``fixtures`` need no native module (``PYTHONPATH=train`` works); ``card`` needs
it for a learned algorithm's ``dynamics``.
"""

import gymnasium as gym

__all__ = ["card", "envs", "export", "fixtures", "rl", "scenarios"]

try:  # every learned algorithm of the bindings gets a Gymnasium id
    from ccp_train import _native

    for _alg in _native.learned_algorithms():
        _id = f"ccp/{_alg.capitalize()}-v0"
        if _id not in gym.registry:
            gym.register(id=_id, entry_point="ccp_train.envs:CcpEnv", kwargs={"alg": _alg})
except ImportError:  # not built: export, card (without dynamics) and fixtures still work
    pass
