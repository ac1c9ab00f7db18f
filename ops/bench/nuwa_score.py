"""Nuwa-RL's training reward (eq. 10, per decision) of a trained policy or of the bare law,
over the same training-like episodes: does the optimizer's choice earn more reward than a
constant gain? (docs/algorithms/nuwa.md, run 7).

    .venv/bin/python ops/bench/nuwa_score.py --policy DIR/nuwa.zip --episodes 24 \
        -- --knob loss_decrease=1.0 --knob reward_delay_over_target=true --knob k_init=4.0
    .venv/bin/python ops/bench/nuwa_score.py --policy hold --episodes 24 -- <the same flags>

Flags after ``--`` are ``python -m ccp_train.nuwa train``'s (knobs, episode ranges): the
episodes are drawn as that run's are, from seeds ``--seed0`` + i, so two invocations with the
same flags score the same episodes. ``hold`` answers x1 at every decision (k stays k_init);
``brake`` x0.25 (k falls to k_min and stays: where the runs under eq. 10 as printed ended).
The policy acts deterministically (argmax), its LSTM state carried, as the agent serves it.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from sb3_contrib import RecurrentPPO

from ccp_train import nuwa


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", required=True,
                    help="a trainer's nuwa.zip, 'hold' (x1 always: k stays k_init) or 'brake' "
                         "(x0.25 always: k falls to k_min, where the paper's reward drove runs)")
    ap.add_argument("--episodes", type=int, default=24)
    ap.add_argument("--seed0", type=int, default=5000)
    ap.add_argument("train_flags", nargs="*", help="after --: the training run's flags")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        args = nuwa.parser().parse_args(["train", "--out", tmp, *a.train_flags])
        knobs = nuwa.make_knobs(args.knob)
        episodes = nuwa.episodes_from_args(args, knobs, Path(tmp))
        fixed = {"hold": nuwa.HOLD, "brake": 0}.get(a.policy)
        model = None if fixed is not None else RecurrentPPO.load(a.policy, device="cpu")
        total, decisions, per_episode = 0.0, 0, []
        for i in range(a.episodes):
            env = nuwa.make_env(episodes, a.seed0 + i, args)
            obs, _ = env.reset(seed=a.seed0 + i)
            state, start = None, np.array([True])
            reward, steps, done = 0.0, 0, False
            while not done:
                if model is None:
                    action = fixed
                else:
                    act, state = model.predict(obs[None], state=state, episode_start=start,
                                               deterministic=True)
                    action, start = int(act[0]), np.array([False])
                obs, r, term, trunc, _ = env.step(action)
                reward, steps, done = reward + float(r), steps + 1, term or trunc
            per_episode.append(reward / max(steps, 1))
            total, decisions = total + reward, decisions + steps
    print(f"{a.policy}: eq. 10 reward {total / max(decisions, 1):.3f} per decision over "
          f"{decisions} decisions, {a.episodes} episodes (episode means: median "
          f"{float(np.median(per_episode)):.3f}, min {min(per_episode):.3f}, "
          f"max {max(per_episode):.3f})")


if __name__ == "__main__":
    main()
