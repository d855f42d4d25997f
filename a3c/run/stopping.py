"""The run's targets and its record of progress: when it is solved, when an evaluation
reached the target, the best 100-episode mean, when the policy has stopped exploring,
and when the value net gives every observation the same value."""

from __future__ import annotations

from a3c.run.config import A3CConfig
from a3c.run.record import BestMean, RunHistory, Solved
from a3c.run.telemetry import STAT, RunStats

#: Warn when the policy's entropy is below this fraction of the uniform policy's while
#: the 100-episode mean has not improved for STALL_S seconds (a near-deterministic policy
#: that still improves, as on MountainCar-v0 at ~4% of uniform, is left alone).
ENTROPY_COLLAPSE = 0.1
STALL_S = 30.0
#: A rise of the 100-episode mean counts as progress when it beats the mean of the last
#: progress by this share of its size (of 1 where smaller): a collapsed CartPole's mean
#: crept from 9.3 to 9.5 by noise records in a second (CI) and never looked stalled.
PROGRESS_SHARE = 0.01
#: Warn when at least this share of the updates had flat values (one value for every
#: observation: a dead layer) in every log window for FLAT_S seconds. Pong's APPO lost
#: its first conv layer in 1 start of 6 (docs/benchmarks.md) and never came back.
FLAT_SHARE = 0.9
FLAT_S = 30.0


class Targets:
    """Reads the run's figures against ``--target-return``/``--target-metric`` and keeps
    ``history`` (solved time, best 100-episode mean, the entropy warning) up to date."""

    def __init__(self, cfg: A3CConfig, history: RunHistory, max_entropy: float | None) -> None:
        self.target, self.metric = cfg.target_return, cfg.target_metric
        self.history = history
        self.max_entropy = max_entropy
        self.last_progress = 0.0  # when the 100-episode mean last rose (monotonic s)
        self.progress_mean: float | None = None  # and to what
        self.flat_since: float | None = None  # since when every window's values were flat

    def track_best_100(self, stats: RunStats, seconds: float, steps: int, now: float) -> bool:
        """Note a new best 100-episode mean; whether the window is full."""
        history = self.history
        full = len(stats.recent) == stats.recent.maxlen
        if full and (history.best_100 is None or stats.mean_100 > history.best_100.mean):
            history.best_100 = BestMean(stats.mean_100, seconds, steps)
        mark = self.progress_mean
        if full and (mark is None or stats.mean_100 > mark + PROGRESS_SHARE * max(abs(mark), 1)):
            self.progress_mean, self.last_progress = stats.mean_100, now
        return full

    def solved_now(self, stats: RunStats, seconds: float, steps: int, now: float) -> bool:
        """Whether the 100-episode mean reached the target just now (noted in the record)."""
        full = self.track_best_100(stats, seconds, steps, now)
        if self._solved() or self.target is None or not full:
            return False
        if stats.mean_100 < self.target:
            return False
        self.history.solved_at = Solved(seconds, steps, self.target)
        return True

    def _solved(self) -> bool:
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

    def entropy_collapse(self, stats: RunStats, now: float) -> str | None:
        """A warning, once, when the policy has stopped exploring and improving."""
        w, history = stats.window, self.history
        updates = w[STAT["updates"]]
        stalled = now - self.last_progress >= STALL_S
        if history.entropy_warned or updates == 0 or self._solved() or not stalled:
            return None
        entropy, uniform = w[STAT["entropy"]] / updates, self.max_entropy
        if not uniform or entropy >= ENTROPY_COLLAPSE * uniform:
            return None
        history.entropy_warned = True
        target = self.target
        return (
            f"warning: the policy's entropy fell to {entropy:.3f} (uniform: {uniform:.2f})"
            + (f" before the target {target:g} was reached" if target is not None else "")
            + f" and the 100-episode mean is flat for {now - self.last_progress:.0f} s;"
            " it has almost stopped exploring (try --entropy-coef 0.01)"
        )

    def flat_values(self, stats: RunStats, now: float) -> str | None:
        """A warning, once, when the value net has given every observation the same value
        for ``FLAT_S`` seconds while the returns varied."""
        w = stats.window
        updates = w[STAT["updates"]]
        if self.history.flat_values_warned or updates == 0:
            return None
        if w[STAT["flat_values"]] < FLAT_SHARE * updates:
            self.flat_since = None
            return None
        if self.flat_since is None:
            self.flat_since = now
        if now - self.flat_since < FLAT_S:
            return None
        self.history.flat_values_warned = True
        return (
            f"warning: for {now - self.flat_since:.0f} s the value net has given every"
            " observation the same value (explained variance 0) while the returns varied:"
            " a layer has likely died (no ReLU unit positive on any input) and the run will"
            " not learn any more (charts/dead_units says how much of the first conv layer);"
            " start it again (another --seed, a lower --lr, or --center-frames on images)"
        )
