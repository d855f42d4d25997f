"""What the main process reports as the run goes: the console line every ``--log-interval``
seconds, the Python callbacks, and every TensorBoard scalar of the run (the log windows',
the evaluations', the solved moment's and the callbacks' own). Rank 0 alone: only it has
a run folder."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from a3c.run.callbacks import Callback, RunEvent, call_all
from a3c.run.config import A3CConfig
from a3c.run.telemetry import RunStats, status_line, window_scalars
from hogwild.console import Progress
from hogwild.rundir import RunDir


class RunLogger:
    """Writes each log point's scalars (rates over the time since the last one) and the
    run's other scalars, into the run folder's TensorBoard."""

    def __init__(
        self,
        cfg: A3CConfig,
        rundir: RunDir | None,
        progress: Progress,
        callbacks: Sequence[Callback] = (),
    ) -> None:
        self.cfg, self.rundir, self.progress = cfg, rundir, progress
        self.callbacks = list(callbacks)
        self.last, self.steps_at_last = 0.0, 0

    def restart(self, now: float, steps: int) -> None:
        """Rates from here (the workers start now)."""
        self.last, self.steps_at_last = now, steps

    def due(self, now: float) -> bool:
        return now - self.last >= self.cfg.log_interval

    def write(self, stats: RunStats, steps: int, now: float) -> dict[str, float]:
        """The scalars of this log point (and the window's rates), as written."""
        written: dict[str, float] = {}
        if self.rundir is not None:
            seconds = max(now - self.last, 1e-9)
            written = window_scalars(stats, seconds, steps - self.steps_at_last, self.cfg.algo)
            self.rundir.scalars(written, steps)
        self.last, self.steps_at_last = now, steps
        return written

    def eval_scores(self, metrics: Mapping[str, float], step: int) -> None:
        """An evaluation's figures, as ``eval/<name>`` at the step of the model it scored."""
        if self.rundir is not None:
            self.rundir.scalars({f"eval/{k}": v for k, v in metrics.items()}, step)

    def solved(self, seconds: float, step: int) -> None:
        """When the run reached its target (seconds of the whole run)."""
        self.scalar("charts/solved_at_seconds", seconds, step)

    def scalar(self, tag: str, value: float, step: int) -> None:
        """One scalar: :meth:`RunEvent.log <a3c.run.callbacks.RunEvent.log>` writes here."""
        if self.rundir is not None:
            self.rundir.scalar(tag, value, step)

    def status(self, stats: RunStats, steps: int, seconds: float, start_steps: int) -> None:
        """The console's one live line."""
        if self.rundir is not None:
            self.progress.update(status_line(self.cfg, stats, steps, seconds, start_steps))

    def call_back(self, event: RunEvent) -> bool:
        """Call the callbacks; False if one asked to stop."""
        if not self.callbacks or self.rundir is None:
            return True
        return call_all(self.callbacks, event)

    def wants_events(self) -> bool:
        return bool(self.callbacks) and self.rundir is not None
