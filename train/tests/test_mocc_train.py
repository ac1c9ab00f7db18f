"""MOCC's trainer (`ccp_train.mocc`) and the shared RL code it runs on (`ccp_train.rl`):
landmarks and Algorithm 1, the preference sub-network, GAE with masked rows, the dynamics a
run trains under (the agent's, `--knob`), rollouts in worker processes and on Ray giving the
serial path's transitions, and a tiny real run train -> ONNX + card -> `ccp-agent --sim`
(default config), then `adapt` with requirement replay."""

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
from ccp_train.rl import checkpoint
from ccp_train.rl.ppo import Batch, PPOConfig, RewardMemory, gae, ppo_update
from ccp_train.rl.spec import AlgSpec, Knobs
from ccp_train.rl.vec import Lockstep, ProcessPool, SerialPool
from ccp_train.scenarios import Episodes, EpisodeStart, ScenarioRanges

SPEC = AlgSpec.of("mocc")

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


def test_the_spec_comes_from_rust() -> None:
    """No constants copied into Python: sizes, bounds and the observation layout are the
    bindings'."""
    s = _native.spec("mocc")
    assert SPEC.obs_dim == s["obs_dim"] and SPEC.action_high == tuple(s["action_high"])
    assert SPEC.slice("w") == slice(*s["layout"]["w"]) and SPEC.slice("w").stop == SPEC.obs_dim
    assert SPEC.slice("state").stop == SPEC.slice("w").start
    assert "mocc" in _native.learned_algorithms()
    assert not hasattr(mocc, "OBS_DIM") and not hasattr(mocc, "TRAINING_OFF")
    with pytest.raises(ValueError, match="not a trainable"):
        _native.spec("cubic")


def _obs_with(w: tuple[float, float, float], n: int = 8, seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    state = rng.uniform(-1, 1, size=(n, SPEC.slice("state").stop)).astype(np.float32)
    return torch.as_tensor(np.concatenate([state, np.tile(w, (n, 1)).astype(np.float32)], 1))


def test_preference_subnetwork_conditions_actor_and_critic() -> None:
    torch.manual_seed(0)
    agent = mocc.MoccAgent(SPEC)
    a, b = (0.8, 0.1, 0.1), (0.1, 0.1, 0.8)
    oa, ob = _obs_with(a), _obs_with(b)  # identical network-state features
    ext = torch.zeros(len(oa), 2)
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
    agent = mocc.MoccAgent(SPEC)
    obs = _obs_with((0.1, 0.8, 0.1))
    lo, hi = torch.full((8, 2), 0.2), torch.full((8, 2), 0.9)
    with torch.no_grad():
        assert (agent.value(obs, lo) - agent.value(obs, hi)).abs().min() > 1e-6
    assert agent.actor.body[0].in_features == 30 + 16
    assert agent.critic.body[0].in_features == 30 + 16 + 2
    with pytest.raises(ValueError, match="extra inputs"):
        agent.value(obs)


def test_reward_memory_follows_each_row_and_resets_at_episode_ends() -> None:
    mem = RewardMemory(3)
    active = np.array([True, True, False])  # row 2 not started
    no = np.zeros(3, dtype=bool)
    mem.remember(np.array([0.5, 0.9, 0.0]), active, no)
    np.testing.assert_allclose(mem.values, [[0.5, 0.5], [0.9, 0.9], [0.0, 0.0]])
    mem.remember(np.array([1.0, 0.9, 0.0]), active, no)
    np.testing.assert_allclose(mem.values[0], [1.0, 0.5 + mem.ema * 0.5], rtol=1e-6)
    term = mem.remember(np.array([0.0, 0.7, 0.0]), active, np.array([False, True, False]))
    assert term[1, 0] == pytest.approx(0.7) and np.all(mem.values[1] == 0.0)


def test_ppo_learns_opposite_actions_for_two_preferences() -> None:
    """Same state, two w: the advantage favours a = +1 under one and a = -1 under the other.
    A few PPO updates must pull the two actor means apart in the right directions."""
    torch.manual_seed(1)
    agent = mocc.MoccAgent(SPEC)
    wa, wb = (0.6, 0.3, 0.1), (0.1, 0.6, 0.3)
    n = 256
    obs = torch.cat([_obs_with(wa, n, seed=2), _obs_with(wb, n, seed=2)])
    act = torch.cat([torch.full((n, 1), 1.0), torch.full((n, 1), -1.0)])
    act = torch.cat([act, -act])
    obs = torch.cat([obs, obs])
    adv = torch.cat([torch.ones(2 * n), -torch.ones(2 * n)])
    with torch.no_grad():
        logp = agent.dist(obs).log_prob(act).sum(-1)
        ext = torch.zeros(len(obs), 2)
        values = agent.value(obs, ext)
    batch = Batch(obs, ext, act, logp, values, adv, values + adv)
    cfg = PPOConfig(num_minibatches=2, update_epochs=4)
    opt = torch.optim.Adam(agent.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(10):
        with torch.no_grad():
            batch.logp = agent.dist(obs).log_prob(act).sum(-1)
        ppo_update(agent, opt, [batch], cfg, 0.0, gen, float(agent.value_scale))
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
    adv = gae(r, v, done, valid, last, g, lam)
    # row 0: t=2 bootstraps from last; t=1 is a (truncated) episode end; t=0 chains to t=1
    assert adv[2, 0] == pytest.approx(1 + g * 5 - 2)
    assert adv[1, 0] == pytest.approx(1 - 2)
    assert adv[0, 0] == pytest.approx((1 + g * 2 - 2) + g * lam * (1 - 2))
    # row 1: t=0 invalid (not started), the episode ends at t=1
    assert adv[1, 1] == pytest.approx(1 - 3)
    assert adv[2, 1] == pytest.approx(1 + g * 7 - 3)


def _args(*flags: str) -> object:
    return mocc.build_parser().parse_args(["train", *flags])


def test_policy_start_episodes_skip_startup_at_a_drawn_rate() -> None:
    """With --policy-start-prob an episode's flows start the policy at once, at a rate drawn
    log-uniformly from --policy-start-mbps; the default episodes start up first. Neither is in
    the dynamics: the card records the same dynamics either way."""
    import random

    scenario = (
        "duration_s = 3\nseed = 4\n[link]\nrate_mbps = 4\nbuffer_bdp = 1\n"
        '[[flow]]\nalg = "mocc"\nrtt_ms = 40\nw = [0.4, 0.4, 0.2]\n'
    )
    never = mocc.episodes_from_args(_args("--policy-start-prob", "0"), Knobs("mocc"))
    rng = random.Random(1)
    assert all(never.draw(rng)[1] == "[algs.mocc]\n" for _ in range(20))
    always = mocc.episodes_from_args(
        _args("--policy-start-prob", "1", "--policy-start-mbps", "0.5,2"), Knobs("mocc"))
    rates = []
    for _ in range(50):
        _, text = always.draw(rng)
        assert text is not None and "startup = false" in text
        rates.append(float(text.split("initial_rate_mbps = ")[1]))
        assert _native.dynamics("mocc", text) == _native.dynamics("mocc")
    assert all(0.5 <= r <= 2.0 for r in rates) and min(rates) < 0.8 and max(rates) > 1.3
    # without start-up the first decision comes after the first MI (100 ms), not after the
    # doubling phase
    t_first = []
    for algs in (None, "[algs.mocc]\nstartup = false\ninitial_rate_mbps = 1.0\n"):
        env = _native.SimEnv(scenario, "mocc", algs_toml=algs)
        t_first.append(float(env.reset()[4]))
    assert t_first[1] < 0.2 < t_first[0]
    assert mocc.episodes_from_args(_args("--policy-start-prob", "0.25"), Knobs("mocc")) \
        .start.describe()["prob"] == 0.25
    with pytest.raises(SystemExit, match="policy-start-mbps"):
        mocc.episodes_from_args(_args("--policy-start-mbps", "3,1"), Knobs("mocc"))


def test_training_runs_the_agents_dynamics_and_knobs_override_them() -> None:
    """Train what you serve: no flag = the agent's default MOCC (governors on) in every
    episode; --knob NAME=VALUE changes one knob for every episode and the card's dynamics;
    unknown, out-of-range and episode-start knobs are refused."""
    import random

    default = mocc.make_knobs([])
    assert default.toml() == "[algs.mocc]\n" and default.dynamics() == _native.dynamics("mocc")
    assert default.dynamics()["min_rate_pkts"] > 0 and default.dynamics()["share_probe_every_mis"]
    args = _args("--knob", "additive_increase_pkts=0.5", "--knob", "share_probe_every_mis=0",
                 "--policy-start-prob", "0.5")
    knobs = mocc.make_knobs(args.knob)
    assert knobs.overrides == {"additive_increase_pkts": 0.5, "share_probe_every_mis": 0}
    assert knobs.flags() == ["--knob", "additive_increase_pkts=0.5",
                             "--knob", "share_probe_every_mis=0"]
    d = knobs.dynamics()
    assert d["additive_increase_pkts"] == 0.5 and d["share_probe_every_mis"] == 0
    assert {k: v for k, v in d.items() if v != default.dynamics()[k]} == knobs.overrides
    episodes = mocc.episodes_from_args(args, knobs)
    rng = random.Random(3)
    tables = [episodes.draw(rng)[1] or "" for _ in range(40)]
    assert all(t.startswith(knobs.toml()) and _native.dynamics("mocc", t) == d for t in tables)
    assert any("startup = false" in t for t in tables)
    assert any("startup = false" not in t for t in tables)
    for bad, why in (("alpah=1", "no such knob"), ("min_rate_pkts=-1", "min_rate_pkts"),
                     ("startup=false", "episode begins"),
                     ("share_probe_every_mis=1.5", "expected u32")):
        with pytest.raises(SystemExit, match=why):
            mocc.make_knobs(_args("--knob", bad).knob)
    with pytest.raises(SystemExit):
        _args("--knob", "alpha")
    # a card's dynamics as the base (adapt): only what differs from the defaults is written
    assert mocc.make_knobs([], d).overrides == knobs.overrides
    # the knob changes what an action does: a flow holding a = 0 below the capacity climbs
    # only with the additive increase
    scenario = (
        "duration_s = 6\nseed = 4\n[link]\nrate_mbps = 4\nbuffer_bdp = 1\n"
        '[[flow]]\nalg = "mocc"\nrtt_ms = 40\nw = [0.4, 0.4, 0.2]\n'
    )
    start = {"startup": False, "initial_rate_mbps": 0.5, "share_probe_every_mis": 0}
    thr = []
    for k in (0.0, 0.5):
        env = _native.SimEnv(scenario, "mocc", algs_toml=Knobs(
            "mocc", {"additive_increase_pkts": k, "min_rate_pkts": 0.0}).toml(start))
        env.reset()
        done = False
        while not done:
            done = env.step(np.zeros((1, 1), dtype=np.float32))[3]
        thr.append(env.results()["flows"][0]["throughput_mbps"])
    assert thr[0] == pytest.approx(0.5, rel=0.1) and thr[1] > 1.5 * thr[0], thr


def _episodes() -> Episodes:
    ranges = ScenarioRanges(duration_s=(1.5, 2.5), rate_mbps=(1, 8), rtt_ms=(10, 100),
                            buffer_bdp=(0.1, 100), buffer_dist="log-uniform", stagger_s=(0, 0.4),
                            preferences=[(0.4, 0.4, 0.2)], other_preferences=mocc.landmarks(),
                            mixed_prob=0.5)
    return Episodes("mocc", ranges, "[algs.mocc]\n", EpisodeStart(
        0.5, {"startup": False}, {"initial_rate_mbps": (0.2, 10.0)}))


def _trajectory(pool: object, steps: int = 60) -> list[tuple]:
    envs = Lockstep(pool, _episodes(), [1, 2, 3], seed=11, obs_dim=SPEC.obs_dim)
    rng = np.random.default_rng(0)
    out = [envs.reset()]
    for _ in range(steps):
        b = envs.step(rng.uniform(-3, 3, size=(envs.num_rows, 1)).astype(np.float32))
        out.append((b.obs, b.rewards, b.active, b.done, b.terminal, b.finished))
    envs.close()
    return out


def _same(a: list[tuple], b: list[tuple]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        for u, v in zip(x, y, strict=True):
            if isinstance(u, np.ndarray):
                np.testing.assert_array_equal(u, v)
            else:
                assert u == v or (json.dumps(u) == json.dumps(v))


def test_worker_processes_give_the_serial_transitions() -> None:
    """Rollouts in worker processes: the same seed and actions give the same observations,
    rewards, active flags, episode ends and figures as in this process; rows of learners that
    have not started yet are inactive (Rust's flag) and carry zeros."""
    serial = _trajectory(SerialPool())
    with ProcessPool(2) as pool:
        parallel = _trajectory(pool)
    _same(serial, parallel)
    ends = sum(bool(t[3].any()) for t in serial[1:])
    assert ends >= 2 and any(t[5] for t in serial[1:])  # episodes ended, figures came back
    # the active flag is Rust's: a learner that has not started has no decision (and zeros)
    scenario = (
        "duration_s = 3\nseed = 4\n[link]\nrate_mbps = 4\nbuffer_bdp = 1\n"
        '[[flow]]\nalg = "mocc"\nrtt_ms = 40\n[[flow]]\nalg = "mocc"\nrtt_ms = 40\n'
        "start_s = 1.0\n"
    )
    env = _native.SimEnv(scenario, "mocc",
                         algs_toml="[algs.mocc]\nstartup = false\ninitial_rate_mbps = 1.0\n")
    obs, _, active, _, t = env.reset()
    assert t < 1.0 and list(active) == [True, False] and np.all(obs[1] == 0.0)


def test_ray_actors_give_the_serial_transitions() -> None:
    pytest.importorskip("ray")
    from ccp_train.rl.vec import RayPool

    serial = _trajectory(SerialPool(), steps=20)
    with RayPool(2, "local") as pool:
        remote = _trajectory(pool, steps=20)
    _same(serial, remote)


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


def test_workers_and_ray_export_the_same_model_bytes(
        tiny: tuple[Path, dict], tmp_path: Path) -> None:
    """docs/training.md's claim: `--workers N` and `--ray` give the same model bytes as the
    in-process rollouts (the tiny run, trained again in 2 worker processes and on 2 local
    Ray actors; about 15 s and 25 s here)."""
    out, _ = tiny
    serial = (out / "mocc.onnx").read_bytes()
    mocc.main([*TINY_TRAIN, "--workers", "2", "--out", str(tmp_path / "w")])
    assert (tmp_path / "w" / "mocc.onnx").read_bytes() == serial
    pytest.importorskip("ray")
    mocc.main([*TINY_TRAIN, "--ray", "local", "--out", str(tmp_path / "r")])
    assert (tmp_path / "r" / "mocc.onnx").read_bytes() == serial


def test_train_writes_a_valid_model_and_card(tiny: tuple[Path, dict]) -> None:
    out, summary = tiny
    assert summary["iterations"] == 4 and summary["transitions"] > 0
    card = card_mod.check_card(out / "mocc.json")  # schema, sha256, I/O read from the file
    assert card["algorithm"] == "mocc"
    assert card["feature_version"] == SPEC.feature_version
    assert card["obs_dim"] == SPEC.obs_dim and card["act_dim"] == SPEC.act_dim
    assert card["action_low"] == list(SPEC.action_low)
    assert card["action_high"] == list(SPEC.action_high)
    # trained under the agent's default dynamics, governors included
    assert card["dynamics"] == _native.dynamics("mocc")
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
    ckpt = checkpoint.load(out / "mocc.pt", mocc.CKPT_FORMAT)
    assert ckpt["command"] == first and ckpt["dynamics"] == _native.dynamics("mocc")
    ckpt["command"] = None
    assert checkpoint.command_of(out / "mocc.pt", ckpt) == first
    ckpt["onnx_sha256"] = "0" * 64
    with pytest.raises(SystemExit, match="records no training command"):
        checkpoint.command_of(out / "mocc.pt", ckpt)


def test_onnx_equals_the_torch_actor_mean(tiny: tuple[Path, dict]) -> None:
    out, _ = tiny
    agent = mocc.agent_from_checkpoint(checkpoint.load(out / "mocc.pt", mocc.CKPT_FORMAT), SPEC)
    rng = np.random.default_rng(0)
    state = rng.uniform(-1, 3, size=(64, SPEC.slice("state").stop)).astype(np.float32)
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
    # trained under the agent's default dynamics: served with no --config
    run = subprocess.run(
        [str(_agent_binary()), "--alg", "mocc", "--models", str(out), "--sim", str(scenario),
         "--json"],
        capture_output=True, text=True, check=False,
    )
    assert run.returncode == 0, run.stderr
    res = json.loads(run.stdout)
    assert [f["alg"] for f in res["flows"]] == ["mocc", "mocc"]
    assert all(f["throughput_mbps"] > 0.05 for f in res["flows"])
    # served under other dynamics (the governors off), the agent refuses it, naming the knob
    config = tmp_path / "off.toml"
    config.write_text("[algs.mocc]\nshare_probe_every_mis = 0\n")
    run = subprocess.run(
        [str(_agent_binary()), "--alg", "mocc", "--models", str(out), "--sim", str(scenario),
         "--config", str(config), "--json"],
        capture_output=True, text=True, check=False,
    )
    assert run.returncode != 0 and "share_probe_every_mis" in run.stderr, run.stderr


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
    # adapted under the dynamics the model was trained with
    assert card["dynamics"] == json.loads((out / "mocc.json").read_text())["dynamics"]
    ckpt = checkpoint.load(adapted / "mocc.pt", mocc.CKPT_FORMAT)
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
