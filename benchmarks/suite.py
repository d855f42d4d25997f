"""The learning suite: how fast each env is solved with its preset, and whether it stays solved.

    python benchmarks/suite.py                                 # the whole suite, 3 seeds
    python benchmarks/suite.py --envs Acrobot-v1 --seeds 1 2
    python benchmarks/suite.py --set normalize_reward=false    # an A/B of a setting
    python benchmarks/suite.py --set total_steps=200000        # stop at these steps or the time
    python benchmarks/suite.py --logdir runs/suite     # keep the runs, then:
    python -m a3c.plot runs/suite -o docs/curves.png   # one figure per env
    python benchmarks/suite.py --family minatar        # a family against its targets
    python benchmarks/suite.py --family atari --envs PongNoFrameskip-v4 --seeds 1 2

Protocol (shared/BENCHMARKS.md): every run trains for its whole budget. Reported per
run and as the median of the seeds: the wall time from the start of training until the
mean return of the last 100 training episodes, all workers together, first reaches the
env's ``reward_threshold``, and the env steps then; the **hold rate**, the share of the
logged 100-episode means (one a second) at or above the threshold from then on; the
worst of those means; and the **final** 100-episode mean at the end of the budget. A run
that never gets there reports the best 100-episode mean it reached. Envs without a
threshold (MuJoCo) report the mean at 1M steps, the final one, and the **greedy** mean
return of the policy the run ends with (``a3c.evaluate``, 10 episodes): the agent a user
keeps, without the exploration noise that the training episodes carry. Runs go one after
the other (never two at once on 2 cores); the table prints as Markdown for the README.

``--family atari|mujoco|minatar`` (benchmarks/families.py) runs a family's envs for its
budget, 1 seed unless ``--seeds``, and tables each run against its target and the
published anchors: the final 100-episode mean of the real score (Atari: whole games,
unclipped, as ``charts/mean_return_100`` holds them), the greedy mean, env steps/s, and
whether the final mean met the target (Pong: whether the mean reached +18 in its 20 min).
The last line counts the targets met and gives the family's median final mean across
its envs (Atari: human-normalised, Pong left out) beside the anchors'.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np
import torch
from families import FAMILIES, FAMILY_HEADER, Budget, Family, FamilyRun, family_summary

from a3c.envs import make_env
from a3c.envs.families import family_of
from a3c.plot import Curve, read_curve
from a3c.run.config import NO_STEP_BUDGET
from a3c.run.presets import config_for
from a3c.run.record import Solved
from a3c.run.trainer import train
from a3c.use.saved import evaluate
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

#: Families measured by the return reached (after MILESTONE_STEPS env steps and at the end
#: of the budget), not by the time to a threshold: no one solves these in minutes.
BY_RETURN = ("mujoco", "minatar", "atari")
MILESTONE_STEPS = 1_000_000
#: Greedy episodes of the final policy, for the BY_RETURN families (a few seconds each).
GREEDY_EPISODES = 10
#: Settings the suite sets itself, from its own flags.
OWN_FLAGS = {
    "seed": "--seeds",
    "workers": "--workers",
    "time_limit": "--budget",
    "logdir": "--logdir",
    "env": "--envs",
}


def by_return(env_id: str) -> bool:
    """Whether ``env_id`` is measured by the return reached; games have no threshold."""
    return family_of(env_id) in BY_RETURN


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


def refuse_owned(extra: dict, family: str | None, budgets: Iterable[Budget]) -> None:
    """Refuse a ``--set`` of a setting the suite's protocol sets, before any run: it would
    otherwise be replaced without a word."""
    if "target_metric" in extra:
        raise ValueError(
            "--set target_metric: the suite's runs train for their whole budget "
            "(target_metric none); --set target_return gives the return they are timed to"
        )
    if family and "target_return" in extra:
        raise ValueError(
            f"--set target_return: the {family} family's targets set it "
            "(benchmarks/families.py); run the envs without --family to give your own"
        )
    if "total_steps" in extra and any(b.steps is not None for b in budgets):
        raise ValueError(
            f"--set total_steps: the {family} family's budget sets the steps; "
            "--budget sets the seconds per run"
        )


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


@dataclass
class ThresholdRun:
    """One seed of an env with a threshold, as the tables report it."""

    solved_at: Solved | None  # when the mean first reached it
    best: float  # the best 100-episode mean
    holding: Holding
    seconds: float  # the run's length

    def describe(self, env: str, seed: int) -> str:
        h = self.holding
        if self.solved_at is None:
            return (
                f"  {env} seed {seed}: not solved in {self.seconds:.0f} s; best 100-episode "
                f"mean {self.best:.1f}; final {h.final:.1f}"
            )
        return (
            f"  {env} seed {seed}: solved after {self.solved_at.seconds:.1f} s, "
            f"{self.solved_at.env_steps:,} steps; then "
            f"{h.hold_rate:.0%} of the means held it, worst {h.worst_after:.1f}, final "
            f"{h.final:.1f} after {self.seconds:.0f} s"
        )


@dataclass
class ReturnRun:
    """One seed of an env measured by the return it reaches (see :func:`by_return`)."""

    at_milestone: float  # the 100-episode mean at MILESTONE_STEPS (nan: never got there)
    final: float  # at the end of the budget
    seconds: float
    env_steps: int
    greedy: float | None = None  # the final policy's greedy mean (None: not evaluated)
    solved_at: Solved | None = None  # when the mean first reached a target it was given
    best: float = math.nan  # the best 100-episode mean

    def describe(self, env: str, seed: int) -> str:
        greedy = "" if self.greedy is None else f"; greedy {self.greedy:.1f}"
        solved = self.solved_at and f"; reached its target after {self.solved_at.seconds:.0f} s"
        return (
            f"  {env} seed {seed}: 100-episode mean {self.at_milestone:.1f} at "
            f"{MILESTONE_STEPS:,} steps, {self.final:.1f} after {self.seconds:.0f} s "
            f"({self.env_steps:,} steps){greedy}{solved or ''}"
        )


#: The table both suites print (this one and sb3_suite.py).
TABLE_HEADER = (
    "| env | system | target | solved | wall time, median (range) | env steps "
    "| hold rate | worst after | final |\n|---|---|---|---|---|---|---|---|---|"
)


def table_row(
    env: str, system: str, target: float | None, runs: list[ThresholdRun] | list[ReturnRun]
) -> str:
    """One env's row: :class:`ReturnRun` figures, or the medians (and ranges) of
    :class:`ThresholdRun` ones where every seed solved it, else each seed's best."""
    if runs and isinstance(runs[0], ReturnRun):
        at_steps = ", ".join(f"{r.at_milestone:.0f}" for r in runs)
        at_end = ", ".join(
            f"{r.final:.0f} ({r.seconds:.0f} s, {r.env_steps / 1e6:.2f}M)" for r in runs
        )
        milestone = f"at {MILESTONE_STEPS / 1e6:g}M steps: {at_steps}"
        greedy = [r.greedy for r in runs if r.greedy is not None]
        final = f"greedy: {', '.join(f'{g:.0f}' for g in greedy)}" if greedy else ""
        return f"| {env} | {system} | | {milestone} | at the end: {at_end} | | | | {final} |"
    solved = [r.solved_at for r in runs if r.solved_at is not None]
    n = len(runs)
    final = spread([r.holding.final for r in runs], "{:.1f}")
    if n and len(solved) == n:
        ts, ss = [s.seconds for s in solved], [s.env_steps / 1e3 for s in solved]
        holds = [r.holding.hold_rate for r in runs]
        worst = statistics.median(r.holding.worst_after for r in runs)
        return (
            f"| {env} | {system} | {target:g} | {n}/{n} | {spread(ts, '{:.1f}', ' s')} "
            f"| {spread(ss, '{:,.0f}k')} | {spread(holds, '{:.0%}')} | {worst:.1f} | {final} |"
        )
    bests = ", ".join(f"{r.best:.1f}" + (" (solved)" if r.solved_at else "") for r in runs)
    return (
        f"| {env} | {system} | {target:g} | {len(solved)}/{n} | best means: {bests} | | | | "
        f"{final} |"
    )


def spread(values: list[float], fmt: str, unit: str = "") -> str:
    """``median unit (min-max)``, each number formatted with ``fmt``."""
    low, mid, high = (fmt.format(x) for x in (min(values), statistics.median(values), max(values)))
    return f"{mid}{unit} ({low}-{high})"


@dataclass
class EnvRuns:
    """The finished seeds of one env, and what its table row names them by."""

    env: str
    seeds: list[int]  # of the finished runs, in order
    runs: list[ThresholdRun | ReturnRun]
    system: str | None = None  # "preset (algo)", as train() filled it in
    target: float | None = None

    def row(self) -> str:
        return table_row(self.env, self.system, self.target, self.runs)


class RunStopped(Exception):
    """A run ended by Ctrl-C, SIGTERM or a failure: the suite stops with it, as asked, instead
    of reporting a cut-short run as a result and starting the next."""

    def __init__(self, seed: int, exit_code: int, done: EnvRuns) -> None:
        super().__init__(
            f"{done.env} seed {seed} ended with exit code {exit_code}; the suite stops"
        )
        self.exit_code = exit_code
        self.done = done  # the seeds that finished before it


def run_env(
    env: str,
    seeds: list[int],
    budget: Budget,
    workers: int,
    extra: dict,
    logdir: str,
    target: float | None = None,
) -> EnvRuns:
    """Train every seed of ``env`` with its preset. ``target``: a return whose first
    reaching each run notes (``solved_at``); by-return envs otherwise report none (their
    runs note the env's own ``reward_threshold``, if any). ``extra``: the ``--set``
    settings, which win over the suite's defaults (see :func:`refuse_owned`)."""
    done = EnvRuns(env, [], [])
    target = extra.get("target_return", TARGETS.get(env) if target is None else target)
    for seed in seeds:
        cfg = config_for(
            env,
            workers=workers,
            seed=seed,
            time_limit=budget.seconds,
            logdir=logdir,
            # none: note when the mean first reaches the target, never stop for it
            **{"eval_interval": 0.0, "target_return": target, "target_metric": "none", **extra},
        )
        if budget.steps is not None:
            cfg.total_steps = budget.steps
        elif "total_steps" not in extra and not cfg.decays():
            cfg.total_steps = NO_STEP_BUDGET  # the time budget; a decay keeps its horizon
        r = train(cfg)
        done.system = f"{cfg.preset} ({cfg.algo})"
        if r.exit_code:
            raise RunStopped(seed, r.exit_code, done)
        # The env's own threshold where none was given: resolved by the run, as it recorded.
        done.target = resolved = json.loads((r.run_dir / "config.json").read_text())[
            "target_return"
        ]
        best = r.best_mean_100.mean if r.best_mean_100 else math.nan
        if by_return(env):
            at_milestone, final = returns_reached(r.run_dir)
            greedy = float(evaluate(r.run_dir / "checkpoint.pt", GREEDY_EPISODES).mean())
            solved = r.solved_at if target is not None else None
            run = ReturnRun(at_milestone, final, r.wall_time, r.env_steps, greedy, solved, best)
        else:
            hold = holding(read_curve(r.run_dir), resolved, r.solved_at and r.solved_at.env_steps)
            run = ThresholdRun(r.solved_at, best, hold, r.wall_time)
        done.seeds.append(seed)
        done.runs.append(run)
        print(run.describe(env, seed), flush=True)
    return done


def returns_reached(run_dir) -> tuple[float, float]:
    """The 100-episode mean at MILESTONE_STEPS (nan if not reached) and at the end."""
    curve = read_curve(run_dir)
    if curve is None:
        return math.nan, math.nan
    before = curve.values[curve.steps <= MILESTONE_STEPS]
    at_steps = float(before[-1]) if curve.steps[-1] >= MILESTONE_STEPS else math.nan
    return at_steps, float(curve.values[-1])


def budget_for(env: str, family: Family | None, seconds: float | None = None) -> Budget:
    """The env's budget; ``seconds`` (``--budget``) replaces its time, and a step budget
    stays, so that a probe's rate decays over the horizon the family's runs decay over."""
    budget = family.budget_of(env) if family else Budget(SUITE.get(env, 300))
    return replace(budget, seconds=seconds) if seconds else budget


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--family", choices=list(FAMILIES), help="run a family against its targets")
    p.add_argument("--envs", nargs="+", metavar="ID", help="default: the suite, or the family")
    p.add_argument("--seeds", nargs="+", type=int, help="default: 1 2 3, a family's 1")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds per run, instead of the env's time (a step budget stays)",
    )
    p.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="override settings, except those the suite's flags and protocol set",
    )
    p.add_argument(
        "--logdir", default=None, help="keep the runs here (for a3c.plot); default: deleted"
    )
    args = p.parse_args()
    family = FAMILIES[args.family] if args.family else None
    envs = args.envs or ([e.env for e in family.envs] if family else list(SUITE))
    seeds = args.seeds or ([1] if family else [1, 2, 3])
    if family and (strangers := [e for e in envs if e not in {f.env for f in family.envs}]):
        p.error(f"not in the {args.family} family: {' '.join(strangers)}")
    budgets = {env: budget_for(env, family, args.budget) for env in envs}
    try:
        extra = parse_set(args.set)
        refuse_owned(extra, args.family, budgets.values())
    except ValueError as e:
        p.exit(2, f"{p.prog}: error: {e}\n")
    print(
        f"# {' '.join(sys.argv)}\n# nproc {os.cpu_count()}, torch {torch.__version__}, "
        f"{time.strftime('%Y-%m-%d %H:%M')}",
        flush=True,
    )
    lines: list[str] = []
    family_runs: list[FamilyRun] = []
    stopped = 0
    with tempfile.TemporaryDirectory() as scratch:
        logdir = args.logdir or scratch
        for env in envs:
            entry = family.entry(env) if family else None
            budget = budgets[env]
            try:
                make_env(env, **config_for(env).env_options()).close()  # the preset's wrappers
            except UsageError as e:  # e.g. LunarLander without the box2d extra
                print(f"  {env}: skipped: {e}", flush=True)
                lines.append(f"| {env} | | | skipped: {e} | | | | | |")
                continue
            target = entry.target if entry else None
            try:
                done = run_env(env, seeds, budget, args.workers, extra, logdir, target)
            except RunStopped as e:
                print(e, file=sys.stderr, flush=True)
                stopped, done = e.exit_code, e.done
            if entry:
                runs = [
                    FamilyRun(entry, budget, s, r)
                    for s, r in zip(done.seeds, done.runs, strict=True)
                ]
                family_runs += runs
                lines += [r.row() for r in runs]
            elif done.runs:
                lines.append(done.row())
            if stopped:
                break
    print(f"\n{FAMILY_HEADER if family else TABLE_HEADER}")
    print("\n".join(lines))
    if family:
        print(f"\n{family_summary(args.family, family_runs)}")
    if stopped:
        print("\nstopped early: the table has only the runs that finished before the stop")
    sys.exit(stopped)


if __name__ == "__main__":
    main()
