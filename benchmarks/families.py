"""The family benchmarks of ``suite.py --family``: each family's envs, budget, targets, and
the published results beside them (each with its own budget, which is rarely ours), and
how a run is judged against them.

One declaration per env, so that a target or an anchor is changed in one place; the
targets are what 2 workers on a 2-core machine should reach, the anchors as published.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Protocol

from a3c.envs.families import family_of
from a3c.run.record import Solved

#: Agent steps per emulator frame for Atari: the presets' frame skip.
FRAME_SKIP = 4


class Trained(Protocol):
    """What a family's table reads of one run (``suite.py``'s ``ReturnRun``)."""

    final: float
    best: float
    seconds: float
    env_steps: int
    greedy: float | None
    solved_at: Solved | None


@dataclass(frozen=True)
class Budget:
    """How long each run of an env trains."""

    seconds: float  # the time budget; with ``steps``, only a limit
    steps: int | None = None  # a budget of agent steps (None: the time is the budget)


@dataclass(frozen=True)
class HumanScale:
    """An Atari game's scores of random play and of a human tester (the DQN paper's, Mnih
    et al. 2015, as DQN Zoo's ``atari_data.py`` holds them): games' raw scores differ by
    orders of magnitude, so a median across games is taken of ``(score - random) / (human
    - random)``."""

    random: float
    human: float

    def normalise(self, score: float) -> float:
        return (score - self.random) / (self.human - self.random)


@dataclass(frozen=True)
class FamilyEnv:
    """One env of a family: the target a run should meet and the published anchors."""

    env: str
    target: float
    anchor: str  # published results, each with its own budget
    budget: Budget | None = None  # its own, instead of the family's (Pong)
    #: Met when the 100-episode mean first reaches the target within the budget (the
    #: trainer's ``solved_at``: Pong's +18 in 20 minutes); else by the final mean.
    reach: bool = False
    scale: HumanScale | None = None  # Atari's: the family's median is human-normalised
    published: float | None = None  # the first anchor's score, for the anchors' median


@dataclass(frozen=True)
class Family:
    """A family's envs and the budget each gets unless it declares its own."""

    budget: Budget
    envs: tuple[FamilyEnv, ...]

    def entry(self, env: str) -> FamilyEnv:
        return next(e for e in self.envs if e.env == env)

    def budget_of(self, env: str) -> Budget:
        return self.entry(env).budget or self.budget


CLEANRL = "CleanRL PPO {} (10M steps = 40M frames)"
A3C_PAPER = "A3C paper FF {} (1 day, 16 cores)"
ZOO = "RL-Zoo PPO {} (1M steps)"
SF = "Sample Factory APPO {} (10M steps)"
GYMNAX = "gymnax PPO {} (10M steps)"


def atari(
    game: str, target: float, cleanrl: float, a3c_paper: float, scale: HumanScale
) -> FamilyEnv:
    """A game judged by its final score: CleanRL's and the A3C paper's beside it."""
    anchor = f"{CLEANRL.format(f'{cleanrl:,g}')}; {A3C_PAPER.format(f'{a3c_paper:,g}')}"
    return FamilyEnv(game, target, anchor, scale=scale, published=cleanrl)


FAMILIES: dict[str, Family] = {
    "atari": Family(
        Budget(45 * 60, 2_500_000),  # 10M frames; the time only a generous limit
        (
            atari("BreakoutNoFrameskip-v4", 150, 430, 551.6, HumanScale(1.7, 30.5)),
            atari("SpaceInvadersNoFrameskip-v4", 500, 1_189, 2_215, HumanScale(148.0, 1_668.7)),
            atari("QbertNoFrameskip-v4", 4_000, 17_246, 13_752, HumanScale(163.9, 13_455.0)),
            atari("BeamRiderNoFrameskip-v4", 1_200, 2_478, 13_236, HumanScale(363.9, 16_926.5)),
            FamilyEnv(
                "PongNoFrameskip-v4", 18, CLEANRL.format(20.4), budget=Budget(20 * 60), reach=True
            ),
        ),
    ),
    "mujoco": Family(
        Budget(10 * 60),
        (
            FamilyEnv("HalfCheetah-v5", 5_000, f"{ZOO.format('5,819')}; {SF.format('6,263')}"),
            FamilyEnv("Hopper-v5", 3_000, f"{ZOO.format('2,410')}; {SF.format('2,793')}"),
            FamilyEnv(
                "Walker2d-v5",
                4_000,
                f"{ZOO.format('3,479')}; {SF.format('5,488')}; "
                "rl_games PPO 5,186 (4.6 min, 16 cores)",
            ),
            FamilyEnv(
                "Ant-v5",
                3_000,
                f"{ZOO.format('1,327')}; {SF.format('5,876')}; "
                "rl_games PPO 4,429 (5.3 min, 16 cores)",
            ),
            FamilyEnv("Humanoid-v5", 1_000, f"CleanRL PPO 716 (1M steps); {SF.format('5,439')}"),
        ),
    ),
    "minatar": Family(
        Budget(10 * 60),
        (
            FamilyEnv("MinAtar/Asterix-v1", 15, GYMNAX.format(15)),
            FamilyEnv("MinAtar/Breakout-v1", 40, GYMNAX.format(28)),
            FamilyEnv("MinAtar/Freeway-v1", 58, GYMNAX.format(58)),
            FamilyEnv("MinAtar/SpaceInvaders-v1", 131, GYMNAX.format(131)),
            FamilyEnv("MinAtar/Seaquest-v1", 30, "none published"),
        ),
    ),
}


#: The table of ``--family``: one row per run.
FAMILY_HEADER = (
    "| env | seed | trained | final 100-episode mean | greedy (10) | env steps/s | target "
    "| miss | published |\n|---|---|---|---|---|---|---|---|---|"
)


@dataclass
class FamilyRun:
    """One seed of a family's env, judged against the env's target."""

    entry: FamilyEnv
    budget: Budget  # the one it ran with
    seed: int
    run: Trained

    def met(self) -> bool:
        """By the final mean; by reaching the target within the budget where ``reach``."""
        run, entry = self.run, self.entry
        if entry.reach:
            return run.solved_at is not None and run.solved_at.seconds <= self.budget.seconds
        return run.final >= entry.target

    def miss(self) -> str:
        run, target = self.run, self.entry.target
        if self.entry.reach:
            if self.met():
                return f"met after {run.solved_at.seconds / 60:.1f} min"
            if run.solved_at is not None:
                return f"reached after {run.solved_at.seconds / 60:.1f} min: late"
            if math.isnan(run.best):  # never 100 episodes
                return "not reached"
            return f"{target - run.best:,.1f} short (best mean {run.best:,.1f})"
        if self.met():
            return "met"
        return f"{target - run.final:,.1f} short ({run.final / target:.0%} of it)"

    def row(self) -> str:
        run, entry, budget = self.run, self.entry, self.budget
        trained = f"{run.env_steps:,} steps"
        if family_of(entry.env) == "atari":
            trained += f" = {FRAME_SKIP * run.env_steps / 1e6:.1f}M frames"
        trained += f", {run.seconds / 60:.1f} min"
        if budget.steps is not None and run.env_steps < budget.steps:
            trained += f" (time limit, of {budget.steps / 1e6:.2f}M)"
        target = f"{entry.target:,g}"
        if entry.reach:
            target += f" within {budget.seconds / 60:.3g} min"
        greedy = "" if run.greedy is None else f"{run.greedy:,.1f}"
        return (
            f"| {entry.env} | {self.seed} | {trained} | {run.final:,.1f} | {greedy} "
            f"| {run.env_steps / run.seconds:,.0f} | {target} | {self.miss()} | {entry.anchor} |"
        )


def family_summary(name: str, runs: list[FamilyRun]) -> str:
    """How many runs met their target (a count: a fraction of Pong's +18 means little for a
    score that starts at -21), and the median across envs of each env's median final mean,
    human-normalised where the family's envs are Atari games (Pong, judged by the time to
    +18, is left out)."""
    met = sorted({r.entry.env for r in runs if r.met()})
    summary = f"{name}: target met in {sum(r.met() for r in runs)} of {len(runs)} runs" + (
        f" ({', '.join(met)})" if met else ""
    )
    finals: dict[FamilyEnv, list[float]] = {}
    for r in runs:
        if not r.entry.reach and not math.isnan(r.run.final):  # nan: not 100 episodes
            finals.setdefault(r.entry, []).append(r.run.final)
    if not finals:
        return summary
    envs = [(entry, statistics.median(scores)) for entry, scores in finals.items()]
    count = f"{len(envs)} env{'s' if len(envs) > 1 else ''}"
    if all(entry.scale for entry, _ in envs):
        ours = statistics.median(entry.scale.normalise(score) for entry, score in envs)
        theirs = statistics.median(entry.scale.normalise(entry.published) for entry, _ in envs)
        return (
            f"{summary}; median human-normalised final mean {ours:.2f} over {count} "
            f"(the first anchors' over the same: {theirs:.2f})"
        )
    median = statistics.median(score for _, score in envs)
    return f"{summary}; median final mean {median:,.1f} over {count}"
