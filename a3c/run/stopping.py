"""When the run has reached its target: the 100-episode training mean or an evaluation at
``--target-return`` (whichever ``--target-metric`` names), and the record it is read from
(the best 100-episode mean, the moment the run was solved)."""

from __future__ import annotations

from a3c.run.config import A3CConfig
from a3c.run.record import BestMean, RunHistory, Solved
from a3c.run.telemetry import RunStats


class StopRules:
    """Reads the run's figures against ``--target-return``/``--target-metric`` and keeps
    ``history`` (solved time, best 100-episode mean) up to date."""

    def __init__(self, cfg: A3CConfig, history: RunHistory) -> None:
        self.target, self.metric = cfg.target_return, cfg.target_metric
        self.history = history

    def track_best_100(self, stats: RunStats, seconds: float, steps: int) -> None:
        """Note a new best 100-episode mean."""
        best = self.history.best_100
        if stats.full_100 and (best is None or stats.mean_100 > best.mean):
            self.history.best_100 = BestMean(stats.mean_100, seconds, steps)

    def solved_now(self, stats: RunStats, seconds: float, steps: int) -> bool:
        """Whether the 100-episode mean reached the target just now (noted in the record)."""
        self.track_best_100(stats, seconds, steps)
        if self.solved or self.target is None or not stats.full_100:
            return False
        if stats.mean_100 < self.target:
            return False
        self.history.solved_at = Solved(seconds, steps, self.target)
        return True

    @property
    def solved(self) -> bool:
        """Whether the run has reached this target; a resume with a higher target has not."""
        solved = self.history.solved_at
        if solved is None:
            return False
        return solved.target is None or self.target is None or solved.target >= self.target

    def train_reason(self, stats: RunStats) -> str | None:
        """The reason to stop once solved, if the training mean is the target metric."""
        if self.metric != "train":
            return None
        return f"100-episode mean return {stats.mean_100:.1f} reached the target"

    def eval_reason(self, score: float) -> str | None:
        """The reason to stop after an evaluation, if it is the target metric and reached it."""
        if self.metric == "eval" and self.target is not None and score >= self.target:
            return f"evaluation mean return {score:.1f} reached the target"
        return None
