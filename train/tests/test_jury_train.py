"""Jury's TD3 trainer (``ccp_train.jury``): a tiny run is deterministic for its seed, learns from
transitions of every flow of a multi-flow episode, and exports a card the agent's contract
accepts (Jury's spec and dynamics, reward knobs left out)."""

import csv
import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

from ccp_train import _native, jury
from ccp_train import card as card_mod

TINY = [
    "train", "--steps", "700", "--learning-starts", "300", "--train-every", "200",
    "--utd", "0.25", "--envs", "2", "--flows", "2,3", "--duration-s", "3,3",
    "--stagger-s", "0,0.5", "--rate-mbps", "10,20", "--log-every", "1000",
]


@pytest.fixture(autouse=True)
def _restore_torch() -> object:
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(False)


def test_tiny_run_same_seed_same_bytes_and_a_card_the_agent_accepts(tmp_path: Path) -> None:
    for name, seed in (("a", "3"), ("b", "3"), ("c", "4")):
        assert jury.main([*TINY, "--seed", seed, "--out", str(tmp_path / name)]) == 0
    a, b, c = (json.loads((tmp_path / n / "jury.json").read_text()) for n in "abc")
    assert (tmp_path / "a/jury.onnx").read_bytes() == (tmp_path / "b/jury.onnx").read_bytes()
    assert a["sha256"] == b["sha256"] != c["sha256"]

    card = card_mod.check_card(tmp_path / "a/jury.json")
    spec = _native.spec("jury")
    assert (card["obs_dim"], card["act_dim"]) == (spec["obs_dim"], spec["act_dim"])
    assert card["action_low"] == spec["action_low"] and card["action_high"] == spec["action_high"]
    # the dynamics are the agent's, without the reward's knobs
    assert card["dynamics"] == dict(_native.dynamics("jury"))
    assert not {"zeta", "beta1", "beta2"} & set(card["dynamics"])
    assert "zeta = 0.9" in card["training"]["notes"]
    assert card["training"]["steps"] >= 700
    assert card["training"]["command"].startswith("python -m ccp_train.jury train")

    # the exported actor answers inside the action box
    sess = ort.InferenceSession(str(tmp_path / "a/jury.onnx"))
    obs = np.random.default_rng(0).uniform(-1, 1, (1, spec["obs_dim"])).astype(np.float32)
    out = sess.run(None, {"obs": obs})[0]
    assert out.shape == (1, 2)
    assert -1.0 <= out[0, 0] <= 1.0 and 0.0 <= out[0, 1] <= 1.0

    # every update is a row of the curves, with TD3's losses
    rows = list(csv.DictReader((tmp_path / "a/jury.curves.csv").open()))
    assert rows and {"reward", "actor_loss", "critic_loss", "mu", "delta"} <= set(rows[0])


def test_transitions_come_from_every_flow(tmp_path: Path) -> None:
    # links fast enough that every flow acks the significance rule's 8 packets per interval
    # from its first RTTs on, so nearly every interval of every flow is a decision
    assert jury.main([*TINY, "--rate-mbps", "40,60", "--seed", "5", "--out", str(tmp_path)]) == 0
    log = [json.loads(x) for x in (tmp_path / "jury.train.jsonl").read_text().splitlines()]
    done = next(r for r in log if r["kind"] == "done")
    assert done["steps"] >= 700 and done["updates"] > 0
    # 2-3 flows per bottleneck, 3 s episodes at 30 ms: one flow alone could not give 700
    # transitions in the episodes run (begun ones included: at most 100 each)
    episodes = max(r["episodes"] for r in log if r["kind"] == "iteration")
    assert done["steps"] > episodes * 100


def test_bad_flags_are_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert jury.main(["train", "--out", str(tmp_path), "--flows", "5,2"]) == 2
    assert "--flows" in capsys.readouterr().err
    assert jury.main(["train", "--out", str(tmp_path), "--flows", "2,10",
                      "--stagger-s", "0,5", "--duration-s", "20,30"]) == 2
    assert "--stagger-s" in capsys.readouterr().err
    with pytest.raises(ValueError, match="no such knob"):
        jury.main(["train", "--out", str(tmp_path), "--knob", "gain=2"])
