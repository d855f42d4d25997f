"""Validation scores during training, from the evaluator process (``--eval-interval``).

Every ``--eval-interval`` seconds the trainer offers a snapshot of the shared weights; the
scores come back later, go to TensorBoard at the snapshot's sample count, and count for the
milestones at the time the snapshot was taken, not when its score arrived.
"""

from __future__ import annotations

import copy
import functools
import logging
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import wait
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from hogwild.errors import UsageError
from hogwild.evaluator import Evaluator
from hogwild.procs import WorkerFailure
from hogwild.sharing import SharedModel
from hogwild.supervised.config import FitConfig
from hogwild.supervised.epochs import EpochBook
from hogwild.supervised.report import evaluate, record_milestones
from hogwild.supervised.task import Metric, Objective, Task

log = logging.getLogger(__name__)


def score_dataset(
    model: nn.Module,
    device: torch.device,
    step: int,
    *,
    data: Dataset,
    objective: Objective,
    metrics: dict[str, Metric],
    batch_size: int,
) -> dict[str, float]:
    """Evaluator callback: the validation scores of the snapshot (module level: it pickles)."""
    return evaluate(model, data, objective, metrics, batch_size, device)


def check_live_evaluation(shared: SharedModel, has_val: bool) -> None:
    """The evaluator rebuilds the model from one flat vector of its parameters: every
    parameter trainable, of one dtype, dense, and no buffers it would not see."""
    model = shared.module
    if not has_val:
        raise UsageError("--eval-interval scores the validation set: give the run one")
    if (
        len(shared.groups) > 1
        or any(True for _ in shared.tables)
        or any(not p.requires_grad for p in model.parameters())
        or any(True for _ in model.buffers())
    ):
        raise UsageError(
            "--eval-interval needs a model of dense trainable parameters of one dtype and no "
            "buffers (this one has sparse tables, frozen parameters, several dtypes or "
            "BatchNorm statistics): leave it at 0, epochs are scored anyway"
        )


class LiveEvaluation:
    """Starts the evaluator; stops it for good, with a warning, if it gives up."""

    def __init__(
        self,
        cfg: FitConfig,
        task: Task,
        shared: SharedModel,
        book: EpochBook,
        rundir: Any,
        t0: float,
    ) -> None:
        assert task.val is not None, "check_live_evaluation refuses a run without one"
        self.cfg, self.flat, self.rundir, self.t0 = cfg, shared.primary.flat, rundir, t0
        self.book = book  # its milestones count the evaluator's scores too
        self._offered: dict[int, tuple[float, int]] = {}  # evaluator step -> (time, samples)
        self._last_offer = time.monotonic()
        self.evaluator: Evaluator | None = Evaluator(
            functools.partial(copy.deepcopy, task.model),
            functools.partial(
                score_dataset,
                data=task.val,
                objective=task.objective,
                metrics=task.metrics,
                batch_size=cfg.val_batch_size,
            ),
            self.flat.numel(),
            device=cfg.eval_device,
            seed=cfg.seed,
        ).start()

    def waitables(self) -> list[object]:
        return [] if self.evaluator is None else self.evaluator.waitables()

    def poll(self, ready: Sequence[object], samples: int, offer: bool = True) -> None:
        """Record what was scored; offer the current weights if the interval has passed."""
        ev = self.evaluator
        if ev is None:
            return
        try:
            scored = ev.collect(ready)
        except WorkerFailure as e:
            log.warning("evaluator gave up (%s); training goes on without it", e)
            self.stop()
            return
        for step, metrics, _params in scored:
            self.rundir.scalars({f"eval/{k}": v for k, v in metrics.items()}, step)
            offered = self._offered.pop(step, None)
            book = self.book
            if offered is not None:
                value = metrics.get(book.monitor.name)
                targets = book.app.milestones
                record_milestones(book.milestones, targets, book.monitor, value, *offered)
        now = time.monotonic()
        if offer and now - self._last_offer >= self.cfg.eval_interval:
            self._last_offer = now
            if ev.offer(self.flat, samples):
                self._offered[samples] = (now - self.t0, samples)
                while len(self._offered) > 16:
                    self._offered.pop(next(iter(self._offered)))

    def final_score(
        self, samples: int, stop_requested: Callable[[], bool], timeout: float = 30.0
    ) -> None:
        """Have the evaluator score the final weights too, so its curve ends where training did."""
        deadline = time.monotonic() + timeout
        offered = samples in self._offered
        while self.evaluator is not None and (not offered or samples in self._offered):
            if not offered and self.evaluator.offer(self.flat, samples):
                self._offered[samples] = (time.monotonic() - self.t0, samples)
                offered = True
            remaining = deadline - time.monotonic()
            if remaining <= 0 or stop_requested():
                log.warning("evaluator did not score the final weights in %.0f s", timeout)
                return
            ready = wait(self.evaluator.waitables(), timeout=min(remaining, 0.25))
            self.poll(ready, samples, offer=False)

    def stop(self) -> None:
        if self.evaluator is not None:
            self.evaluator.stop()
            self.evaluator = None

    def request_stop(self) -> None:
        if self.evaluator is not None:
            self.evaluator.request_stop()

    def kill_now(self) -> None:
        if self.evaluator is not None:
            self.evaluator.kill_now()
