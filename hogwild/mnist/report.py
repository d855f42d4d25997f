"""What a run reports, the same in both modes: console lines, TensorBoard scalars, result."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import torch
from torch import nn

from hogwild.console import Status
from hogwild.mnist.config import MnistConfig, epoch_lr
from hogwild.mnist.model import evaluate
from hogwild.rundir import RunDir

MILESTONES = (98.0, 99.0)  # test accuracies (%) whose first arrival time is reported


class EpochScore(NamedTuple):
    """The test set's score after an epoch, read by name in both modes (not ``Test...``:
    pytest would take a class so named, imported into a test file, for a test)."""

    loss: float  # mean NLL
    accuracy: float  # percent


@dataclass
class MnistResult:
    """What a finished (or stopped) run reports, for tests and benchmarks."""

    exit_code: int
    run_dir: Path | None
    checkpoint: Path | None
    epochs_done: int
    samples: int
    test_accuracy: float | None = None
    test_loss: float | None = None
    elapsed: float = 0.0
    milestones: dict[float, tuple[float, int]] = field(default_factory=dict)
    history: list[dict[str, float]] = field(default_factory=list)


def rate_text(rate: float) -> str:
    """Samples per second, short: ``12.3k`` or ``850``."""
    return f"{rate / 1000:.1f}k" if rate >= 1000 else f"{rate:.0f}"


def training_text(cfg: MnistConfig) -> str:
    """The optimizer, then the precision and micro-batches where not the defaults (banners)."""
    parts = [cfg.optimizer]
    if cfg.amp != "off":
        parts.append(f"{cfg.amp} autocast")
    if cfg.grad_accum > 1:
        parts.append(f"{cfg.grad_accum} micro-batches of {cfg.batch_size} per step")
    return ", ".join(parts)


def progress_line(
    epoch: int, epochs: int, samples: int, loss: float, rate: float, per_epoch: int | None = None
) -> Status:
    """The live status of an epoch in progress (``epoch`` counts from 0); on a terminal, a
    bar of this epoch's samples out of ``per_epoch``."""
    text = f"epoch {epoch + 1}/{epochs}, train loss {loss:.4f}"
    return Status(
        line=f"epoch {epoch + 1}/{epochs}: {samples:,} samples, "
        f"train loss {loss:.4f}, {rate_text(rate)} samples/s",
        done=samples,
        total=per_epoch,
        postfix=text,
        unit="sample",
    )


def test_and_log(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    nhwc: bool,
    cfg: MnistConfig,
    rundir: RunDir,
    epoch: int,
    epoch_samples: int,
    train_time: float,
    t0: float,
    samples: int,
    milestones: dict[float, tuple[float, int]],
) -> tuple[EpochScore, str, dict[str, float]]:
    """Score the test set after ``epoch``; note milestones and write TensorBoard.

    Returns the test score, the console line and the :attr:`MnistResult.history`
    entry, so that both modes test, log and remember an epoch alike.
    """
    t = time.monotonic()
    loss, correct = evaluate(model, images, labels, cfg.test_batch_size, nhwc)
    n_test = images.shape[0]
    acc = 100.0 * correct / n_test
    rate = epoch_samples / max(train_time, 1e-9)
    elapsed = time.monotonic() - t0
    record_milestones(milestones, acc, elapsed, samples)
    rundir.scalars(
        {
            "test/loss": loss,
            "test/accuracy": acc,
            "perf/samples_per_sec": rate,
            "perf/epoch_seconds": train_time,
            "perf/test_seconds": time.monotonic() - t,
            "train/lr": epoch_lr(cfg, epoch - 1),
            "train/epoch": epoch,
        },
        samples,
    )
    rundir.flush()
    line = (
        f"epoch {epoch}: test loss {loss:.4f}, accuracy {acc:.2f}% ({correct}/{n_test}), "
        f"{rate_text(rate)} samples/s, {train_time:.1f} s"
    )
    record = {
        "epoch": epoch,
        "test_loss": loss,
        "test_accuracy": acc,
        "samples_per_sec": rate,
        "epoch_seconds": train_time,
        "elapsed": elapsed,
        "samples": samples,
    }
    return EpochScore(loss, acc), line, record


def record_milestones(
    milestones: dict[float, tuple[float, int]], accuracy: float, elapsed: float, samples: int
) -> None:
    """Note the ``MILESTONES`` that ``accuracy`` reaches, keeping the earliest arrival (an
    evaluator score can come in after a later epoch-end test)."""
    for target in MILESTONES:
        if accuracy >= target and (target not in milestones or elapsed < milestones[target][0]):
            milestones[target] = (elapsed, samples)


def milestone_lines(milestones: dict[float, tuple[float, int]]) -> list[str]:
    lines = []
    for target in MILESTONES:
        if target in milestones:
            t, n = milestones[target]
            lines.append(f"{target:g}% test accuracy first reached after {t:.1f} s, {n:,} samples")
    return lines


def final_metrics(
    final: EpochScore | None, milestones: dict[float, tuple[float, int]]
) -> dict[str, float]:
    """The run's summary for TensorBoard's hparams: last test score, times to milestones."""
    metrics = {} if final is None else {"test_loss": final.loss, "test_accuracy": final.accuracy}
    for acc, (t, _) in milestones.items():
        metrics[f"time_to_{acc:g}_s"] = t
    return metrics
