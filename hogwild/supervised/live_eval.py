"""Test-set scores during training, from the evaluator process (``--eval-interval``).

Every ``--eval-interval`` seconds the trainer offers a snapshot of the shared weights; the
scores come back later, go to TensorBoard at the snapshot's sample count, and count for the
milestones at the time the snapshot was taken, not when its score arrived.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import wait
from typing import Any

import torch
from torch import nn

from hogwild.evaluator import Evaluator
from hogwild.mnist.config import MnistConfig
from hogwild.mnist.data import load_test_set
from hogwild.mnist.model import build_model, evaluate
from hogwild.mnist.report import record_milestones
from hogwild.procs import WorkerFailure

log = logging.getLogger(__name__)


_TEST_SETS: dict[tuple[str, str], tuple[torch.Tensor, torch.Tensor]] = {}


def score_test_set(
    model: nn.Module,
    device: torch.device,
    step: int,
    *,
    data_dir: str,
    batch_size: int = 1000,
    nhwc: bool = True,
) -> dict[str, float]:
    """Evaluator callback: test loss and accuracy (%); the test set is loaded once per process."""
    key = (str(data_dir), str(device))
    if key not in _TEST_SETS:
        x, y = load_test_set(data_dir)
        _TEST_SETS[key] = (x.to(device), y.to(device))
    x, y = _TEST_SETS[key]
    loss, correct = evaluate(model, x, y, batch_size, nhwc and device.type == "cpu")
    return {"accuracy": 100.0 * correct / y.shape[0], "loss": loss}


class LiveEvaluation:
    """Starts the evaluator; stops it for good, with a warning, if it gives up."""

    def __init__(
        self,
        cfg: MnistConfig,
        flat: torch.Tensor,
        rundir: Any,
        milestones: dict[float, tuple[float, int]],
        t0: float,
    ) -> None:
        self.cfg, self.flat, self.rundir, self.t0 = cfg, flat, rundir, t0
        self.milestones = milestones  # the trainer's own dict, updated in place
        self._offered: dict[int, tuple[float, int]] = {}  # evaluator step -> (time, samples)
        self._last_offer = time.monotonic()
        self.evaluator: Evaluator | None = Evaluator(
            functools.partial(build_model, cfg.model),
            functools.partial(
                score_test_set,
                data_dir=str(cfg.data_dir),
                batch_size=cfg.test_batch_size,
                nhwc=cfg.channels_last,
            ),
            flat.numel(),
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
            if offered is not None:
                record_milestones(self.milestones, metrics["accuracy"], *offered)
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
