"""MOCC's trainer (`ccp_train.mocc`): landmarks and Algorithm 1, the preference sub-network,
GAE with masked rows, and a tiny real run train -> ONNX + card -> `ccp-agent --sim`, then
`adapt` with requirement replay."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

# The checkout's package first (as test_export.py), whatever the venv's .pth points at.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import onnxruntime as ort
import pytest
import torch

from ccp_train import _native, mocc
from ccp_train import card as card_mod

ROOT = Path(__file__).resolve().parents[2]

TINY_ENV = [
    "--n-steps", "32", "--learners", "1,2", "--duration-s", "1.5,1.5", "--stagger-s", "0,0.5",
    "--num-minibatches", "2", "--update-epochs", "1", "--seed", "3",
]
TINY_TRAIN = [
    "train", "--bootstrap-iters", "2", "--bootstrap-switch", "1", "--traverse-max-iters", "2",
    "--iters-per-landmark", "1",
    "--conv-scenarios", "1", "--eval-scenarios", "1", *TINY_ENV,
]


@pytest.fixture(autouse=True)
def _one_torch_thread() -> object:
    """Small networks on a busy 2-core machine: more threads only contend (15x slower)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# --- landmarks and Algorithm 1 ---------------------------------------------------------------


def test_landmarks_are_the_36_inner_tenths_of_the_simplex() -> None:
    lms = mocc.landmarks()
    assert len(lms) == 36 and len(set(lms)) == 36
    for w in lms:
        assert abs(sum(w) - 1.0) < 1e-9
        for x in w:
            assert abs(x * 10 - round(x * 10)) < 1e-9 and 1 <= round(x * 10) <= 8
    assert all(b in lms for b in mocc.BOOTSTRAP)


def test_neighbours_follow_the_papers_examples() -> None:
    assert mocc.are_neighbours((0.2, 0.4, 0.4), (0.2, 0.5, 0.3))
    assert mocc.are_neighbours((0.2, 0.4, 0.4), (0.1, 0.5, 0.4))
    assert not mocc.are_neighbours((0.2, 0.4, 0.4), (0.1, 0.3, 0.6))
    assert not mocc.are_neighbours((0.2, 0.4, 0.4), (0.2, 0.4, 0.4))
    degrees = [sum(mocc.are_neighbours(u, v) for v in mocc.landmarks()) for u in mocc.landmarks()]
    assert max(degrees) == 6 and min(degrees) == 2  # hexagonal grid; corners have 2


def test_traversal_order_is_algorithm_1() -> None:
    lms = mocc.landmarks()
    order = mocc.traversal_order(lms)
    assert sorted(order) == sorted(lms)  # every landmark exactly once per cycle
    quota = 12  # ceil(36 / 3) per bootstrap vertex
    assert [order[0], order[quota], order[2 * quota]] == list(mocc.BOOTSTRAP)
    consecutive = 0
    for k, w in enumerate(order):
        start = (k // quota) * quota
        if k == start:
            continue
        # Dijkstra from the region's bootstrap vertex: every landmark is reached from an
        # already-visited neighbour of the same region (fails if an unreachable one is taken)
        assert any(mocc.are_neighbours(w, v) for v in order[start:k]), (k, w)
        consecutive += mocc.are_neighbours(w, order[k - 1])
    # ties go to a neighbour of the previous landmark: the path is mostly unbroken
    assert consecutive >= 30
    # the regions are compact: nothing farther than 3 steps from its bootstrap vertex
    for k, w in enumerate(order):
        b = order[(k // quota) * quota]
        assert sum(abs(x - y) for x, y in zip(w, b, strict=True)) / 2 <= 0.3 + 1e-9


# --- the networks ----------------------------------------------------------------------------


def _obs_with(w: tuple[float, float, float], n: int = 8, seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    state = rng.uniform(-1, 1, size=(n, 30)).astype(np.float32)
    return torch.as_tensor(np.concatenate([state, np.tile(w, (n, 1)).astype(np.float32)], 1))


def test_preference_subnetwork_conditions_actor_and_critic() -> None:
    torch.manual_seed(0)
    agent = mocc.MoccAgent()
    a, b = (0.8, 0.1, 0.1), (0.1, 0.1, 0.8)
    oa, ob = _obs_with(a), _obs_with(b)  # identical network-state features
    ext = torch.zeros(len(oa), mocc.CRITIC_EXTRA)
    with torch.no_grad():
        assert (agent.actor_mean(oa) - agent.actor_mean(ob)).abs().min() > 1e-6
        assert (agent.value(oa, ext) - agent.value(ob, ext)).abs().min() > 1e-6
        # w reaches the towers only through the preference sub-networks
        for tower in (agent.actor, agent.critic):
            for p in tower.pref.parameters():
                p.zero_()
        assert torch.equal(agent.actor_mean(oa), agent.actor_mean(ob))
        assert torch.equal(agent.value(oa, ext), agent.value(ob, ext))


def test_critic_alone_sees_the_reward_memory() -> None:
    """Asymmetric actor-critic: the critic's extra inputs (last reward, moving average) change
    its value; the actor (what is exported) has only the 33 observation inputs."""
    torch.manual_seed(0)
    agent = mocc.MoccAgent()
    obs = _obs_with((0.1, 0.8, 0.1))
    lo, hi = torch.full((8, 2), 0.2), torch.full((8, 2), 0.9)
    with torch.no_grad():
        assert (agent.value(obs, lo) - agent.value(obs, hi)).abs().min() > 1e-6
    assert agent.actor.body[0].in_features == 30 + 16
    assert agent.critic.body[0].in_features == 30 + 16 + mocc.CRITIC_EXTRA
    with pytest.raises(ValueError, match="extra inputs"):
        agent.value(obs)


def test_reward_memory_follows_each_row_and_resets_at_episode_ends() -> None:
    group = mocc.EnvGroup.__new__(mocc.EnvGroup)  # the bookkeeping alone, no simulator
    group.obs = np.zeros((3, mocc.OBS_DIM), dtype=np.float32)
    group.obs[:2, 30:33] = (0.1, 0.8, 0.1)  # rows 0 and 1 active, row 2 not started
    group.extra = np.zeros((3, mocc.CRITIC_EXTRA), dtype=np.float32)
    no = np.zeros(3, dtype=bool)
    group.remember(np.array([0.5, 0.9, 0.0]), no)
    np.testing.assert_allclose(group.extra, [[0.5, 0.5], [0.9, 0.9], [0.0, 0.0]])
    group.remember(np.array([1.0, 0.9, 0.0]), no)
    a = mocc.REWARD_EMA
    np.testing.assert_allclose(group.extra[0], [1.0, 0.5 + a * 0.5], rtol=1e-6)
    term = group.remember(np.array([0.0, 0.7, 0.0]), np.array([False, True, False]))
    assert term[1, 0] == pytest.approx(0.7) and np.all(group.extra[1] == 0.0)


def test_ppo_learns_opposite_actions_for_two_preferences() -> None:
    """Same state, two w: the advantage favours a = +1 under one and a = -1 under the other.
    A few PPO updates must pull the two actor means apart in the right directions."""
    torch.manual_seed(1)
    agent = mocc.MoccAgent()
    wa, wb = (0.6, 0.3, 0.1), (0.1, 0.6, 0.3)
    n = 256
    obs = torch.cat([_obs_with(wa, n, seed=2), _obs_with(wb, n, seed=2)])
    act = torch.cat([torch.full((n, 1), 1.0), torch.full((n, 1), -1.0)])
    act = torch.cat([act, -act])
    obs = torch.cat([obs, obs])
    adv = torch.cat([torch.ones(2 * n), -torch.ones(2 * n)])
    with torch.no_grad():
        logp = agent.dist(obs).log_prob(act).sum(-1)
        ext = torch.zeros(len(obs), mocc.CRITIC_EXTRA)
        values = agent.value(obs, ext)
    batch = mocc.Batch(obs, ext, act, logp, values, adv, values + adv)
    cfg = mocc.PPOConfig(num_minibatches=2, update_epochs=4)
    opt = torch.optim.Adam(agent.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(10):
        with torch.no_grad():
            batch.logp = agent.dist(obs).log_prob(act).sum(-1)
        mocc.ppo_update(agent, opt, [batch], cfg, 0.0, gen)
    with torch.no_grad():
        ma = agent.actor_mean(_obs_with(wa, 16, seed=2)).mean()
        mb = agent.actor_mean(_obs_with(wb, 16, seed=2)).mean()
    assert ma > 0.1 and mb < -0.1, (float(ma), float(mb))


def test_gae_skips_inactive_rows_and_bootstraps_truncations() -> None:
    g, lam = 0.9, 0.5
    r = np.array([[1.0, 0.0], [1.0, 1.0], [1.0, 1.0]])
    v = np.array([[2.0, 0.0], [2.0, 3.0], [2.0, 3.0]])
    done = np.array([[False, False], [True, True], [False, False]])
    valid = np.array([[True, False], [True, True], [True, True]])
    last = np.array([5.0, 7.0])
    adv = mocc.gae(r, v, done, valid, last, g, lam)
    # row 0: t=2 bootstraps from last; t=1 is a (truncated) episode end; t=0 chains to t=1
    assert adv[2, 0] == pytest.approx(1 + g * 5 - 2)
    assert adv[1, 0] == pytest.approx(1 - 2)
    assert adv[0, 0] == pytest.approx((1 + g * 2 - 2) + g * lam * (1 - 2))
    # row 1: t=0 invalid (not started), the episode ends at t=1
    assert adv[1, 1] == pytest.approx(1 - 3)
    assert adv[2, 1] == pytest.approx(1 + g * 7 - 3)


def test_policy_start_episodes_skip_startup_at_a_drawn_rate() -> None:
    """With --policy-start-prob an episode's flows start the policy at once, at a rate drawn
    log-uniformly from --policy-start-mbps; the default episodes start up first."""
    import random

    scenario = (
        "duration_s = 3\nseed = 4\n[link]\nrate_mbps = 4\nbuffer_bdp = 1\n"
        '[[flow]]\nalg = "mocc"\nrtt_ms = 40\nw = [0.4, 0.4, 0.2]\n'
    )
    never = mocc.MoccRanges(policy_start_prob=0.0)
    assert never.algs_toml(random.Random(1)) == never.base_toml()
    assert "startup" not in never.base_toml()
    always = mocc.MoccRanges(policy_start_prob=1.0, policy_start_mbps=(0.5, 2.0))
    rng = random.Random(1)
    rates = []
    for _ in range(50):
        text = always.algs_toml(rng)
        assert text is not None and "startup = false" in text
        rates.append(float(text.split("initial_rate_mbps = ")[1]))
    assert all(0.5 <= r <= 2.0 for r in rates) and min(rates) < 0.8 and max(rates) > 1.3
    # without start-up the first decision comes after the first MI (100 ms), not after the
    # doubling phase; the first action sets the rate relative to the drawn one
    t_first = []
    for algs in (None, "[algs.mocc]\nstartup = false\ninitial_rate_mbps = 1.0\n"):
        env = _native.SimEnv(scenario, "mocc", algs_toml=algs)
        t_first.append(float(env.reset()[4]))
    assert t_first[1] < 0.2 < t_first[0]
    # the flag reaches the environments of a training run (and the card's ranges)
    args = mocc.build_parser().parse_args(["train", "--policy-start-prob", "0.25"])
    ranges = mocc.ranges_from_args(args)
    assert ranges.policy_start_prob == 0.25 and ranges.describe()["policy_start_prob"] == 0.25
    bad = mocc.build_parser().parse_args(["train", "--policy-start-mbps", "3,1"])
    with pytest.raises(SystemExit, match="policy-start-mbps"):
        mocc.ranges_from_args(bad)


def test_mocc_knobs_reach_every_episode_and_change_the_dynamics() -> None:
    """--additive-increase-pkts/-cap go into every episode's [algs.mocc] table (with or
    without a policy start), into the evaluation table and the card's ranges; a flow holding
    a = 0 below the capacity climbs only with the additive increase."""
    import random

    args = mocc.build_parser().parse_args(
        ["train", "--additive-increase-pkts", "0.5", "--additive-increase-cap", "0.05",
         "--additive-increase-min-action", "0", "--policy-start-prob", "0.5"]
    )
    ranges = mocc.ranges_from_args(args)
    base = ranges.base_toml()
    assert base is not None and "additive_increase_pkts = 0.5" in base
    assert "additive_increase_cap = 0.05" in base
    assert "additive_increase_min_action = 0.0" in base
    # the agent's deploy-time fairness guards stay out of training
    assert "min_rate_pkts = 0.0" in base and "share_probe_every_mis = 0" in base
    rng = random.Random(3)
    texts = [ranges.algs_toml(rng) for _ in range(40)]
    assert all(t is not None and t.startswith(base) for t in texts)
    assert any("startup = false" in t for t in texts if t)
    assert any("startup = false" not in t for t in texts if t)
    assert ranges.describe()["mocc_knobs"] == {
        "additive_increase_pkts": 0.5,
        "additive_increase_cap": 0.05,
        "additive_increase_min_action": 0.0,
    }
    # unset flags take the agent's defaults, so the card always records the dynamics
    defaults = dict(mocc.ranges_from_args(mocc.build_parser().parse_args(["train"])).knobs)
    native = _native.defaults("mocc")
    assert defaults == {k: native[k] for k in mocc.DYNAMICS_KNOBS}
    # domain randomization: training episodes draw kappa, evaluation keeps the flag's value
    args = mocc.build_parser().parse_args(
        ["train", "--additive-increase-pkts", "0.25", "--additive-increase-range", "0,0.5"]
    )
    ranges = mocc.ranges_from_args(args)
    assert "additive_increase_pkts = 0.25" in (ranges.base_toml() or "")
    rng = random.Random(5)
    drawn = [
        float((ranges.algs_toml(rng) or "").split("additive_increase_pkts = ")[1].split()[0])
        for _ in range(60)
    ]
    assert all(0 <= k <= 0.5 for k in drawn) and min(drawn) < 0.1 and max(drawn) > 0.4
    assert ranges.describe()["additive_increase_range"] == [0.0, 0.5]
    bad = mocc.build_parser().parse_args(["train", "--additive-increase-range", "0.5,0.1"])
    with pytest.raises(SystemExit, match="additive-increase-range"):
        mocc.ranges_from_args(bad)

    bad = mocc.build_parser().parse_args(["train", "--additive-increase-pkts", "-1"])
    with pytest.raises(SystemExit, match="additive-increase-pkts"):
        mocc.ranges_from_args(bad)

    scenario = (
        "duration_s = 6\nseed = 4\n[link]\nrate_mbps = 4\nbuffer_bdp = 1\n"
        '[[flow]]\nalg = "mocc"\nrtt_ms = 40\nw = [0.4, 0.4, 0.2]\n'
    )
    start = mocc.MoccRanges().base_toml() + "startup = false\ninitial_rate_mbps = 0.5\n"
    thr = []
    for extra in ("additive_increase_pkts = 0.0\n", "additive_increase_pkts = 0.5\n"):
        env = _native.SimEnv(scenario, "mocc", algs_toml=start + extra)
        env.reset()
        done = False
        while not done:
            done = env.step(np.zeros((1, 1), dtype=np.float32))[3]
        thr.append(env.results()["flows"][0]["throughput_mbps"])
    assert thr[0] == pytest.approx(0.5, rel=0.1) and thr[1] > 1.5 * thr[0], thr


# --- a tiny real run -------------------------------------------------------------------------


def _agent_binary() -> Path:
    if os.environ.get("CCP_AGENT"):
        return Path(os.environ["CCP_AGENT"])
    binary = ROOT / "target" / "release" / "ccp-agent"
    build = subprocess.run(
        ["cargo", "build", "--release", "-q", "-p", "ccp-agent"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )
    if build.returncode != 0:
        if not binary.exists():
            pytest.fail(f"cargo build failed:\n{build.stderr}")
        warnings.warn(f"cargo build failed, using the existing {binary}", stacklevel=2)
    return binary


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("mocc")
    summary = mocc.main([*TINY_TRAIN, "--out", str(out)])
    return out, summary


def test_train_writes_a_valid_model_and_card(tiny: tuple[Path, dict]) -> None:
    out, summary = tiny
    assert summary["iterations"] == 4 and summary["transitions"] > 0
    card = card_mod.check_card(out / "mocc.json")  # schema, sha256, I/O read from the file
    probe = _native.SimEnv(mocc.eval_scenarios(mocc.MoccRanges(), 1, 0)[0], "mocc")
    assert card["algorithm"] == "mocc"
    assert card["feature_version"] == probe.feature_version
    assert card["obs_dim"] == 33 and card["act_dim"] == 1
    assert card["action_low"] == [-5.0] and card["action_high"] == [5.0]
    assert card["dynamics"] == _native.dynamics("mocc", mocc.MoccRanges().base_toml())
    t = card["training"]
    assert t["command"].startswith("python -m ccp_train.mocc train") and "--seed 3" in t["command"]
    assert t["seed"] == 3 and t["steps"] == summary["transitions"]
    defaults = mocc.build_parser().parse_args(["train"])  # TINY_TRAIN keeps the default ranges
    assert t["scenario_ranges"]["rate_mbps"] == list(defaults.rate_mbps)
    assert t["scenario_ranges"]["rtt_ms"] == list(defaults.rtt_ms) and "wall" in t["notes"]
    ev = card["evaluation"]
    assert len(ev["per_landmark"]) == 36 and ev["iterations"] == 4
    assert all(0.0 <= x["reward"] <= 1.0 for x in ev["per_landmark"].values())
    log = [json.loads(line) for line in (out / "mocc.train.jsonl").read_text().splitlines()]
    its = [r for r in log if r["kind"] == "iteration"]
    assert [r["phase"] for r in its] == ["bootstrap", "bootstrap", "traverse", "traverse"]
    assert [r["objective"] for r in its[:2]] == ["0.6,0.3,0.1", "0.1,0.6,0.3"]
    for k in ("reward", "pg_loss", "v_loss", "entropy", "approx_kl", "clipfrac", "sps"):
        assert all(np.isfinite(r[k]) for r in its), k


def test_cycles_stop_once_every_landmark_converged_and_resume(tmp_path: Path) -> None:
    """Full phase-2 cycles (1 iteration per landmark, tiny rollouts): with a tolerance every
    change passes, all 36 converge at the second cycle (patience 1) and training stops there;
    the per-cycle checkpoint restarts training with its counters."""
    quick = [
        "--n-steps", "8", "--learners", "1", "--duration-s", "1,1", "--stagger-s", "0,0",
        "--num-minibatches", "1", "--update-epochs", "1", "--conv-scenarios", "1",
        "--eval-scenarios", "1", "--iters-per-landmark", "1",
    ]
    out = tmp_path / "a"
    summary = mocc.main([
        "train", "--out", str(out), "--bootstrap-iters", "0", "--max-cycles", "4",
        "--min-cycles", "1", "--conv-tol", "1e9", "--conv-patience", "1", *quick,
    ])
    assert summary["iterations"] == 2 * 36
    log = [json.loads(line) for line in (out / "mocc.train.jsonl").read_text().splitlines()]
    cycles = [r for r in log if r["kind"] == "cycle"]
    assert [c["converged"] for c in cycles] == [0, 36]
    objectives = [r["objective"] for r in log if r["kind"] == "iteration"][:36]
    assert objectives == [mocc.fmt_pref(w) for w in mocc.traversal_order(mocc.landmarks())]
    ev = json.loads((out / "mocc.json").read_text())["evaluation"]
    assert ev["converged"] is True and ev["cycles"] == 2
    resumed = mocc.main([
        "train", "--out", str(tmp_path / "b"), "--init", str(out / "mocc.resume.pt"),
        "--bootstrap-iters", "1", "--traverse-max-iters", "1", *quick,
    ])
    assert resumed["iterations"] == 2 * 36 + 2
    # the fine-tuned card's command reproduces it: the starting point's command, then its own
    first = json.loads((out / "mocc.json").read_text())["training"]["command"]
    chained = json.loads((tmp_path / "b" / "mocc.json").read_text())["training"]["command"]
    head, tail = chained.split(" && ")
    assert head == first and tail.startswith("python -m ccp_train.mocc train") and "--init" in tail
    # a checkpoint that stores no command: the card beside it names one only if it describes
    # the checkpoint's model
    ckpt = mocc.load_checkpoint(out / "mocc.pt")
    assert ckpt["command"] == first
    ckpt["command"] = None
    assert mocc.init_command(out / "mocc.pt", ckpt) == first
    ckpt["onnx_sha256"] = "0" * 64
    with pytest.raises(SystemExit, match="records no training command"):
        mocc.init_command(out / "mocc.pt", ckpt)


def test_onnx_equals_the_torch_actor_mean(tiny: tuple[Path, dict]) -> None:
    out, _ = tiny
    agent = mocc.agent_from_checkpoint(mocc.load_checkpoint(out / "mocc.pt"))
    rng = np.random.default_rng(0)
    state = rng.uniform(-1, 3, size=(64, 30)).astype(np.float32)
    w = rng.dirichlet([1, 1, 1], size=64).astype(np.float32)
    obs = np.concatenate([state, w], axis=1)
    sess = ort.InferenceSession(str(out / "mocc.onnx"), providers=["CPUExecutionProvider"])
    (onnx_out,) = sess.run(["action"], {"obs": obs})
    with torch.no_grad():
        torch_out = agent.actor_mean(torch.as_tensor(obs)).numpy()
    assert onnx_out.shape == (64, 1)
    np.testing.assert_allclose(onnx_out, torch_out, atol=1e-5, rtol=0)


def test_agent_runs_the_trained_model(tiny: tuple[Path, dict], tmp_path: Path) -> None:
    out, _ = tiny
    scenario = tmp_path / "s.toml"
    scenario.write_text(
        "duration_s = 4\nseed = 2\n[link]\nrate_mbps = 8\nbuffer_bdp = 1\n"
        "[[flow]]\nalg = \"mocc\"\nrtt_ms = 30\nw = [0.6, 0.3, 0.1]\n"
        "[[flow]]\nalg = \"mocc\"\nrtt_ms = 30\nw = [0.1, 0.6, 0.3]\n"
    )
    # the agent serves the dynamics the model trained under (the card's)
    config = tmp_path / "algs.toml"
    config.write_text(mocc.MoccRanges().base_toml())
    run = subprocess.run(
        [str(_agent_binary()), "--alg", "mocc", "--models", str(out), "--sim", str(scenario),
         "--config", str(config), "--json"],
        capture_output=True, text=True, check=False,
    )
    assert run.returncode == 0, run.stderr
    res = json.loads(run.stdout)
    assert [f["alg"] for f in res["flows"]] == ["mocc", "mocc"]
    assert all(f["throughput_mbps"] > 0.05 for f in res["flows"])


def test_adapt_with_requirement_replay(
    tiny: tuple[Path, dict], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, _ = tiny
    adapted = tmp_path / "adapted"
    report = mocc.main([
        "adapt", "--w", "0.45,0.35,0.2", "--model", str(out / "mocc.onnx"), "--out", str(adapted),
        "--iters", "2", "--adapt-eval-scenarios", "1", *TINY_ENV,
    ])
    text = capsys.readouterr().out
    assert "reached 99% of its best held-out reward" in text and "% kept" in text
    assert report["replay"] and report["iterations"] == 2
    assert 0 <= report["iterations_to_99pct_best"] <= 2 and report["wall_s_to_99pct_best"] >= 0
    assert report["reward_old_kept_pct"] > 0
    assert report["w_old"] == "0.1,0.1,0.8"  # the landmark farthest from w_new
    card = card_mod.check_card(adapted / "mocc.json")
    assert card["evaluation"]["adaptation"]["w_new"] == "0.45,0.35,0.2"
    ckpt = mocc.load_checkpoint(adapted / "mocc.pt")
    # the new objective joins the stored ones that later adaptations replay
    assert [0.45, 0.35, 0.2] in ckpt["pool"] and len(ckpt["pool"]) == 37
    assert ckpt["iteration"] == 6
    log = [json.loads(line) for line in (adapted / "mocc.adapt.jsonl").read_text().splitlines()]
    its = [r for r in log if r["kind"] == "iteration"]
    assert len(its) == 2 and all(r["objective"] == "0.45,0.35,0.2" for r in its)
    assert all(r["replay_objective"] in {mocc.fmt_pref(w) for w in mocc.landmarks()} for r in its)
    # a checkpoint that does not belong to the model is refused
    with pytest.raises(SystemExit, match="different ONNX model"):
        mocc.main([
            "adapt", "--w", "0.5,0.2,0.3", "--model", str(adapted / "mocc.onnx"),
            "--checkpoint", str(out / "mocc.pt"), "--out", str(tmp_path / "x"), *TINY_ENV,
        ])
