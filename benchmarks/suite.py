"""The learning suite: how fast each env is solved with its preset, and whether it stays solved.

    python benchmarks/suite.py                                 # the whole suite, 3 seeds
    python benchmarks/suite.py --envs Acrobot-v1 --seeds 1 2
    python benchmarks/suite.py --set normalize_reward=false    # an A/B of a setting
    python benchmarks/suite.py --logdir runs/suite     # keep the runs, then:
    python -m a3c.plot runs/suite -o docs/curves.png   # one figure per env

Protocol (shared/BENCHMARKS.md): every run trains for its whole budget. Reported per
run and as the median of the seeds: the wall time from the start of training until the
mean return of the last 100 training episodes, all workers together, first reaches the
env's ``reward_threshold``, and the env steps then; the **hold rate**, the share of the
logged 100-episode means (one a second) at or above the threshold from then on; the
worst of those means; and the **final** 100-episode mean at the end of the budget. A run
that never gets there reports the best 100-episode mean it reached. Runs go one after
the other (never two at once on 2 cores); the table prints as Markdown for the README.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass

import numpy as np
import torch

from a3c.envs import make_env
from a3c.envs.atari import is_atari_id
from a3c.envs.minatar import is_minatar_id
from a3c.plot import Curve, read_curve
from a3c.run.config import NO_STEP_BUDGET
from a3c.run.presets import config_for
from a3c.run.trainer import train
from hogwild.errors import UsageError

#: env id -> wall-time budget per seed (s), within the issue's 15 minutes.
SUITE = {
    "CartPole-v1": 120,
    "Acrobot-v1": 120,
    "MountainCar-v0": 300,
    "LunarLander-v3": 900,
    "Pendulum-v1": 120,
    "HalfCheetah-v5": 600,
    "Hopper-v5": 600,
    "MinAtar/Breakout-v1": 600,
    "MiniGrid-Empty-5x5-v0": 60,
    "MiniGrid-DoorKey-5x5-v0": 180,
}

#: Targets for envs whose Gymnasium spec has no reward_threshold (RL-Zoo's "solved";
#: MiniGrid's reward is 1 - 0.9 x steps / limit: 0.9 is the goal within ~10% of the limit).
TARGETS = {"Pendulum-v1": -200.0, "MiniGrid-Empty-5x5-v0": 0.9, "MiniGrid-DoorKey-5x5-v0": 0.9}

#: Envs measured by the return reached (after MILESTONE_STEPS env steps and at the end of
#: the budget), not by the time to a threshold: no one solves these in minutes (nor any
#: MinAtar or Atari game, see by_return).
BY_RETURN = ("HalfCheetah-v5", "Hopper-v5")
MILESTONE_STEPS = 1_000_000
#: Settings the suite sets itself, from its own flags.
OWN_FLAGS = {
    "seed": "--seeds",
    "workers": "--workers",
    "time_limit": "--budget",
    "logdir": "--logdir",
}


def by_return(env_id: str) -> bool:
    """Whether ``env_id`` is measured by the return reached; games have no threshold."""
    return env_id in BY_RETURN or is_minatar_id(env_id) or is_atari_id(env_id)


def parse_set(items: list[str]) -> dict:
    """KEY=VALUE pairs, each VALUE read as a TOML value (a bare word is a string)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        if key in OWN_FLAGS:
            raise ValueError(f"--set {key}: use {OWN_FLAGS[key]} instead")
        try:
            out[key] = tomllib.loads(f"x = {value}")["x"]
        except tomllib.TOMLDecodeError:
            out[key] = value
    return out


@dataclass
class Holding:
    """What a run did once it first reached its threshold (None where it never did)."""

    hold_rate: float | None  # share of the logged 100-episode means >= threshold from then
    worst_after: float | None  # the lowest of those means
    final: float  # the 100-episode mean at the end of the budget


def holding(curve: Curve | None, threshold: float, solved_step: int | None) -> Holding:
    """From a run's curve of 100-episode means (steps, values): see :class:`Holding`."""
    if curve is None or len(curve.values) == 0:
        return Holding(None, None, math.nan)
    values = np.asarray(curve.values)
    final = float(values[-1])
    if solved_step is None:
        return Holding(None, None, final)
    after = values[np.asarray(curve.steps) >= solved_step]
    if after.size == 0:  # solved in the last second: only the final mean is after it
        after = values[-1:]
    return Holding(float((after >= threshold).mean()), float(after.min()), final)


class RunStopped(Exception):
    """A run ended by Ctrl-C, SIGTERM or a failure: the suite stops with it, as asked, instead
    of reporting a cut-short run as a result and starting the next."""

    def __init__(self, env: str, seed: int, exit_code: int, done: tuple) -> None:
        super().__init__(f"{env} seed {seed} ended with exit code {exit_code}; the suite stops")
        self.exit_code = exit_code
        self.done = done  # run_env's result for the seeds that finished before it


def run_env(env: str, seeds: list[int], budget: float, workers: int, extra: dict, logdir: str):
    rows = []
    for seed in seeds:
        cfg = config_for(
            env,
            workers=workers,
            seed=seed,
            time_limit=budget,
            eval_interval=0.0,
            logdir=logdir,
            **{"target_return": TARGETS.get(env), "target_metric": "none", **extra},
        )
        if by_return(env):  # no target
            cfg.target_return = math.inf
        finals = (cfg.entropy_coef_final, cfg.clip_range_final)
        if cfg.lr_schedule == "constant" and all(x is None for x in finals):
            cfg.total_steps = NO_STEP_BUDGET  # the time budget; a decay keeps its horizon
        r = train(cfg)
        label = f"{cfg.preset} ({cfg.algo})"
        if r.exit_code:
            raise RunStopped(env, seed, r.exit_code, (label, cfg.target_return, rows))
        if by_return(env):
            at_steps, at_end = returns_reached(r.run_dir)
            rows.append((False, r.wall_time, r.env_steps, at_end, at_steps))
            print(
                f"  {env} seed {seed}: 100-episode mean {at_steps:.1f} at "
                f"{MILESTONE_STEPS:,} steps, {at_end:.1f} after {r.wall_time:.0f} s "
                f"({r.env_steps:,} steps)",
                flush=True,
            )
            continue
        hold = holding(read_curve(r.run_dir), cfg.target_return, (r.solved_at or (0, None))[1])
        if r.solved_at is not None:
            t, steps = r.solved_at
            rows.append((True, t, steps, r.mean_return_100, hold))
            print(
                f"  {env} seed {seed}: solved after {t:.1f} s, {steps:,} steps; then "
                f"{hold.hold_rate:.0%} of the means held it, worst {hold.worst_after:.1f}, "
                f"final {hold.final:.1f} after {r.wall_time:.0f} s",
                flush=True,
            )
        else:
            best = r.best_mean_100
            mean, t, steps = best if best else (float("nan"), r.wall_time, r.env_steps)
            rows.append((False, t, steps, mean, hold))
            print(
                f"  {env} seed {seed}: not solved in {budget:.0f} s; best 100-episode mean "
                f"{mean:.1f} after {t:.1f} s, {steps:,} steps; final {hold.final:.1f}",
                flush=True,
            )
    return label, cfg.target_return, rows


def returns_reached(run_dir) -> tuple[float, float]:
    """The 100-episode mean at MILESTONE_STEPS (nan if not reached) and at the end."""
    curve = read_curve(run_dir)
    if curve is None:
        return math.nan, math.nan
    before = curve.values[curve.steps <= MILESTONE_STEPS]
    at_steps = float(before[-1]) if curve.steps[-1] >= MILESTONE_STEPS else math.nan
    return at_steps, float(curve.values[-1])


def summary(env: str, preset, target, rows) -> str:
    if by_return(env):
        at_steps = ", ".join(f"{r[4]:.0f}" for r in rows)
        at_end = ", ".join(f"{r[3]:.0f} ({r[1]:.0f} s, {r[2] / 1e6:.2f}M)" for r in rows)
        milestone = f"at {MILESTONE_STEPS / 1e6:g}M steps: {at_steps}"
        return f"| {env} | {preset} | {milestone} | at the end: {at_end} | |"
    solved = [r for r in rows if r[0]]
    n = len(rows)
    finals = [r[4].final for r in rows]
    final = f"{statistics.median(finals):.1f} ({min(finals):.1f}-{max(finals):.1f})"
    if len(solved) == n:
        ts, ss = [r[1] for r in rows], [r[2] for r in rows]
        holds, worst = [r[4].hold_rate for r in rows], [r[4].worst_after for r in rows]
        return (
            f"| {env} | {preset} | {target:g} | {n}/{n} | {statistics.median(ts):.1f} s "
            f"({min(ts):.1f}-{max(ts):.1f}) | {statistics.median(ss) / 1e3:,.0f}k "
            f"({min(ss) / 1e3:,.0f}k-{max(ss) / 1e3:,.0f}k) | {statistics.median(holds):.0%} "
            f"({min(holds):.0%}-{max(holds):.0%}) | {statistics.median(worst):.1f} | {final} |"
        )
    bests = ", ".join(f"{r[3]:.1f}" + (" (solved)" if r[0] else "") for r in rows)
    return (
        f"| {env} | {preset} | {target:g} | {len(solved)}/{n} | best means: {bests} | | | | "
        f"{final} |"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--envs", nargs="+", default=list(SUITE), metavar="ID")
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--budget", type=float, default=None, help="seconds per run (default: per env)")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="override settings")
    p.add_argument(
        "--logdir", default=None, help="keep the runs here (for a3c.plot); default: deleted"
    )
    args = p.parse_args()
    try:
        extra = parse_set(args.set)
    except ValueError as e:
        p.error(str(e))
    print(
        f"# {' '.join(sys.argv)}\n# nproc {os.cpu_count()}, torch {torch.__version__}, "
        f"{time.strftime('%Y-%m-%d %H:%M')}",
        flush=True,
    )
    lines = []
    stopped = 0
    with tempfile.TemporaryDirectory() as scratch:
        logdir = args.logdir or scratch
        for env in args.envs:
            budget = args.budget or SUITE.get(env, 300)
            try:
                make_env(env, **config_for(env).env_options()).close()  # the preset's wrappers
            except UsageError as e:  # e.g. LunarLander without the box2d extra
                print(f"  {env}: skipped: {e}", flush=True)
                lines.append(f"| {env} | | | skipped: {e} | | |")
                continue
            try:
                rows = run_env(env, args.seeds, budget, args.workers, extra, logdir)
            except RunStopped as e:
                print(e, file=sys.stderr, flush=True)
                stopped = e.exit_code
                if e.done[2]:
                    lines.append(summary(env, *e.done))
                break
            lines.append(summary(env, *rows))
    print(
        "\n| env | preset | target | solved | wall time, median (range) | env steps "
        "| hold rate | worst after | final |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(lines))
    sys.exit(stopped)


if __name__ == "__main__":
    main()
