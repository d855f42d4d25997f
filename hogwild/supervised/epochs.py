"""What the main process keeps from one epoch to the next, the same for both strategies:
the history, the last scores, the best epoch, the milestones, and who may stop the run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hogwild.errors import UsageError
from hogwild.supervised.callbacks import Callback, EarlyStopping
from hogwild.supervised.config import FitConfig, epoch_lr
from hogwild.supervised.report import (
    LOSS,
    App,
    Monitor,
    epoch_line,
    epoch_record,
    final_metrics,
    log_epoch,
    milestone_lines,
    record_milestones,
)
from hogwild.supervised.task import Task


class EpochBook:
    """The run's record across epochs (see the module); a checkpoint holds its
    :meth:`state` and a resume :meth:`load`\\ s it back."""

    def __init__(
        self, cfg: FitConfig, task: Task, app: App, callbacks: Sequence[Callback] = ()
    ) -> None:
        self.cfg, self.app = cfg, app
        self.split = app.split if task.val is not None else "train"
        name = cfg.monitor or next(iter(task.metrics), LOSS)
        if name != LOSS and name not in task.metrics:
            known = ", ".join([LOSS, *task.metrics])
            raise UsageError(f"--monitor {name!r} is not a scored metric ({known})")
        self.monitor = Monitor(name, cfg.monitor_mode)
        self.callbacks = list(callbacks)
        if cfg.early_stop is not None:
            self.callbacks.append(EarlyStopping(name, cfg.early_stop, cfg.monitor_mode))
        for cb in self.callbacks:
            if not callable(getattr(cb, "on_epoch_end", None)):
                raise UsageError(f"callback {cb!r} has no on_epoch_end(epoch, metrics) method")
        self.history: list[dict[str, float]] = []
        self.metrics: dict[str, float] = {}
        self.milestones: dict[float, tuple[float, int]] = {}

    def end(
        self,
        epoch: int,
        metrics: dict[str, float],
        rundir: Any,
        *,
        samples: int,
        epoch_samples: int,
        train_time: float,
        elapsed: float,
    ) -> tuple[str, bool]:
        """Record and log epoch ``epoch`` (from 1); its console line, and whether it is
        the best so far (best.pt is then due)."""
        record = epoch_record(
            epoch,
            metrics,
            self.split,
            samples=samples,
            epoch_samples=epoch_samples,
            train_time=train_time,
            elapsed=elapsed,
            lr=epoch_lr(self.cfg, epoch - 1),
        )
        value = metrics.get(self.monitor.name)
        record_milestones(
            self.milestones, self.app.milestones, self.monitor, value, elapsed, samples
        )
        log_epoch(rundir, record, metrics, self.split)
        self.history.append(record)
        self.metrics = dict(metrics)
        return epoch_line(record, metrics, self.split), self.monitor.update(metrics, epoch)

    def stop_reason(self, epoch: int) -> str | None:
        """Why the run stops after ``epoch``: ``--target`` reached, a callback; else None."""
        cfg, value = self.cfg, self.metrics.get(self.monitor.name)
        if cfg.target is not None and value is not None and self.monitor.reaches(value, cfg.target):
            what = f"{self.split} {self.monitor.name}"
            return f"{what} {value:.4g} reached the target {cfg.target:g}: stopping"
        for cb in self.callbacks:
            if cb.on_epoch_end(epoch, dict(self.metrics)):
                return f"{type(cb).__name__} asked to stop after epoch {epoch}"
        return None

    def state(self) -> dict[str, Any]:
        return {
            "split": self.split,
            "metrics": dict(self.metrics),
            "history": list(self.history),
            "best": self.monitor.state(),
            "milestones": {str(k): list(v) for k, v in self.milestones.items()},
        }

    def load(self, ck: dict[str, Any]) -> None:
        self.history = list(ck.get("history", []))
        self.metrics = dict(ck.get("metrics", {}))
        self.milestones = {float(k): tuple(v) for k, v in ck.get("milestones", {}).items()}
        self.monitor.load(ck.get("best"))

    def closing_lines(self) -> list[str]:
        return milestone_lines(self.milestones, self.split, self.monitor.name)

    def summary(self) -> dict[str, float]:
        return final_metrics(self.metrics, self.split, self.milestones)
