"""Export of SB3 actors to ONNX: onnxruntime output equals ``model.predict(obs,
deterministic=True)`` (after the clip the Rust runtime applies) within 1e-5, and the card
describes the file it sits next to."""

from __future__ import annotations

import json
import sys
from pathlib import Path

# Plain modules under train/ (no install step): make `ccp_train` importable without PYTHONPATH.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gymnasium as gym
import numpy as np
import onnxruntime as ort
import pytest
from gymnasium import spaces

from ccp_train import card as card_mod
from ccp_train.export import export_sb3_actor

TOL = 1e-5


class BoxEnv(gym.Env):
    """A tiny continuous-control env (no downloads): obs in R^n, reward = -|a - tanh(obs0)|."""

    def __init__(
        self,
        obs_dim: int = 5,
        act_dim: int = 2,
        low: float = -2.0,
        high: float = 3.0,
        discrete: int = 0,
    ):
        self.observation_space = spaces.Box(-10.0, 10.0, shape=(obs_dim,), dtype=np.float32)
        if discrete:
            self.action_space = spaces.Discrete(discrete)
        else:
            self.action_space = spaces.Box(low, high, shape=(act_dim,), dtype=np.float32)
        self._t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self.observation_space.sample().clip(-3, 3), {}

    def step(self, action):
        self._t += 1
        obs = self.np_random.normal(size=self.observation_space.shape).astype(np.float32)
        reward = -float(np.abs(np.asarray(action, dtype=np.float32) - np.tanh(obs[0])).sum())
        return obs, reward, False, self._t >= 32, {}


def _session(path):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def _rust_like(card: dict, raw: np.ndarray) -> np.ndarray:
    """What the Rust runtime returns for raw ONNX outputs: clip to the card's bounds, or argmax."""
    if card["output_kind"] == "q_values":
        return raw.argmax(axis=1).astype(np.float32).reshape(-1, 1)
    return np.clip(raw, np.float32(card["action_low"]), np.float32(card["action_high"]))


def _check_card(card_path, onnx_path, **expect) -> dict:
    card = card_mod.check_card(card_path)  # sha256 and I/O against the file, schema
    assert card["sha256"] == card_mod.sha256_file(onnx_path)
    assert card["model_file"] == onnx_path.name
    assert card["card_version"] == 1
    assert card["created"].endswith("Z")
    for k, v in expect.items():
        assert card[k] == v, (k, card[k], v)
    return card


def _obs(n: int, dim: int, seed: int = 0) -> np.ndarray:
    # Wide enough that some actions land outside the bounds and get clipped.
    return (np.random.default_rng(seed).normal(size=(n, dim)) * 4).astype(np.float32)


@pytest.mark.parametrize("algo", ["PPO", "TD3"])
def test_continuous_actor_matches_predict(tmp_path, algo):
    import stable_baselines3 as sb3

    env = BoxEnv()
    if algo == "PPO":
        model = sb3.PPO(
            "MlpPolicy",
            env,
            n_steps=64,
            batch_size=32,
            n_epochs=1,
            seed=3,
            device="cpu",
        )
    else:
        model = sb3.TD3(
            "MlpPolicy",
            env,
            learning_starts=32,
            train_freq=8,
            gradient_steps=2,
            seed=3,
            device="cpu",
            policy_kwargs={"net_arch": [32, 32]},
        )
    model.learn(total_timesteps=128)
    onnx_path, card_path = export_sb3_actor(
        model,
        tmp_path / "jury.onnx",
        algorithm="jury",
        feature_version=4,
        training={"command": "pytest", "scenario_ranges": {"bw_mbps": [20, 100]}},
        evaluation={"mean_reward": -1.5},
    )
    card = _check_card(
        card_path,
        onnx_path,
        algorithm="jury",
        feature_version=4,
        output_kind="continuous",
        obs_dim=5,
        act_dim=2,
        action_low=[-2.0, -2.0],
        action_high=[3.0, 3.0],
        masked=False,
        recurrent=None,
    )
    assert card["training"]["steps"] == 128 and card["training"]["seed"] == 3
    assert card["training"]["library"].startswith("stable-baselines3")
    assert card["training"]["scenario_ranges"] == {"bw_mbps": [20, 100]}
    assert card["evaluation"] == {"mean_reward": -1.5}
    assert card["inputs"] == [{"name": "obs", "shape": [-1, 5], "dtype": "float32"}]

    obs = _obs(200, 5)
    sess = _session(onnx_path)
    (raw,) = sess.run(["action"], {"obs": obs})
    want, _ = model.predict(obs, deterministic=True)
    got = _rust_like(card, raw)
    np.testing.assert_allclose(got, want, atol=TOL, rtol=0)
    # Per sample (batch 1), as the agent runs it.
    for i in range(0, 200, 37):
        (r1,) = sess.run(["action"], {"obs": obs[i : i + 1]})
        np.testing.assert_allclose(_rust_like(card, r1)[0], want[i], atol=TOL, rtol=0)
    if algo == "PPO":
        # PPO's mean is unbounded: push it out of the action space on both sides and check
        # that the exported raw output leaves the bounds while the runtime's clip with the
        # card's bounds gives exactly what predict() gives.
        import torch

        with torch.no_grad():
            model.policy.action_net.bias[0] += 10.0
            model.policy.action_net.bias[1] -= 10.0
        onnx_path, card_path = export_sb3_actor(
            model, tmp_path / "jury2.onnx", algorithm="jury", feature_version=4
        )
        card = card_mod.check_card(card_path)
        (raw,) = _session(onnx_path).run(["action"], {"obs": obs})
        assert (raw[:, 0] > 3.0).all() and (raw[:, 1] < -2.0).all()
        want, _ = model.predict(obs, deterministic=True)
        np.testing.assert_allclose(_rust_like(card, raw), want, atol=TOL, rtol=0)
        assert (want[:, 0] == 3.0).all() and (want[:, 1] == -2.0).all()


def test_dqn_q_values_argmax_matches_predict(tmp_path):
    import stable_baselines3 as sb3

    env = BoxEnv(obs_dim=6, discrete=7)
    model = sb3.DQN(
        "MlpPolicy",
        env,
        learning_starts=16,
        train_freq=4,
        seed=5,
        device="cpu",
        policy_kwargs={"net_arch": [64, 32]},
    )
    model.learn(total_timesteps=64)
    onnx_path, card_path = export_sb3_actor(
        model, tmp_path / "owl.onnx", algorithm="owl", feature_version=1
    )
    card = _check_card(
        card_path,
        onnx_path,
        output_kind="q_values",
        act_dim=1,
        n_actions=7,
        action_low=[0.0],
        action_high=[6.0],
    )
    obs = _obs(100, 6, seed=1)
    (q,) = _session(onnx_path).run(["action"], {"obs": obs})
    assert q.shape == (100, 7)
    import torch

    with torch.no_grad():
        q_ref = model.policy.q_net(torch.from_numpy(obs)).numpy()
    np.testing.assert_allclose(q, q_ref, atol=TOL, rtol=0)
    want, _ = model.predict(obs, deterministic=True)
    np.testing.assert_array_equal(_rust_like(card, q).reshape(-1).astype(int), want)


def test_masked_and_normalized_ppo(tmp_path):
    import stable_baselines3 as sb3

    obs_dim = 4
    env = BoxEnv(obs_dim=2 * obs_dim, act_dim=1, low=-1.0, high=1.0)
    model = sb3.PPO("MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=7, device="cpu")
    model.learn(total_timesteps=64)
    mean = np.array([0.5, -1.0, 2.0, 0.0])
    var = np.array([4.0, 0.25, 1.0, 9.0])
    onnx_path, card_path = export_sb3_actor(
        model,
        tmp_path / "owl.onnx",
        algorithm="owl",
        feature_version=2,
        masked=True,
        obs_rms=(mean, var),
        clip_obs=5.0,
    )
    card = _check_card(card_path, onnx_path, masked=True, obs_dim=obs_dim)
    assert card["normalization"]["kind"] == "baked_into_graph"
    assert [i["name"] for i in card["inputs"]] == ["obs", "mask"]
    rng = np.random.default_rng(3)
    obs = _obs(100, obs_dim, seed=2)
    mask = (rng.random((100, obs_dim)) < 0.7).astype(np.float32)
    (raw,) = _session(onnx_path).run(["action"], {"obs": obs, "mask": mask})
    norm = np.clip((obs - mean) / np.sqrt(var + 1e-8), -5.0, 5.0).astype(np.float32)
    want, _ = model.predict(np.concatenate([norm * mask, mask], axis=1), deterministic=True)
    np.testing.assert_allclose(_rust_like(card, raw), want, atol=TOL, rtol=0)


def test_recurrent_ppo_carries_state(tmp_path):
    from sb3_contrib import RecurrentPPO

    env = BoxEnv(obs_dim=4, act_dim=1, low=-1.0, high=1.0)
    model = RecurrentPPO(
        "MlpLstmPolicy",
        env,
        n_steps=32,
        batch_size=32,
        n_epochs=1,
        seed=9,
        device="cpu",
        policy_kwargs={"lstm_hidden_size": 16, "n_lstm_layers": 1},
    )
    model.learn(total_timesteps=32)
    onnx_path, card_path = export_sb3_actor(
        model, tmp_path / "nuwa.onnx", algorithm="nuwa", feature_version=1
    )
    card = _check_card(
        card_path,
        onnx_path,
        recurrent={"kind": "lstm", "num_layers": 1, "hidden_size": 16},
    )
    assert {o["name"] for o in card["outputs"]} == {"action", "h_out", "c_out"}
    sess = _session(onnx_path)
    obs = _obs(40, 4, seed=4)
    h = np.zeros((1, 1, 16), np.float32)
    c = np.zeros((1, 1, 16), np.float32)
    state = None
    start = np.array([True])
    for t in range(40):
        raw, h, c = sess.run(
            ["action", "h_out", "c_out"], {"obs": obs[t : t + 1], "h_in": h, "c_in": c}
        )
        want, state = model.predict(
            obs[t : t + 1], state=state, episode_start=start, deterministic=True
        )
        start = np.array([False])
        np.testing.assert_allclose(
            _rust_like(card, raw), want, atol=TOL, rtol=0, err_msg=f"step {t}"
        )
        np.testing.assert_allclose(h, state[0], atol=TOL, rtol=0)
        np.testing.assert_allclose(c, state[1], atol=TOL, rtol=0)


def test_card_refuses_a_file_it_does_not_describe(tmp_path):
    from ccp_train import fixtures

    fixtures.build_mlp(tmp_path)
    card_path = tmp_path / "fx_mlp.json"
    card_mod.check_card(card_path)
    card = json.loads(card_path.read_text())
    card["inputs"][0]["name"] = "state"
    assert any("inputs" in p for p in card_mod.validate(card))
    with pytest.raises(ValueError, match="unknown training fields"):
        card_mod.make_card(
            tmp_path / "fx_mlp.onnx",
            algorithm="x",
            feature_version=1,
            output_kind="continuous",
            obs_dim=30,
            act_dim=1,
            action_low=[-1],
            action_high=[1],
            training={"lr": 1},
        )
    with open(tmp_path / "fx_mlp.onnx", "ab") as f:
        f.write(b"\0")
    with pytest.raises(ValueError, match="sha256"):
        card_mod.check_card(card_path)


def test_card_records_the_dynamics_the_agent_computes(tmp_path):
    """Every card carries ``dynamics``: for a learned algorithm the bindings' dynamics of the
    trainer's ``[algs.*]`` tables (what the agent compares on load), else ``{}``."""
    from ccp_train import _native, fixtures

    fixtures.build_mlp(tmp_path)
    kw = dict(feature_version=1, output_kind="continuous", obs_dim=30, act_dim=1,
              action_low=[-1], action_high=[1])
    onnx_path = tmp_path / "fx_mlp.onnx"
    assert card_mod.make_card(onnx_path, algorithm="fx_mlp", **kw)["dynamics"] == {}
    off = "[algs.mocc]\nmin_rate_pkts = 0\nshare_probe_every_mis = 0\n"
    d = card_mod.make_card(onnx_path, algorithm="mocc", algs_toml=off, **kw)["dynamics"]
    assert d == _native.dynamics("mocc", off) != _native.dynamics("mocc")
    assert d["min_rate_pkts"] == 0 and d["share_probe_every_mis"] == 0
    assert "startup" not in d and "initial_rate_mbps" not in d  # the episode start is not
    default = card_mod.make_card(onnx_path, algorithm="mocc", **kw)["dynamics"]
    assert default == _native.dynamics("mocc") and default["min_rate_pkts"] > 0
    with pytest.raises(ValueError, match="no dynamics"):
        card_mod.make_card(onnx_path, algorithm="fx_mlp", algs_toml=off, **kw)
    with pytest.raises(ValueError, match="min_rate_pkts"):
        _native.dynamics("mocc", "[algs.mocc]\nmin_rate_pkts = -1\n")
    card = card_mod.make_card(onnx_path, algorithm="fx_mlp", **kw)
    card["dynamics"] = None
    assert any("dynamics" in p for p in card_mod.validate(card))
    # the shipped models' cards record what they were trained with
    for alg in ("mocc", "owl"):
        path = Path(__file__).resolve().parents[2] / f"models/{alg}.json"
        shipped = json.loads(path.read_text())
        assert set(shipped["dynamics"]) == set(_native.dynamics(alg)), alg
        assert not card_mod.validate(shipped), alg
        card_mod.check_card(path)  # the sha256 and the ONNX file's inputs and outputs
