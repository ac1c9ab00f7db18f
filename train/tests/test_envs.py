"""The training environments over the Rust simulator, and the smoke pipeline
train -> export -> `ccp-agent --sim` with the exported model."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from stable_baselines3 import PPO

import ccp_train  # noqa: F401  (registers the environments)
from ccp_train import _native
from ccp_train.envs import CcpEnv, CcpVecEnv
from ccp_train.export import export_sb3_actor
from ccp_train.scenarios import Competitor, ScenarioRanges

ROOT = Path(__file__).resolve().parents[2]

SMALL = ScenarioRanges(duration_s=(4.0, 4.0), rate_mbps=(2.0, 6.0), rtt_ms=(20.0, 40.0))


def test_registered_env_passes_gymnasium_checks() -> None:
    env = gym.make("ccp/Mocc-v0", ranges=SMALL, seed=1)
    check_env(env.unwrapped, skip_render_check=True)
    assert env.observation_space.shape == (33,)
    assert env.action_space.shape == (1,)
    assert float(env.action_space.low[0]) == -5.0


def test_episodes_are_seeded_and_report_raw_metrics() -> None:
    def rollout(seed: int) -> tuple[list[np.ndarray], dict]:
        env = CcpEnv("mocc", SMALL, seed=seed)
        obs, _ = env.reset(seed=seed)
        seen = [obs]
        rng = np.random.default_rng(0)
        while True:
            obs, reward, terminated, truncated, info = env.step(
                rng.uniform(-5, 5, size=1).astype(np.float32)
            )
            assert np.isfinite(reward) and 0.0 <= reward <= 1.0
            seen.append(obs)
            if terminated or truncated:
                return seen, info

    a, info = rollout(7)
    b, _ = rollout(7)
    c, _ = rollout(8)
    assert len(a) > 20
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert len(a) != len(c) or not all(
        np.array_equal(x, y) for x, y in zip(a, c, strict=True)
    )
    flows = info["results"]["flows"]
    assert flows[0]["alg"] == "mocc" and flows[0]["throughput_mbps"] > 0


def test_bad_inputs_raise_clear_errors() -> None:
    with pytest.raises(ValueError, match="not a trainable"):
        _native.SimEnv(SMALL.sample(random.Random(1), "mocc"), "cubic")
    with pytest.raises(ValueError, match="rtt_ms"):
        _native.SimEnv(
            "duration_s = 1\nseed = 1\n[link]\nrate_mbps = 1\nbuffer_bdp = 1\n"
            "[[flow]]\nalg = \"mocc\"\nrtt_ms = -3\n",
            "mocc",
        )
    env = _native.SimEnv(SMALL.sample(random.Random(1), "mocc"), "mocc")
    env.reset()
    with pytest.raises(RuntimeError, match="action values"):
        env.step(np.zeros((1, 3), dtype=np.float32))


def test_vec_env_shares_one_bottleneck_between_learners() -> None:
    ranges = ScenarioRanges(
        duration_s=(3.0, 3.0),
        rate_mbps=(4.0, 4.0),
        learners=(3, 3),
        stagger_s=(0.5, 0.5),
        preferences=[(0.8, 0.1, 0.1)],
        competitors=[Competitor("cubic", (1, 1))],
    )
    venv = CcpVecEnv("mocc", ranges, seed=3)
    assert venv.num_envs == 3
    obs = venv.reset()
    assert obs.shape == (3, 33)
    saw_done = False
    for _ in range(400):
        obs, rew, dones, infos = venv.step(np.zeros((3, 1), dtype=np.float32))
        assert obs.shape == (3, 33) and rew.shape == (3,)
        if dones.any():
            saw_done = True
            assert "terminal_observation" in infos[0]
            flows = infos[0]["results"]["flows"]
            assert [f["alg"] for f in flows] == ["mocc", "mocc", "mocc", "cubic"]
            break
    assert saw_done
    # the preference vector reaches the learners' observations
    assert np.allclose(obs[0, 30:33], [0.8, 0.1, 0.1])


def test_mixed_preferences_and_scaled_traces_reach_the_flows() -> None:
    trace = str(ROOT / "datapath/sim/scenarios/traces/ATT-LTE-driving-2016.down")
    ranges = ScenarioRanges(
        duration_s=(10.0, 10.0),
        learners=(3, 3),
        preferences=[(0.8, 0.1, 0.1)],
        other_preferences=[(0.1, 0.8, 0.1)],
        mixed_prob=1.0,
        traces=[trace],
        trace_prob=1.0,
        trace_scale=(0.5, 0.5),
    )
    text = ranges.sample(random.Random(1), "mocc")
    assert "trace_scale = 0.5000" in text and "rate_mbps" not in text
    # the first learner keeps the episode's objective, the others draw their own
    assert text.count("w = [0.8, 0.1, 0.1]") == 1 and text.count("w = [0.1, 0.8, 0.1]") == 2
    venv = CcpVecEnv("mocc", ranges, seed=3)
    obs = venv.reset()
    for _ in range(10):
        obs, _, dones, _ = venv.step(np.zeros((3, 1), dtype=np.float32))
        assert not dones.any()
    assert np.allclose(obs[:, 30:33], [[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.8, 0.1]])
    # mixing off draws nothing extra: the seeded scenario sequence is unchanged
    plain = ScenarioRanges(learners=(3, 3), preferences=[(0.8, 0.1, 0.1)])
    off = ScenarioRanges(
        learners=(3, 3), preferences=[(0.8, 0.1, 0.1)], other_preferences=[(0.1, 0.8, 0.1)]
    )
    r1, r2 = random.Random(7), random.Random(7)
    seq1 = [plain.sample(r1, "mocc") for _ in range(3)]
    assert seq1 == [off.sample(r2, "mocc") for _ in range(3)]


def _agent_binary() -> Path:
    subprocess.run(
        ["cargo", "build", "--release", "-q", "-p", "ccp-agent"], cwd=ROOT, check=True
    )
    return ROOT / "target" / "release" / "ccp-agent"


def test_smoke_pipeline_train_export_run_in_agent(tmp_path: Path) -> None:
    """A few hundred PPO steps -> ONNX + card -> `ccp-agent --alg mocc --sim` runs it."""
    venv = CcpVecEnv("mocc", ScenarioRanges(duration_s=(3.0, 3.0), learners=(2, 2)), seed=1)
    model = PPO("MlpPolicy", venv, n_steps=128, batch_size=64, n_epochs=2, seed=1, verbose=0)
    model.learn(total_timesteps=512)
    models = tmp_path / "models"
    models.mkdir()
    onnx_path, card_path = export_sb3_actor(
        model,
        models / "mocc.onnx",
        algorithm="mocc",
        feature_version=venv._env.feature_version,
        training={"command": "pytest smoke", "seed": 1, "steps": 512},
    )
    card = json.loads(Path(card_path).read_text())
    assert card["algorithm"] == "mocc" and card["obs_dim"] == 33
    scenario = tmp_path / "s.toml"
    scenario.write_text(
        "duration_s = 5\nseed = 2\n[link]\nrate_mbps = 10\nbuffer_bdp = 1\n"
        "[[flow]]\nalg = \"mocc\"\nrtt_ms = 30\nw = [0.4, 0.5, 0.1]\n"
        "[[flow]]\nalg = \"cubic\"\nrtt_ms = 30\n"
    )
    out = subprocess.run(
        [str(_agent_binary()), "--alg", "cubic", "--models", str(models), "--sim",
         str(scenario), "--json"],
        capture_output=True, text=True, check=False,
    )
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert [f["alg"] for f in res["flows"]] == ["mocc", "cubic"]
    assert res["flows"][0]["throughput_mbps"] > 0.05
    # a card that does not match its model is a clear start-up error
    card["obs_dim"] = 30
    Path(card_path).write_text(json.dumps(card))
    bad = subprocess.run(
        [str(_agent_binary()), "--alg", "mocc", "--models", str(models), "--sim", str(scenario)],
        capture_output=True, text=True, check=False,
    )
    assert bad.returncode == 2, bad.stderr
    assert "obs_dim" in bad.stderr


def test_results_windows_give_each_running_flows_mean_throughput() -> None:
    """`results(windows=...)`: per window, the flows that ran over all of it and their mean
    throughput; a flow that starts inside a window is left out of it."""
    text = (
        "duration_s = 6\nseed = 2\n[link]\nrate_mbps = 6\nbuffer_bdp = 1\n"
        '[[flow]]\nalg = "mocc"\nrtt_ms = 30\nw = [0.6, 0.3, 0.1]\n'
        '[[flow]]\nalg = "mocc"\nrtt_ms = 30\nstart_s = 3\nw = [0.6, 0.3, 0.1]\n'
    )
    env = _native.SimEnv(text, "mocc")
    n = env.reset()[0].shape[0]
    done = False
    while not done:
        done = env.step(np.zeros((n, 1), dtype=np.float32))[3]
    r = env.results(windows=[(0.0, 6.0), (4.0, 6.0)])
    whole, late = r["throughput_windows"]
    assert [i for i, _ in whole] == [0]
    assert [i for i, _ in late] == [0, 1]
    # the whole-run window of the first flow is its whole-run throughput
    assert whole[0][1] == pytest.approx(r["flows"][0]["throughput_mbps"], rel=0.02)
    assert 0 < sum(v for _, v in late) <= 6.0 * 1.01


def test_a_bad_clock_knob_is_named_at_its_key_with_the_tables_keys() -> None:
    """Owl's and Nuwa-RL's report-clock knobs are plain keys of their tables: a typo lists
    the valid keys, a wrong type points at the key (not at the table's header)."""
    from ccp_train import _native

    for alg in ("owl", "nuwa"):
        with pytest.raises(ValueError) as e:
            _native.dynamics(alg, f"[algs.{alg}]\ninterval_rtt = 1\n")
        assert "unknown field `interval_rtt`" in str(e.value)
        assert "`interval_rtts`" in str(e.value) and "`min_interval_ms`" in str(e.value)
        with pytest.raises(ValueError) as e:
            _native.dynamics(alg, f'[algs.{alg}]\nmin_interval_ms = "x"\n')
        assert "2 | min_interval_ms" in str(e.value), str(e.value)
        with pytest.raises(ValueError, match=f"algs.{alg}.interval_rtts"):
            _native.dynamics(alg, f"[algs.{alg}]\ninterval_rtts = 0\n")
