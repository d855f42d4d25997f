"""The run's health: warnings of a run that goes on but has stopped learning. A policy that
no longer explores nor improves, and a value net that gives every observation the same
value (a dead layer). Each is given once in a run: the record (:class:`RunHistory`) keeps
that it was, so a resumed run does not repeat it."""

from __future__ import annotations

from a3c.run.record import RunHistory
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


class Health:
    """Reads each log window for a run that has stopped learning; ``history`` records
    the warnings given."""

    def __init__(
        self, history: RunHistory, max_entropy: float | None, target: float | None
    ) -> None:
        self.history = history
        self.max_entropy, self.target = max_entropy, target
        self.last_progress = 0.0  # when the 100-episode mean last rose (monotonic s)
        self.progress_mean: float | None = None  # and to what
        self.flat_since: float | None = None  # since when every window's values were flat

    def restart(self, now: float) -> None:
        """Stalls count from here (the workers start now)."""
        self.last_progress = now

    def warnings(self, stats: RunStats, now: float, solved: bool) -> list[str]:
        """The warnings due at this log point, before its window is written."""
        self._note_progress(stats, now)
        found = (self.entropy_collapse(stats, now, solved), self.flat_values(stats, now))
        return [warning for warning in found if warning]

    def _note_progress(self, stats: RunStats, now: float) -> None:
        mark = self.progress_mean
        if stats.full_100 and (
            mark is None or stats.mean_100 > mark + PROGRESS_SHARE * max(abs(mark), 1)
        ):
            self.progress_mean, self.last_progress = stats.mean_100, now

    def entropy_collapse(self, stats: RunStats, now: float, solved: bool) -> str | None:
        """A warning, once, when the policy has stopped exploring and improving before the
        run was ``solved``."""
        w, history = stats.window, self.history
        updates = w[STAT["updates"]]
        stalled = now - self.last_progress >= STALL_S
        if history.entropy_warned or updates == 0 or solved or not stalled:
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
