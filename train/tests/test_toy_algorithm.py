"""The claim of docs/adding-an-algorithm.md, on the Python side: a learned algorithm that is one
folder (``algs/src/toy/``) and one registry line reaches the bindings, the harness's default
algorithms and the portfolio's candidates, with no line of Python naming it.

The toy exists only in a native module built with the test-only feature ``toy``;
``ops/toy_algorithm.sh`` builds one and points ``CCP_TOY_NATIVE`` at it. Without it these tests
are skipped (the shipped module has no toy).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TOY_NATIVE = os.environ.get("CCP_TOY_NATIVE")

pytestmark = pytest.mark.skipif(
    not TOY_NATIVE, reason="needs a native module built with the feature `toy` "
    "(bash ops/toy_algorithm.sh)")

TRAIN = Path(__file__).resolve().parents[1]

# loads the toy build as ccp_train._native before the package imports its own
PROBE = r"""
import importlib.util, json, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("ccp_train._native", sys.argv[1])
native = importlib.util.module_from_spec(spec)
sys.modules["ccp_train._native"] = native
spec.loader.exec_module(native)
import gymnasium as gym
import ccp_train
from ccp_train import _native
from ccp_train.harness.matrix import default_algs
from ccp_train.portfolio import candidates
from ccp_train.rl.spec import AlgSpec
models = Path(sys.argv[2])
out = {"native_is_the_toy_build": _native is native,
       "algorithms": _native.algorithms(),
       "learned": _native.learned_algorithms(),
       "defaults": _native.defaults("toy"),
       "spec_obs_dim": AlgSpec.of("toy").obs_dim,
       "gym": "ccp/Toy-v0" in gym.registry,
       "harness_without_model": default_algs(models),
       "portfolio_without_model": candidates(models)}
(models / "toy.onnx").write_bytes(b"")
out["harness_with_model"] = default_algs(models)
out["portfolio_with_model"] = candidates(models)
print(json.dumps(out))
"""


def probe(tmp_path: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(TRAIN))
    p = subprocess.run([sys.executable, "-c", PROBE, str(TOY_NATIVE), str(tmp_path)],
                       capture_output=True, text=True, env=env, timeout=120, check=False)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_the_toy_reaches_the_bindings_the_harness_and_the_portfolio(tmp_path: Path) -> None:
    got = probe(tmp_path)
    assert got["native_is_the_toy_build"]
    # the bindings: its line, its kind, its knobs and spec, its Gymnasium id
    assert got["algorithms"][-1] == ["toy", "learned"]
    assert got["learned"][-1] == "toy"
    assert got["defaults"] == {"gain": 0.5, "interval_us": 20000}
    assert got["spec_obs_dim"] == 1
    assert got["gym"]
    # the harness compares a learned algorithm once it has a model, and so does the portfolio
    assert "toy" not in got["harness_without_model"]
    assert got["harness_with_model"][-1] == "toy"
    assert got["portfolio_without_model"] == got["harness_without_model"]
    assert got["portfolio_with_model"] == got["harness_with_model"]
