"""What the main process reports as the run goes: TensorBoard scalars and the console line
every ``--log-interval`` seconds, and the Python callbacks (rank 0 alone: only it has a run
folder)."""

from __future__ import annotations

from collections.abc import Sequence

from a3c.run.callbacks import Callback, RunEvent, call_all
from a3c.run.config import A3CConfig
from a3c.run.telemetry import RunStats, status_line, write_logs
from hogwild.console import Progress
from hogwild.rundir import RunDir


class RunLogger:
    """Writes each log point's scalars (rates over the time since the last one)."""

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
            written = write_logs(
                self.rundir, stats, steps, seconds, steps - self.steps_at_last, self.cfg.algo
            )
        self.last, self.steps_at_last = now, steps
        return written

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
