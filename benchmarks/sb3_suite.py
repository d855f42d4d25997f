"""Stable-Baselines3 A2C or PPO on the suite, by the same protocol as benchmarks/suite.py.

    pip install stable-baselines3          # a benchmark-only dependency, not the package's
    python benchmarks/sb3_suite.py --envs Acrobot-v1 MountainCar-v0 --seeds 1 2 3
    python benchmarks/sb3_suite.py --algo ppo --envs Pendulum-v1

RL-Zoo 2.x hyperparameters (rl_zoo3/hyperparams/a2c.yml, ppo.yml; MuJoCo: A2C with the
zoo's ``mujoco-defaults``, i.e. SB3's defaults with VecNormalize, PPO with its tuned
HalfCheetah-v4/Hopper-v4 entries), one process, torch on every
core (as shared/BENCHMARKS.md measured it). HalfCheetah/Hopper report the 100-episode mean
at 1M steps and at the end of the budget instead of a time to solve (``--to-1m``: a run
goes on past its budget until 1M steps when it is slower than that). Wall time from the
start of ``learn`` until the mean return of the last 100 training episodes (SB3's
``ep_info_buffer``, raw returns from its ``Monitor``) first reaches the env's
``reward_threshold``. Run it in the same session as ``benchmarks/suite.py`` to compare.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import statistics
import sys
import time
import types

import gymnasium as gym
import numpy as np
import torch

from a3c.envs.minatar import is_minatar_id
from a3c.run.config import NO_STEP_BUDGET
from a3c.run.record import Solved

try:
    from stable_baselines3 import A2C, PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize
except ImportError:
    sys.exit("sb3_suite.py needs stable-baselines3 (pip install stable-baselines3); skipped")

from suite import (  # noqa: E402  (benchmarks/suite.py: the same budgets, targets and table)
    MILESTONE_STEPS,
    SUITE,
    TABLE_HEADER,
    TARGETS,
    ReturnRun,
    ThresholdRun,
    by_return,
    holding,
    table_row,
)


def linear(start: float):
    return lambda progress: progress * start


_ZOO_MUJOCO_NET = {
    "policy_kwargs": {
        "log_std_init": -2,
        "ortho_init": False,
        "activation_fn": torch.nn.ReLU,
        "net_arch": {"pi": [256, 256], "vf": [256, 256]},
    }
}
_ZOO_MINIGRID = (
    8,
    True,
    {
        "n_steps": 128,
        "batch_size": 64,
        "gae_lambda": 0.95,
        "gamma": 0.99,
        "n_epochs": 10,
        "ent_coef": 0.0,
        "learning_rate": 2.5e-4,
        "clip_range": 0.2,
    },
)
_SDE = {"use_sde": True, "policy_kwargs": {"log_std_init": -2, "ortho_init": False}}

#: RL-Zoo's settings: algo -> env -> (n_envs, normalize, keyword arguments).
ZOO = {
    "a2c": {
        "CartPole-v1": (8, False, {"ent_coef": 0.0}),
        "Acrobot-v1": (16, True, {"ent_coef": 0.0}),
        "MountainCar-v0": (16, True, {"ent_coef": 0.0}),
        "LunarLander-v3": (
            8,
            False,
            {"gamma": 0.995, "n_steps": 5, "learning_rate": linear(0.00083), "ent_coef": 1e-5},
        ),
        "Pendulum-v1": (
            8,
            True,
            {
                "ent_coef": 0.0,
                "max_grad_norm": 0.5,
                "n_steps": 8,
                "gae_lambda": 0.9,
                "vf_coef": 0.4,
                "gamma": 0.9,
                "use_rms_prop": True,
                "normalize_advantage": False,
                "learning_rate": linear(7e-4),
                **_SDE,
            },
        ),
        "HalfCheetah-v5": (1, True, {}),
        "Hopper-v5": (1, True, {}),
        # No RL-Zoo entry for MinAtar: SB3's defaults with 16 envs, the MLP on the flat grid
        # (every MinAtar game: see zoo_settings).
        "MinAtar/Breakout-v1": (16, False, {"ent_coef": 0.01}),
    },
    "ppo": {
        # RL-Zoo's PPO entry for LunarLander-v2 (v3 changed only bug fixes).
        "LunarLander-v3": (
            16,
            False,
            {
                "n_steps": 1024,
                "batch_size": 64,
                "gae_lambda": 0.98,
                "gamma": 0.999,
                "n_epochs": 4,
                "ent_coef": 0.01,
            },
        ),
        "Pendulum-v1": (
            4,
            False,
            {
                "n_steps": 1024,
                "gae_lambda": 0.95,
                "gamma": 0.9,
                "n_epochs": 10,
                "ent_coef": 0.0,
                "learning_rate": 1e-3,
                "clip_range": 0.2,
                "use_sde": True,
                "sde_sample_freq": 4,
            },
        ),
        # RL-Zoo's tuned MuJoCo entries (HalfCheetah-v4, Hopper-v4; not its mujoco-defaults).
        "HalfCheetah-v5": (
            1,
            True,
            {
                "batch_size": 64,
                "n_steps": 512,
                "gamma": 0.98,
                "learning_rate": 2.0633e-05,
                "ent_coef": 0.000401762,
                "clip_range": 0.1,
                "n_epochs": 20,
                "gae_lambda": 0.92,
                "max_grad_norm": 0.8,
                "vf_coef": 0.58096,
                **_ZOO_MUJOCO_NET,
            },
        ),
        "Hopper-v5": (
            1,
            True,
            {
                "batch_size": 32,
                "n_steps": 512,
                "gamma": 0.999,
                "learning_rate": 9.80828e-05,
                "ent_coef": 0.00229519,
                "clip_range": 0.2,
                "n_epochs": 5,
                "gae_lambda": 0.99,
                "max_grad_norm": 0.7,
                "vf_coef": 0.835671,
                **_ZOO_MUJOCO_NET,
            },
        ),
        "MinAtar/Breakout-v1": (8, False, {"ent_coef": 0.01}),
        # RL-Zoo's minigrid-defaults (its MiniGrid entries, e.g. MiniGrid-DoorKey-5x5-v0),
        # on MiniGrid's FlatObsWrapper (see minigrid_flat).
        **dict.fromkeys(("MiniGrid-Empty-5x5-v0", "MiniGrid-DoorKey-5x5-v0"), _ZOO_MINIGRID),
    },
}
ALGOS = {"a2c": A2C, "ppo": PPO}


def zoo_settings(algo: str, env_id: str) -> tuple[int, bool, dict] | None:
    """RL-Zoo's settings for ``env_id``; every MinAtar game shares Breakout's entry."""
    if is_minatar_id(env_id):
        env_id = "MinAtar/Breakout-v1"
    return ZOO[algo].get(env_id)


class Progress(BaseCallback):
    """What the suite reports of an SB3 run, followed as this project's trainer does."""

    def __init__(self, threshold: float, budget: float) -> None:
        super().__init__()
        self.threshold, self.budget = threshold, budget
        self.t0 = time.monotonic()
        self.solved: Solved | None = None
        self.best = float("-inf")
        self.last = float("nan")
        self.at_milestone = float("nan")
        self.at_budget: tuple[float, int] | None = None  # (mean, steps) when the budget ran out
        self.until_milestone = False
        # The 100-episode mean once a second, as a3c.train logs it: for the hold rate.
        self.curve = types.SimpleNamespace(steps=[], values=[])
        self.last_point = -math.inf

    def result(self, budget: float) -> ThresholdRun | ReturnRun:
        """This run as the suite's tables report it."""
        seconds = budget if self.at_budget else time.monotonic() - self.t0
        if self.threshold == math.inf:  # measured by the return reached (by_return)
            at_milestone = self.at_milestone if self.num_timesteps >= MILESTONE_STEPS else math.nan
            final, steps = self.at_budget or (self.last, self.num_timesteps)
            return ReturnRun(at_milestone, final, seconds, steps)
        hold = holding(self.curve, self.threshold, self.solved and self.solved.env_steps)
        return ThresholdRun(self.solved, self.best, hold, seconds)

    def _on_step(self) -> bool:
        buf = self.model.ep_info_buffer
        if len(buf) == buf.maxlen:
            mean = statistics.fmean(e["r"] for e in buf)
            self.best, self.last = max(self.best, mean), mean
            if self.num_timesteps <= MILESTONE_STEPS:
                self.at_milestone = mean
            now = time.monotonic()
            if now - self.last_point >= 1.0:
                self.curve.steps.append(self.num_timesteps)
                self.curve.values.append(mean)
                self.last_point = now
            if mean >= self.threshold and self.solved is None:
                # Not the end: the run goes on to its budget, to see whether it holds.
                self.solved = Solved(now - self.t0, self.num_timesteps)
        if self.at_budget is None and time.monotonic() - self.t0 >= self.budget:
            self.at_budget = (self.last, self.num_timesteps)
        return self.at_budget is None or (
            self.until_milestone and self.num_timesteps < MILESTONE_STEPS
        )


def minatar_flat(env_id: str) -> gym.Env:
    """A MinAtar game as SB3's MLP takes it: the 10x10xC grid flattened, in {0, 1} (SB3's
    CnnPolicy needs images of 36 pixels or more)."""
    from a3c.envs import make_env

    env = gym.wrappers.FlattenObservation(make_env(env_id))
    space = gym.spaces.Box(0.0, 1.0, env.observation_space.shape, np.float32)
    return gym.wrappers.TransformObservation(env, lambda o: (o / 255).astype(np.float32), space)


def minigrid_flat(env_id: str) -> gym.Env:
    """A MiniGrid env as RL-Zoo gives it to SB3: ``FlatObsWrapper`` (the 7x7x3 view and
    the mission's characters one-hot, in one vector)."""
    import minigrid  # noqa: F401  (registers the ids)
    from minigrid.wrappers import FlatObsWrapper

    return FlatObsWrapper(gym.make(env_id))


def run(algo: str, env_id: str, seed: int, budget: float, to_milestone: bool = False) -> Progress:
    n_envs, normalize, kwargs = zoo_settings(algo, env_id)
    make = env_id
    if env_id.startswith("MinAtar/"):
        make = functools.partial(minatar_flat, env_id)
    elif env_id.startswith("MiniGrid-"):
        make = functools.partial(minigrid_flat, env_id)
    venv = make_vec_env(make, n_envs=n_envs, seed=seed)
    if normalize:
        venv = VecNormalize(venv, gamma=kwargs.get("gamma", 0.99))
    model = ALGOS[algo]("MlpPolicy", venv, seed=seed, verbose=0, **kwargs)
    threshold = TARGETS.get(env_id) or (
        math.inf if by_return(env_id) else gym.spec(env_id).reward_threshold
    )
    cb = Progress(threshold, budget)
    cb.until_milestone = to_milestone and by_return(env_id)
    cb.t0 = time.monotonic()
    model.learn(total_timesteps=NO_STEP_BUDGET, callback=cb)  # the callback stops it by time
    venv.close()
    return cb


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--algo", choices=sorted(ZOO), default="a2c")
    p.add_argument("--envs", nargs="+", default=None, metavar="ID")
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    p.add_argument("--budget", type=float, default=None, help="seconds per run (default: per env)")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads (default: every core; 1 lets two runs share two cores fairly)",
    )
    p.add_argument(
        "--to-1m",
        action="store_true",
        help="HalfCheetah/Hopper: go on past the budget until 1M steps (both figures)",
    )
    args = p.parse_args()
    envs = args.envs or list(ZOO[args.algo])
    unknown = [env for env in envs if zoo_settings(args.algo, env) is None]
    if unknown:
        p.error(
            f"no {args.algo} settings for {', '.join(unknown)}; known: {', '.join(ZOO[args.algo])}"
        )
    system = f"SB3 {args.algo.upper()} (RL-Zoo)"
    import stable_baselines3

    if args.threads:
        torch.set_num_threads(args.threads)

    print(
        f"# {' '.join(sys.argv)}\n# nproc {os.cpu_count()}, torch {torch.__version__}, "
        f"stable-baselines3 {stable_baselines3.__version__}, {time.strftime('%Y-%m-%d %H:%M')}",
        flush=True,
    )
    lines = []
    for env in envs:
        budget = args.budget or SUITE.get(env, 300)
        runs = []
        for seed in args.seeds:
            cb = run(args.algo, env, seed, budget, args.to_1m)
            runs.append(cb.result(budget))
            print(runs[-1].describe(env, seed), flush=True)
        lines.append(table_row(env, system, cb.threshold, runs))
    print(f"\n{TABLE_HEADER}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
