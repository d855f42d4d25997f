"""Hooks into a run from Python: ``train(cfg, callbacks=[...])``.

A callback is any callable taking one :class:`RunEvent`. It is called in the main process
(rank 0 under ``torchrun``) at each log point (``kind="log"``, every ``--log-interval``
seconds), after each evaluation (``"eval"``) and once at the end (``"end"``). Returning
``False`` stops the run as a reached target does: workers stop, the checkpoint is written,
and :class:`~a3c.run.record.A3CResult` comes back. An exception raised in a callback stops the
run the same way and is then raised from ``train``. ``event.log(tag, value)`` writes a
scalar of your own to the run's TensorBoard at the event's step.

    def stop_when_good(event):
        if event.kind == "eval" and event.eval_mean_return >= 490:
            return False
        event.log("custom/episodes", event.episodes)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

#: The reason a run gives when a callback returned False.
STOPPED = "stopped by a callback"


@dataclasses.dataclass(frozen=True)
class RunEvent:
    """The run's figures at a log point, an evaluation or the end."""

    kind: Literal["log", "eval", "end"]
    env_steps: int  # the run's, all workers and nodes
    seconds: float  # of the whole run, earlier sessions (before --resume) included
    episodes: int
    mean_return_100: float | None  # the last 100 training episodes' mean; None before one
    best_mean_100: float | None
    eval_mean_return: float | None  # this evaluation's ("eval"), else None
    best_eval: float | None
    stats: Mapping[str, float]  # what this log point wrote, by TensorBoard tag
    run_dir: Path | None
    # what progress reads from: mean_return_100, but in a zero-sum game one policy plays in
    # every seat (training returns sum to 0) the last evaluation's return against a random
    # player; None before either
    progress: float | None = None
    _writer: Callable[[str, float, int], None] | None = dataclasses.field(
        default=None, repr=False, compare=False
    )

    def log(self, tag: str, value: float) -> None:
        """Write ``value`` to the run's TensorBoard as ``tag`` at this event's step."""
        if self._writer is not None:
            self._writer(tag, float(value), self.env_steps)


Callback = Callable[[RunEvent], Any]


def finite_or_none(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def call_all(callbacks: list[Callback], event: RunEvent) -> bool:
    """Every callback, in order; False when one asked to stop (all are still called)."""
    stop = False
    for callback in callbacks:
        if callback(event) is False:
            stop = True
    return not stop
