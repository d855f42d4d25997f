"""What `--center-frames` subtracts from each game's frames under random play: the newest
frame's background (its most common value, as the conv encoder finds it) and, beside it,
its mean, which the flag subtracted until 2026-12-04.

    python benchmarks/frame_backgrounds.py [--steps 3000] [GAME ...]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

import numpy as np
import torch

from a3c.envs.make import make_atari_env
from a3c.policy.encoders import frame_background

GAMES = ("Pong", "Breakout", "SpaceInvaders", "Qbert", "BeamRider", "RoadRunner")
PIXEL_MAX = 255.0


def scan(game: str, steps: int, seed: int = 0) -> str:
    env = make_atari_env(f"{game}NoFrameskip-v4", seed=seed)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    backgrounds: Counter[int] = Counter()
    means = []
    for _ in range(steps):
        obs, _, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
        newest = torch.as_tensor(np.asarray(obs))[-1:][None]  # [1, 1, 84, 84]
        backgrounds[int(frame_background(newest))] += 1
        means.append(float(newest.float().mean()) / PIXEL_MAX)
        if terminated or truncated:
            obs, _ = env.reset()
    env.close()
    (usual, count), *_ = backgrounds.most_common(1)
    return (
        f"{game}: background {usual / PIXEL_MAX:.2f} in {count} of {steps} frames "
        f"({len(backgrounds)} values in all); mean {min(means):.2f}-{max(means):.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("games", nargs="*", default=list(GAMES), help="e.g. Pong Breakout")
    p.add_argument("--steps", type=int, default=3000, help="random steps per game")
    args = p.parse_args(argv)
    for game in args.games:
        print(scan(game, args.steps), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
