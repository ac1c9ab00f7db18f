"""Owl's DQN trainer (``ccp_train.owl``) and what it stands on: the state mask reaches Python with
each step (0 for PNC/PNA in episodes without ``[netstats]``, 1 with, the samples delivered to
Owl's core), the per-transition reward over every report since an action, the discrete masked
Gymnasium env, and a tiny real run: same seed, same bytes; an ONNX model (``obs``, ``mask`` ->
7 Q-values) equal to the torch Q-network, masked and unmasked; a card the agent's model
contract accepts, served by ``ccp-agent --sim`` with and without statistics."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import subprocess
import sys
import warnings
from pathlib import Path

# The checkout's package first (as test_export.py), whatever the venv's .pth points at.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gymnasium as gym
import numpy as np
import onnxruntime as ort
import pytest
import torch
from gymnasium.utils.env_checker import check_env

import ccp_train  # noqa: F401  (registers the environments)
from ccp_train import _native, owl
from ccp_train import card as card_mod
from ccp_train.envs import CcpVecEnv
from ccp_train.rl.spec import AlgSpec
from ccp_train.scenarios import ScenarioRanges

ROOT = Path(__file__).resolve().parents[2]
SPEC = AlgSpec.of("owl")
K = 5  # history
# feature rows (algs/src/owl/core.rs, `feature`): feature f of slot j is obs[f * K + j]
RTT, PNC, PNA, KNOWN = 1, 7, 8, 9

TINY = [
    "train", "--steps", "600", "--learning-starts", "200", "--train-every", "4",
    "--target-update", "200", "--log-interval", "200", "--log-every", "1000", "--envs", "2",
    "--duration-s", "4,4", "--rate-mbps", "6,20", "--rtt-ms", "10,30", "--buffer-pkts", "20,200",
    "--multi-prob", "0.5", "--max-flows", "2", "--stagger-s", "0,0.5", "--netstats-prob", "0.5",
    "--trace-prob", "0.5", "--net", "64,32", "--eps-fraction", "0.9",
]


@pytest.fixture(autouse=True)
def _restore_torch() -> object:
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(False)


def _scenario(netstats: bool, flows: int = 1) -> str:
    text = ("duration_s = 5\nseed = 3\n[link]\nrate_mbps = 12\nbuffer_pkts = 60\n"
            + "".join(f'[[flow]]\nalg = "owl"\nrtt_ms = 20\nstart_s = {0.5 * i}\n'
                      for i in range(flows)))
    if netstats:
        text += "[netstats]\nperiod_s = 1.0\nknown_share = 0.4\n"
    return text


def _run(env: _native.SimEnv, action: float = 4.0) -> list[tuple]:
    """Every (obs, mask, reward, span sum, span count, time) of an active learner until done."""
    out = env.reset()
    seen = []
    while not out[3]:
        obs, rew, active, _done, t, mask = out
        sums, counts = env.span_rewards()
        for i in np.flatnonzero(active):
            seen.append((obs[i].copy(), mask[i].copy(), float(rew[i]), float(sums[i]),
                         int(counts[i]), t))
        out = env.step(np.full((env.num_learners, 1), action, np.float32))
    return seen


# --- the bindings ----------------------------------------------------------------------------


def test_the_spec_says_discrete_and_masked() -> None:
    s = _native.spec("owl")
    assert s["n_actions"] == 7 and s["masked"] and s["act_dim"] == 1
    assert (s["action_low"], s["action_high"]) == ([0.0], [6.0])
    assert SPEC.n_actions == 7 and SPEC.obs_dim == 50
    assert _native.spec("mocc")["n_actions"] is None and _native.spec("jury")["n_actions"] is None
    env = _native.SimEnv(_scenario(False), "owl")
    assert env.n_actions == 7 and env.masked


def test_the_mask_reaches_python_and_marks_the_statistics() -> None:
    without = _run(_native.SimEnv(_scenario(False), "owl", with_mask=True))
    with_ = _run(_native.SimEnv(_scenario(True), "owl", with_mask=True))
    assert len(without) > 50 and len(with_) > 50
    for obs, mask, *_ in without:
        assert set(np.unique(mask)) <= {0.0, 1.0}
        # no statistics: PNC and PNA absent in every slot, zero; the known share present, 0
        assert not mask[PNC * K:(PNA + 1) * K].any() and not obs[PNC * K:(PNA + 1) * K].any()
        assert (obs[KNOWN * K + K - 1], mask[KNOWN * K + K - 1]) == (0.0, 1.0)
        # the end-to-end features are there
        assert mask[RTT * K + K - 1] == 1.0
    # with [netstats]: the bottleneck's samples (every second) reach the core, present
    late = [(o, m) for o, m, *_, t in with_ if t > 1.2]
    assert late
    for obs, mask in late:
        newest = [f * K + K - 1 for f in (PNC, PNA, KNOWN)]
        assert mask[newest].tolist() == [1.0, 1.0, 1.0]
        assert obs[KNOWN * K + K - 1] == pytest.approx(0.4)
        assert 0.0 <= obs[PNA * K + K - 1] <= 1.0
    assert any(o[PNC * K + K - 1] > 0 for o, _ in late), "no PNC sample above 0"
    # before the first sample (1 s) they are masked there too
    early = [(o, m) for o, m, *_, t in with_ if t < 0.9]
    assert early and all(not m[PNC * K:(PNA + 1) * K].any() for _, m in early)
    # masked values are zero, always
    for obs, mask, *_ in with_ + without:
        assert not obs[mask == 0.0].any()


def test_callers_without_the_flag_get_what_they_got() -> None:
    env = _native.SimEnv(_scenario(True), "owl")
    out = env.reset()
    assert len(out) == 5
    mocc = _native.SimEnv("duration_s = 2\n[link]\nrate_mbps = 5\n[[flow]]\nalg = \"mocc\"\n"
                          "rtt_ms = 30\n", "mocc", with_mask=True)
    obs, _r, _a, _d, _t, mask = mocc.reset()
    assert mask.shape == obs.shape and (mask == 1.0).all()


def test_span_rewards_cover_every_report_since_the_action() -> None:
    seen = _run(_native.SimEnv(_scenario(True, flows=2), "owl", with_mask=True), action=5.0)
    assert all(n >= 1 and np.isfinite(s) for *_, s, n, _t in seen)
    single = [(r, s) for _o, _m, r, s, n, _t in seen if n == 1]
    assert len(single) > 20 and all(r == s for r, s in single)
    # +3 packets per RTT into a 60-packet buffer: losses, whose recovery has no decision
    assert any(n > 1 for *_, n, _t in seen)


def test_gymnasium_owl_is_discrete_and_observes_obs_and_mask() -> None:
    ranges = ScenarioRanges(duration_s=(3.0, 3.0), rate_mbps=(6.0, 12.0), rtt_ms=(10.0, 30.0),
                            netstats_prob=0.5, known_share=(0.2, 1.0))
    env = gym.make("ccp/Owl-v0", ranges=ranges, seed=2)
    assert env.action_space == gym.spaces.Discrete(7)
    assert env.observation_space.shape == (100,)
    check_env(env.unwrapped, skip_render_check=True)
    masks = set()
    for seed in range(4):
        obs, _ = env.reset(seed=seed)
        done = False
        while not done:
            obs, r, _term, done, info = env.step(env.action_space.sample())
            assert np.isfinite(r) and env.observation_space.contains(obs)
            if info["active"]:
                masks.add(float(obs[50 + PNC * K + K - 1]))
    # episodes with and without statistics: PNC's newest mask both ways
    assert masks == {0.0, 1.0}
    # two learners on one bottleneck as SB3 sub-environments
    venv = CcpVecEnv("owl", dataclasses.replace(ranges, learners=(2, 2)), seed=1)
    assert venv.action_space == gym.spaces.Discrete(7)
    obs = venv.reset()
    assert obs.shape == (2, 100)
    for _ in range(50):
        obs, rew, _dones, _infos = venv.step(np.array([4, 2]))
        assert obs.shape == (2, 100) and np.isfinite(rew).all()
        assert not obs[:, :50][obs[:, 50:] == 0.0].any()
    # the draws of other ranges are those they had before `netstats_prob` existed
    r1, r2 = random.Random(5), random.Random(5)
    plain = ScenarioRanges(rate_mbps=(6.0, 12.0))
    off = ScenarioRanges(rate_mbps=(6.0, 12.0), netstats_prob=0.0, known_share=(0.5, 0.5))
    assert [plain.sample(r1, "owl") for _ in range(3)] == [off.sample(r2, "owl")
                                                           for _ in range(3)]


# --- the trainer -----------------------------------------------------------------------------


def test_masked_input_zeroes_absent_features_and_passes_the_mask() -> None:
    layer = owl.MaskedInput(gym.spaces.Box(-1, 1, (6,), np.float32))
    x = torch.tensor([[0.5, 0.75, -0.25, 1.0, 0.0, 1.0]])
    assert layer(x).tolist() == [[0.5, 0.0, -0.25, 1.0, 0.0, 1.0]]


def test_episodes_draw_the_papers_ranges() -> None:
    eps = owl.OwlEpisodes(multi_prob=0.5, max_flows=3, stagger_s=(0.0, 1.0), netstats_prob=0.5,
                          known_share=(0.2, 1.0), traces=(), trace_prob=0.0)
    rng = random.Random(1)
    import tomllib
    drawn = [eps.sample(rng) for _ in range(200)]
    flows = [info["flows"] for _, info in drawn]
    assert set(flows) == {1, 2, 3}
    stats = [info["netstats"] for _, info in drawn]
    assert 60 < sum(stats) < 140
    for text, info in drawn:
        sc = tomllib.loads(text)
        assert 6.0 <= sc["link"]["rate_mbps"] <= 100.0
        assert 3 <= sc["link"]["buffer_pkts"] <= 2000
        assert all(1.0 <= f["rtt_ms"] <= 40.0 for f in sc["flow"])
        assert len(sc["flow"]) == info["flows"]
        assert ("netstats" in sc) == info["netstats"]
        if info["netstats"]:
            assert 0.2 <= sc["netstats"]["known_share"] <= 1.0
    # log-uniform buffers: the shallow decade is drawn as often as the deep one
    buffers = [tomllib.loads(t)["link"]["buffer_pkts"] for t, _ in drawn]
    assert sum(b < 30 for b in buffers) > 40


def test_the_capacity_unit_pays_for_filling_the_link(tmp_path: Path) -> None:
    # eq. 7 with lambda in units of the link's capacity (--reward-unit capacity) against the
    # flow's own best rate: a flow that holds half the link's window earns half of the
    # throughput term, where in its own best rate it looks full
    text = ("duration_s = 4\nseed = 3\n[link]\nrate_mbps = 12\nbuffer_pkts = 60\n"
            '[[flow]]\nalg = "owl"\nrtt_ms = 20\n')
    eps = owl.OwlEpisodes(traces=(), trace_prob=0.0)
    _, info = eps.sample(random.Random(1))
    assert 6.0 <= info["capacity_mbps"] <= 100.0
    trace = ROOT / "datapath/sim/scenarios/traces/twelve-mbps.trace"
    assert owl.trace_mean_mbps(str(trace)) == pytest.approx(12.0, rel=0.01)

    def last_rewards(algs_toml: str) -> list[float]:
        env = _native.SimEnv(text, "owl", algs_toml=algs_toml, pause="any", with_mask=True)
        # hold the window (action 3: +0) after slow start: the rewards of the late reports
        return [r[2] for r in _run(env, 3.0)[-10:]]

    own = last_rewards("[algs.owl]\n")
    cap = last_rewards("[algs.owl]\nreward_rate_unit_mbps = 12.0\n")
    twice = last_rewards("[algs.owl]\nreward_rate_unit_mbps = 24.0\n")
    assert own and len(own) == len(cap) == len(twice)
    # the same flow: only the unit differs; measured against a link twice as fast the
    # throughput term halves, so every reward drops (by half the throughput term)
    assert all(t < c for t, c in zip(twice, cap, strict=True))
    assert not np.allclose(own, twice)


def test_the_interval_unit_is_the_link_capacity_over_each_report(tmp_path: Path) -> None:
    # --reward-unit interval: lambda in the bottleneck's capacity over each report's interval.
    # On a constant 12 Mbit/s link that is the configured 12 Mbit/s unit, report by report
    # (the simulator's clock and the link's capacity line up); after the link steps to
    # 24 Mbit/s the same window earns half the throughput term
    base = ("duration_s = 4\nseed = 3\n[link]\nrate_mbps = 12\nbuffer_pkts = 60\n"
            '[[flow]]\nalg = "owl"\nrtt_ms = 20\n')

    def rewards(text: str, algs_toml: str, interval: bool) -> list[tuple[float, float]]:
        env = _native.SimEnv(text, "owl", algs_toml=algs_toml, pause="any", with_mask=True,
                             reward_in_capacity=interval)
        return [(r[2], r[5]) for r in _run(env, 3.0)]

    fixed = rewards(base, "[algs.owl]\nreward_rate_unit_mbps = 12.0\n", False)
    per_report = rewards(base, "[algs.owl]\n", True)
    assert len(fixed) > 20
    assert np.allclose([r for r, _ in fixed], [r for r, _ in per_report], atol=1e-9)

    stepped = base.replace("buffer_pkts = 60\n",
                           "buffer_pkts = 60\nrate_schedule = [{ at_s = 2.5, rate_mbps = 24 }]\n")
    step = rewards(stepped, "[algs.owl]\n", True)
    step12 = rewards(stepped, "[algs.owl]\nreward_rate_unit_mbps = 12.0\n", False)
    # the same run (the window is held: action +0), only the unit differs: the same rewards
    # before the step, and once a report's interval lies wholly past it the interval unit is
    # 24 Mbit/s, so the throughput term (half of lambda at delta 0.5) halves
    assert [t for _, t in step] == [t for _, t in step12]
    pairs = list(zip(step, step12, strict=True))
    assert np.allclose([a for (a, t), _ in pairs if t < 2.4], [b for _, (b, t) in pairs if t < 2.4],
                       atol=1e-9)
    late = [(a, b) for (a, t), (b, _) in pairs if t > 3.0]
    assert late and all(b - a > 0.1 for a, b in late)


def _agent_binary() -> Path:
    if os.environ.get("CCP_AGENT"):
        return Path(os.environ["CCP_AGENT"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    binary = target / "release" / "ccp-agent"
    build = subprocess.run(["cargo", "build", "--release", "-q", "-p", "ccp-agent"],
                           cwd=ROOT, capture_output=True, text=True, check=False)
    if build.returncode != 0:
        if not binary.exists():
            pytest.fail(f"cargo build failed:\n{build.stderr}")
        warnings.warn(f"cargo build failed, using the existing {binary}", stacklevel=2)
    return binary


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("owl")
    for name, seed in (("a", "3"), ("b", "3"), ("c", "4")):
        assert owl.main([*TINY, "--seed", seed, "--out", str(out / name)]) == 0
    return out


def test_same_seed_same_bytes_and_a_valid_card(tiny: Path) -> None:
    a, b, c = (tiny / n / "owl.onnx" for n in "abc")
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    card = card_mod.check_card(tiny / "a/owl.json")  # schema, sha256, I/O read from the file
    assert card["algorithm"] == "owl" and card["feature_version"] == SPEC.feature_version
    assert card["output_kind"] == "q_values" and card["n_actions"] == 7
    assert (card["obs_dim"], card["act_dim"]) == (50, 1) and card["masked"] is True
    assert (card["action_low"], card["action_high"]) == ([0.0], [6.0])
    assert card["recurrent"] is None and card["normalization"] is None
    assert [(t["name"], t["shape"]) for t in card["inputs"]] == [("obs", [-1, 50]),
                                                                 ("mask", [-1, 50])]
    assert [(t["name"], t["shape"]) for t in card["outputs"]] == [("action", [-1, 7])]
    # the agent's dynamics, the reward's knobs left out (recorded in the notes)
    assert card["dynamics"] == dict(_native.dynamics("owl"))
    assert not {"delta", "beta"} & set(card["dynamics"])
    t = card["training"]
    assert t["command"].startswith("python -m ccp_train.owl train") and "--seed 3" in t["command"]
    assert t["seed"] == 3 and t["steps"] >= 600 and t["wall_s"] > 0
    assert "stable-baselines3" in t["library"] and "DQN" in t["library"]
    assert "beta = 0.5" in t["notes"] and "delta = 0.5" in t["notes"]
    r = t["scenario_ranges"]
    assert r["rate_mbps"] == [6.0, 20.0] and r["buffer_pkts"] == [20.0, 200.0]
    assert r["netstats"]["prob"] == 0.5 and r["flows"]["max"] == 2
    assert r["traces"] == [] and r["trace_source"]["source"] == "corpus train split"
    assert t["determinism"]["threads"] == 1 and t["determinism"]["deterministic_algorithms"]
    # the log: both kinds of episodes, several flows, updates, curves
    log = [json.loads(x) for x in (tiny / "a/owl.train.jsonl").read_text().splitlines()]
    done = next(x for x in log if x["kind"] == "done")
    assert 0 < done["episodes_with_netstats"] < done["episodes"] and done["updates"] > 0
    its = [x for x in log if x["kind"] == "iteration"]
    assert len(its) == 3 and all(np.isfinite(x["reward"]) for x in its)
    assert its[-1]["q_loss"] is not None and its[0]["epsilon"] > its[-1]["epsilon"]
    header = (tiny / "a/owl.curves.csv").read_text().splitlines()[0].split(",")
    assert {"reward", "q_loss", "epsilon"} <= set(header)


def test_building_the_model_leaves_no_folder_in_tmp(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # SB3's configure(None, []) made an empty $TMPDIR/SB3-<date> per model built (140 of them
    # after one test run); the quiet logger writes nowhere
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    args = owl.parser().parse_args([*TINY, "--out", str(tmp_path / "x")])
    model = owl.make_dqn(SPEC, args)
    model.logger.record("q_loss", 1.0)
    model.logger.dump(0)
    assert [p.name for p in (tmp_path / "tmp").glob("SB3-*")] == []


def test_onnx_equals_the_torch_q_network_masked_and_unmasked(tiny: Path) -> None:
    args = owl.parser().parse_args([*TINY, "--out", str(tiny / "x")])
    model = owl.make_dqn(SPEC, args)
    model.set_parameters(str(tiny / "a/owl.zip"), exact_match=True, device="cpu")
    q = owl.OwlQ(model.q_net).eval()
    sess = ort.InferenceSession(str(tiny / "a/owl.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    obs = rng.uniform(0, 1, (16, 50)).astype(np.float32)
    unmasked = np.ones((16, 50), np.float32)
    masked = unmasked.copy()
    stats = np.r_[PNC * K:(PNA + 1) * K]
    masked[:, stats] = 0.0
    outs = {}
    for name, mask in (("unmasked", unmasked), ("masked", masked)):
        x = obs * mask
        (onnx_q,) = sess.run(["action"], {"obs": x, "mask": mask})
        with torch.no_grad():
            torch_q = q(torch.as_tensor(x), torch.as_tensor(mask)).numpy()
        assert onnx_q.shape == (16, 7)
        np.testing.assert_allclose(onnx_q, torch_q, atol=1e-5, rtol=0)
        outs[name] = onnx_q
    # the mask is an input: the same features read differently masked
    assert not np.allclose(outs["masked"], outs["unmasked"])
    # and it zeroes what it masks: values under a 0 do not matter
    noisy = obs.copy()
    noisy[:, stats] = 9.0
    (onnx_noisy,) = sess.run(["action"], {"obs": noisy * 1.0, "mask": masked})
    np.testing.assert_allclose(onnx_noisy, outs["masked"], atol=1e-6, rtol=0)


def test_agent_serves_the_trained_model_with_and_without_statistics(
        tiny: Path, tmp_path: Path) -> None:
    models = tiny / "a"
    for netstats in (True, False):
        scenario = tmp_path / f"s{int(netstats)}.toml"
        scenario.write_text(_scenario(netstats, flows=2))
        run = subprocess.run(
            [str(_agent_binary()), "--alg", "owl", "--models", str(models), "--sim",
             str(scenario), "--json"],
            capture_output=True, text=True, check=False)
        assert run.returncode == 0, run.stderr
        res = json.loads(run.stdout)
        assert [f["alg"] for f in res["flows"]] == ["owl", "owl"]
        assert all(f["throughput_mbps"] > 0.1 for f in res["flows"])
    # under other dynamics the agent refuses the model, naming the knob
    config = tmp_path / "other.toml"
    config.write_text("[algs.owl]\nstats_stale_ms = 3000.0\n")
    run = subprocess.run(
        [str(_agent_binary()), "--alg", "owl", "--models", str(models), "--sim",
         str(tmp_path / "s1.toml"), "--config", str(config), "--json"],
        capture_output=True, text=True, check=False)
    assert run.returncode != 0 and "stats_stale_ms" in run.stderr, run.stderr


def test_bad_flags_are_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert owl.main(["train", "--out", str(tmp_path), "--netstats-prob", "1.5"]) == 2
    assert "--netstats-prob" in capsys.readouterr().err
    assert owl.main(["train", "--out", str(tmp_path), "--known-share", "0,1"]) == 2
    assert "--known-share" in capsys.readouterr().err
    assert owl.main(["train", "--out", str(tmp_path), "--max-flows", "4",
                     "--stagger-s", "0,5", "--duration-s", "10,30"]) == 2
    assert "--stagger-s" in capsys.readouterr().err
    assert owl.main(["train", "--out", str(tmp_path), "--traces", "nope.down"]) == 2
    assert "--traces" in capsys.readouterr().err
    with pytest.raises(ValueError, match="no such knob"):
        owl.main(["train", "--out", str(tmp_path), "--knob", "gain=2"])
