"""Raw environment steps per second through Python: random actions, no policy.

One MOCC learner on a 12 Mbit/s, 20 ms, 1-BDP link (issue goal: >= 20 000 steps/s).

    .venv/bin/python ops/bench/env_steps.py [--seconds 10]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ccp_train import _native

SCENARIO = """
duration_s = 60
seed = 1
[link]
rate_mbps = 12
buffer_bdp = 1.0
[[flow]]
alg = "mocc"
rtt_ms = 20
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=10.0, help="measure this long")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    actions = rng.uniform(-5, 5, size=(4096, 1, 1)).astype(np.float32)
    steps = episodes = 0
    sim_s = 0.0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < args.seconds:
        env = _native.SimEnv(SCENARIO, "mocc")
        _, _, _, done, _ = env.reset()
        episodes += 1
        while not done:
            _, _, _, done, t = env.step(actions[steps % 4096])
            steps += 1
        sim_s += t
    wall = time.perf_counter() - t0
    print(
        f"env steps/s: {steps / wall:,.0f} ({steps} steps, {episodes} episodes of 60 s "
        f"simulated, {sim_s / wall:,.0f} simulated s per wall s)"
    )


if __name__ == "__main__":
    main()
