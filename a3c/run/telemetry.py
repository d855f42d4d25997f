"""The telemetry protocol, both ends: what workers send, and how the main process folds it in.

A worker sums its per-update figures and collects finished episodes, and every
``SEND_EVERY_S`` ships them in one pool slot (a fixed layout: nothing is pickled); the
main process adds each message to :class:`RunStats`, whose window it logs.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import torch

from a3c.learning.algorithms import ALGORITHMS
from a3c.learning.learner import COUNTS, STEP_FIGURES
from a3c.learning.metrics import MAX, MEAN, SUM, Metric, Tally
from a3c.run.config import NO_STEP_BUDGET, A3CConfig
from hogwild.console import Status
from hogwild.pool import BufferPool, PoolTimeout
from hogwild.procs import WorkerContext

#: The losses' figures that are not logged: the share of updates whose values were flat
#: (the trainer warns of it instead).
UNLOGGED = ("flat_values",)


def algorithm_metrics() -> tuple[Metric, ...]:
    """What the algorithms report, each for the algorithms that report it: their losses'
    figures (the fields of each figures record, logged as ``losses/<name>``) and their own
    counts (APPO's ``kl_stops``)."""
    by_name: dict[str, Metric] = {}
    for algo in ALGORITHMS.values():
        figures = (
            Metric(name, None if name in UNLOGGED else f"losses/{name}")
            for name in algo.figures.names()
        )
        for m in (*figures, *algo.metrics):
            held = by_name.get(m.name)
            by_name[m.name] = replace(m, algos=(*((held.algos or ()) if held else ()), algo.name))
    return tuple(by_name.values())


#: Every figure a worker reports, in message order: the learner's counts, the worker's
#: env steps, the algorithms' figures and the learner's per step (a new one needs nothing
#: here).
METRICS = (
    *COUNTS,
    Metric("env_steps", None, SUM),
    # many agents (a3c.envs.multiagent): games ended, their returns summed over agents, and
    # moves an action mask forbade
    Metric("games", None, SUM),
    Metric("team_return", None, SUM),
    Metric("illegal_moves", None, SUM),
    # the updates made since the weights that acted were copied, when their rollout's
    # learning began: the lag a ratio against the acting policy corrects (every algorithm)
    Metric("policy_lag", "charts/policy_lag"),
    Metric("policy_lag_max", "charts/policy_lag_max", MAX),
    *algorithm_metrics(),
    *STEP_FIGURES,
)
STATS = tuple(m.name for m in METRICS)
if len(set(STATS)) < len(STATS):  # a figure would be summed into another's slot
    raise ValueError(f"a worker's figures share names: {STATS}")
#: A figure's place in a message, by name.
STAT = {name: i for i, name in enumerate(STATS)}
#: The slots kept as the largest value, not summed.
PEAKS = np.array([i for i, m in enumerate(METRICS) if m.logged == MAX], dtype=np.int64)
MAX_EPISODES = 256
#: The console's team return is the mean of about this many games, the last ones ended.
TEAM_GAMES = 100
SEND_EVERY_S = 0.05


def telemetry_layout() -> dict:
    return {
        "stats": ((len(STATS),), torch.float64),
        "n_episodes": ((), torch.int64),
        "ep_return": ((MAX_EPISODES,), torch.float64),
        "ep_length": ((MAX_EPISODES,), torch.int64),
        "ep_agent": ((MAX_EPISODES,), torch.int64),
    }


class WorkerTelemetry:
    """Accumulates stats and finished episodes; ships them through the pool now and then."""

    def __init__(self, pool: BufferPool, rank: int, ctx: WorkerContext) -> None:
        self.producer = pool.producer(rank)
        self.ctx = ctx
        self.stats = Tally(STATS)
        self.returns: list[float] = []
        self.lengths: list[int] = []
        self.agents: list[int] = []
        self.last = time.monotonic()

    def add_episodes(self, episodes: list[tuple[float, int, int]]) -> None:
        """Finished episodes' (return, length, agent), for the next message."""
        for ret, length, agent in episodes:
            self.returns.append(ret)
            self.lengths.append(length)
            self.agents.append(agent)

    def due(self) -> bool:
        return time.monotonic() - self.last >= SEND_EVERY_S or len(self.returns) > MAX_EPISODES // 2

    def send(self) -> None:
        while True:
            try:
                slot = self.producer.acquire(timeout=0.5)
                break
            except PoolTimeout:
                if self.ctx.should_stop():
                    return
        buf = self.producer.view(slot)
        n = min(len(self.returns), MAX_EPISODES)
        buf["stats"].copy_(torch.from_numpy(self.stats.array))
        buf["n_episodes"].fill_(n)
        buf["ep_return"][:n] = torch.tensor(self.returns[:n], dtype=torch.float64)
        buf["ep_length"][:n] = torch.tensor(self.lengths[:n], dtype=torch.int64)
        buf["ep_agent"][:n] = torch.tensor(self.agents[:n], dtype=torch.int64)
        self.producer.submit(slot)
        self.stats.array[:] = 0
        del self.returns[:n], self.lengths[:n], self.agents[:n]
        self.last = time.monotonic()


class RunStats:
    """What the main process knows of the run, folded in from telemetry messages."""

    def __init__(self, agents: Sequence[str] = (), self_play: bool = False) -> None:
        self.agents = tuple(agents)  # many agents: their names, by the index episodes carry
        # one policy in every seat of a zero-sum game (a3c.scoring.self_play): the training
        # mean is 0, and progress is the last evaluation's, against a random player
        self.self_play = self_play
        self.last_eval: dict[str, float] | None = None
        self.recent: collections.deque[float] = collections.deque(maxlen=100)
        self.env_steps = 0
        self.episodes = 0
        self.window = np.zeros(len(STATS))
        self.window_returns: list[float] = []
        self.window_lengths: list[int] = []
        self.window_agents: list[int] = []
        self.teams: collections.deque[tuple[float, float]] = collections.deque()  # (games, sum)

    def add(self, buf: dict[str, torch.Tensor]) -> None:
        stats = buf["stats"].numpy()
        peaks = np.maximum(self.window[PEAKS], stats[PEAKS])
        self.window += stats
        self.window[PEAKS] = peaks
        self.env_steps += int(stats[STAT["env_steps"]])
        games = stats[STAT["games"]]
        if games:
            self.teams.append((games, stats[STAT["team_return"]]))
            while sum(g for g, _ in self.teams) - self.teams[0][0] >= TEAM_GAMES:
                self.teams.popleft()
        n = int(buf["n_episodes"])
        if n:
            rets = buf["ep_return"][:n].tolist()
            self.recent.extend(rets)
            self.window_returns.extend(rets)
            self.window_lengths.extend(buf["ep_length"][:n].tolist())
            self.window_agents.extend(buf["ep_agent"][:n].tolist())
            self.episodes += n

    @property
    def mean_100(self) -> float:
        return float(np.mean(self.recent)) if self.recent else float("nan")

    @property
    def team_100(self) -> float | None:
        """Many agents: the mean team return of the last ~100 games ended (None: none yet)."""
        games = sum(g for g, _ in self.teams)
        return sum(t for _, t in self.teams) / games if games else None

    @property
    def progress(self) -> float | None:
        """The figure progress reads from: the 100-episode mean (None before an episode);
        in self-play, the last evaluation's mean return against a random player."""
        if self.self_play:
            return None if self.last_eval is None else self.last_eval["mean_return"]
        return self.mean_100 if self.recent else None

    def self_play_summary(self) -> str:
        """Self-play's progress, as the console shows it: the last evaluation's win rate
        against a random player, per seat, and against the policy it scored before."""
        last = self.last_eval
        if last is None:
            return "vs random: no evaluation yet"
        seats = [f"{k[len('win_rate_') :]} {v:.2f}" for k, v in last.items()
                 if k.startswith("win_rate_") and k != "win_rate_vs_previous"]  # fmt: skip
        previous = last.get("win_rate_vs_previous")
        return (
            f"vs random: won {last.get('win_rate', float('nan')):.2f}"
            + (f" ({', '.join(seats)})" if seats else "")
            + f", return {last['mean_return']:.2f}"
            + ("" if previous is None else f"; vs previous eval: won {previous:.2f}")
        )

    @property
    def full_100(self) -> bool:
        """Whether ``mean_100`` is over 100 episodes."""
        return len(self.recent) == self.recent.maxlen


def window_scalars(
    stats: RunStats, dt: float, steps: int, algo: str = A3CConfig.algo
) -> dict[str, float]:
    """The window's figures by TensorBoard tag (``steps`` env steps in ``dt`` seconds); the
    next window starts empty. :class:`~a3c.run.logger.RunLogger` writes them."""
    w = stats.window
    scalars: dict[str, float] = {}
    if stats.window_returns:
        scalars.update(
            {
                "charts/episodic_return": float(np.mean(stats.window_returns)),
                "charts/episodic_length": float(np.mean(stats.window_lengths)),
                "charts/mean_return_100": stats.mean_100,
            }
        )
    if len(stats.agents) > 1 and stats.window_returns:
        returns, agents = np.array(stats.window_returns), np.array(stats.window_agents)
        for i, name in enumerate(stats.agents):
            if (agents == i).any():
                scalars[f"agents/{name}_return"] = float(returns[agents == i].mean())
    games, illegal = w[STAT["games"]], w[STAT["illegal_moves"]]
    if games > 0:
        scalars["charts/team_return"] = w[STAT["team_return"]] / games
    if games > 0 or illegal > 0:
        scalars["charts/illegal_moves"] = illegal
    n = w[STAT["updates"]]
    if n > 0 or w[STAT["skipped"]] > 0:
        # A window whose every update was skipped still logs its counts: the skipped
        # count is what explains it; means per update need an update.
        scalars.update(
            {
                m.tag: w[i] / n if m.logged == MEAN else w[i]
                for i, m in enumerate(METRICS)
                if m.tag is not None
                and (m.algos is None or algo in m.algos)
                and (n > 0 or m.logged != MEAN)
            }
        )
        scalars["perf/env_steps_per_sec"] = steps / dt
        scalars["perf/updates_per_sec"] = n / dt
    stats.window[:] = 0
    stats.window_returns.clear()
    stats.window_lengths.clear()
    stats.window_agents.clear()
    return {k: float(v) for k, v in scalars.items()}


def status_line(
    cfg: A3CConfig, stats: RunStats, steps: int, elapsed: float, start_steps: int
) -> Status:
    """The console's view: env steps against the budget, and how close to solved."""
    rate = (steps - start_steps) / max(elapsed, 1e-9)
    target = "" if cfg.target_return is None else f" / target {cfg.target_return:g}"
    mean = f"{stats.mean_100:.1f}" if stats.recent else "(no episode yet)"
    team_100 = stats.team_100
    team = "" if team_100 is None else f", team {team_100:.1f}"
    solved = f"mean return(100) {mean}{target}{team}, episodes {stats.episodes:,}"
    if stats.self_play:  # the training mean is 0: the evaluation's figures instead
        solved = f"{stats.self_play_summary()}{target}, episodes {stats.episodes:,}"
    total = None if cfg.total_steps >= NO_STEP_BUDGET else cfg.total_steps
    budget = "" if total is None else f"/{total:,}"
    return Status(
        line=f"steps {steps:,}{budget}  {rate:,.0f} steps/s  {solved}  elapsed {elapsed:.0f}s",
        done=steps,
        total=total,
        postfix=solved,
    )
