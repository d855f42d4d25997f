"""Stable-Baselines3 A2C on the suite, by the same protocol as benchmarks/suite.py.

    pip install stable-baselines3          # a benchmark-only dependency, not the package's
    python benchmarks/sb3_suite.py --envs Acrobot-v1 MountainCar-v0 --seeds 1 2 3

RL-Zoo 2.x hyperparameters for A2C (rl_zoo3/hyperparams/a2c.yml), one process, torch on
every core (as shared/BENCHMARKS.md measured it). Wall time from the start of ``learn``
until the mean return of the last 100 training episodes (SB3's ``ep_info_buffer``, raw
returns from its ``Monitor``) first reaches the env's ``reward_threshold``. Run it in the
same session as ``benchmarks/suite.py`` to compare the two.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import gymnasium as gym

try:
    from stable_baselines3 import A2C
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize
except ImportError:
    sys.exit("sb3_suite.py needs stable-baselines3 (pip install stable-baselines3); skipped")

from suite import SUITE  # noqa: E402  (benchmarks/suite.py: the same budgets)


def linear(start: float):
    return lambda progress: progress * start


#: RL-Zoo's A2C settings: (n_envs, normalize, A2C keyword arguments).
ZOO = {
    "CartPole-v1": (8, False, {"ent_coef": 0.0}),
    "Acrobot-v1": (16, True, {"ent_coef": 0.0}),
    "MountainCar-v0": (16, True, {"ent_coef": 0.0}),
    "LunarLander-v3": (
        8,
        False,
        {"gamma": 0.995, "n_steps": 5, "learning_rate": linear(0.00083), "ent_coef": 1e-5},
    ),
}


class Solved(BaseCallback):
    def __init__(self, threshold: float, budget: float) -> None:
        super().__init__()
        self.threshold, self.budget = threshold, budget
        self.t0 = time.monotonic()
        self.solved: tuple[float, int] | None = None
        self.best = float("-inf")

    def _on_step(self) -> bool:
        buf = self.model.ep_info_buffer
        if len(buf) == buf.maxlen:
            mean = statistics.fmean(e["r"] for e in buf)
            self.best = max(self.best, mean)
            if mean >= self.threshold:
                self.solved = (time.monotonic() - self.t0, self.num_timesteps)
                return False
        return time.monotonic() - self.t0 < self.budget


def run(env_id: str, seed: int, budget: float) -> Solved:
    n_envs, normalize, kwargs = ZOO[env_id]
    venv = make_vec_env(env_id, n_envs=n_envs, seed=seed)
    if normalize:
        venv = VecNormalize(venv, gamma=kwargs.get("gamma", 0.99))
    model = A2C("MlpPolicy", venv, seed=seed, verbose=0, **kwargs)
    cb = Solved(gym.spec(env_id).reward_threshold, budget)
    cb.t0 = time.monotonic()
    model.learn(total_timesteps=10**9, callback=cb)
    venv.close()
    return cb


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--envs", nargs="+", default=list(ZOO), metavar="ID")
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    p.add_argument("--budget", type=float, default=None, help="seconds per run (default: per env)")
    args = p.parse_args()
    import stable_baselines3
    import torch

    print(
        f"# {' '.join(sys.argv)}\n# nproc {os.cpu_count()}, torch {torch.__version__}, "
        f"stable-baselines3 {stable_baselines3.__version__}, {time.strftime('%Y-%m-%d %H:%M')}",
        flush=True,
    )
    lines = []
    for env in args.envs:
        budget = args.budget or SUITE.get(env, 300)
        times, steps, bests = [], [], []
        for seed in args.seeds:
            cb = run(env, seed, budget)
            if cb.solved:
                times.append(cb.solved[0])
                steps.append(cb.solved[1])
                print(
                    f"  {env} seed {seed}: solved after {cb.solved[0]:.1f} s, "
                    f"{cb.solved[1]:,} steps",
                    flush=True,
                )
            else:
                print(
                    f"  {env} seed {seed}: not solved in {budget:.0f} s; best 100-episode "
                    f"mean {cb.best:.1f}",
                    flush=True,
                )
            bests.append(cb.best)
        n = len(args.seeds)
        if len(times) == n:
            lines.append(
                f"| {env} | SB3 A2C (RL-Zoo) | {n}/{n} | {statistics.median(times):.1f} s "
                f"({min(times):.1f}-{max(times):.1f}) | {statistics.median(steps) / 1e3:,.0f}k |"
            )
        else:
            best = ", ".join(f"{b:.1f}" for b in bests)
            lines.append(f"| {env} | SB3 A2C (RL-Zoo) | {len(times)}/{n} | best means: {best} | |")
    print("\n| env | system | solved | wall time, median (range) | env steps |")
    print("|---|---|---|---|---|")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
