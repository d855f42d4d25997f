"""What a run reports, the same for both strategies: scores, console lines, TensorBoard,
the best epoch, and the result ``fit`` returns."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from hogwild.console import Status
from hogwild.supervised.config import FitConfig
from hogwild.supervised.data import batches
from hogwild.supervised.steps import to_device
from hogwild.supervised.task import Metric, Objective

LOSS = "loss"


@dataclass(frozen=True)
class App:
    """What an application on the trainer calls itself: its command, its run folders'
    name, its checkpoints' format, what its held-out split is called in TensorBoard and
    checkpoints (``val/loss``, ``val_loss``), and the values of the monitored metric
    whose first arrival is reported."""

    prog: str = "hogwild.train"
    name: str = "fit"
    checkpoint_format: str = "hogwild-fit"
    split: str = "val"
    milestones: tuple[float, ...] = ()
    same_on_every_node: tuple[str, ...] = ()  # under torchrun, beyond the trainer's own


@dataclass
class FitResult:
    """A finished (or stopped) run. ``model``: the trained module, on the CPU;
    ``metrics``: the last validation scores by name; ``history``: one entry per epoch."""

    exit_code: int
    run_dir: Path | None
    checkpoint: Path | None
    epochs_done: int
    samples: int
    model: nn.Module | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    history: list[dict[str, float]] = field(default_factory=list)
    best: dict[str, float] | None = None  # {"epoch": e, "value": v} of the monitored metric
    best_checkpoint: Path | None = None
    elapsed: float = 0.0
    milestones: dict[float, tuple[float, int]] = field(default_factory=dict)


def evaluate(
    model: nn.Module,
    data: Dataset,
    objective: Objective,
    metrics: dict[str, Metric],
    batch_size: int,
    device: torch.device | None = None,
) -> dict[str, float]:
    """Mean loss and metrics over ``data``, in eval mode (then restored), weighted by samples."""
    was_training = model.training
    model.eval()
    sums = dict.fromkeys([LOSS, *metrics], 0.0)
    n = 0
    with torch.no_grad():
        for batch in batches(data, torch.arange(len(data)), batch_size):  # type: ignore[arg-type]
            out = objective(model, to_device(batch, device or torch.device("cpu")))
            sums[LOSS] += float(out.loss) * out.samples
            for name, fn in metrics.items():
                sums[name] += float(fn(out.output, out.target)) * out.samples
            n += out.samples
    model.train(was_training)
    return {k: v / max(n, 1) for k, v in sums.items()}


class Monitor:
    """The metric that picks best.pt, ``--target`` and ``--early-stop`` watch: lower is
    better for the loss (and for ``mode="min"``), higher for the others."""

    def __init__(self, name: str, mode: str = "auto") -> None:
        self.name = name
        self.lower = mode == "min" or (mode == "auto" and name == LOSS)
        self.best: float | None = None
        self.best_epoch = 0

    def better(self, value: float, than: float | None) -> bool:
        if than is None:
            return math.isfinite(value)
        return value < than if self.lower else value > than

    def reaches(self, value: float, target: float) -> bool:
        return value <= target if self.lower else value >= target

    def update(self, metrics: dict[str, float], epoch: int) -> bool:
        """Note ``epoch``'s score; True if it is the best so far."""
        value = metrics.get(self.name)
        if value is None or not self.better(value, self.best):
            return False
        self.best, self.best_epoch = value, epoch
        return True

    def state(self) -> dict[str, float] | None:
        return None if self.best is None else {"epoch": self.best_epoch, "value": self.best}

    def load(self, state: dict[str, Any] | None) -> None:
        if state:
            self.best, self.best_epoch = float(state["value"]), int(state["epoch"])


def rate_text(rate: float) -> str:
    """Samples per second, short: ``12.3k`` or ``850``."""
    return f"{rate / 1000:.1f}k" if rate >= 1000 else f"{rate:.0f}"


def training_text(cfg: FitConfig) -> str:
    """The optimizer, then the precision and micro-batches where not the defaults (banners)."""
    parts = [cfg.optimizer]
    if cfg.amp != "off":
        parts.append(f"{cfg.amp} autocast")
    if cfg.grad_accum > 1:
        parts.append(f"{cfg.grad_accum} micro-batches of {cfg.batch_size} per step")
    return ", ".join(parts)


def scores_text(split: str, metrics: dict[str, float]) -> str:
    parts = [f"{k} {v:.2f}%" if k == "accuracy" else f"{k} {v:.4g}" for k, v in metrics.items()]
    return f"{split} " + ", ".join(parts)


def progress_line(
    epoch: int, epochs: int, samples: int, loss: float, rate: float, per_epoch: int | None = None
) -> Status:
    """The live status of an epoch in progress (``epoch`` counts from 0); on a terminal, a
    bar of this epoch's samples out of ``per_epoch``."""
    return Status(
        line=f"epoch {epoch + 1}/{epochs}: {samples:,} samples, "
        f"train loss {loss:.4f}, {rate_text(rate)} samples/s",
        done=samples,
        total=per_epoch,
        postfix=f"epoch {epoch + 1}/{epochs}, train loss {loss:.4f}",
        unit="sample",
    )


def epoch_record(
    epoch: int,
    metrics: dict[str, float],
    split: str,
    *,
    samples: int,
    epoch_samples: int,
    train_time: float,
    elapsed: float,
    lr: float,
) -> dict[str, float]:
    """An epoch's :attr:`FitResult.history` entry (``val_loss``, ``val_accuracy``, ...)."""
    return {
        "epoch": epoch,
        **{f"{split}_{k}": v for k, v in metrics.items()},
        "samples_per_sec": epoch_samples / max(train_time, 1e-9),
        "epoch_seconds": train_time,
        "elapsed": elapsed,
        "samples": samples,
        "lr": lr,
    }


def log_epoch(rundir: Any, record: dict[str, float], metrics: dict[str, float], split: str) -> None:
    """TensorBoard: the split's scores, the epoch's speed and rate, at the sample count."""
    rundir.scalars(
        {
            **{f"{split}/{k}": v for k, v in metrics.items()},
            "perf/samples_per_sec": record["samples_per_sec"],
            "perf/epoch_seconds": record["epoch_seconds"],
            "train/lr": record["lr"],
            "train/epoch": record["epoch"],
        },
        int(record["samples"]),
    )
    rundir.flush()


def epoch_line(record: dict[str, float], metrics: dict[str, float], split: str) -> str:
    scored = f"{scores_text(split, metrics)}, " if metrics else ""
    return (
        f"epoch {int(record['epoch'])}: {scored}{rate_text(record['samples_per_sec'])} "
        f"samples/s, {record['epoch_seconds']:.1f} s"
    )


def record_milestones(
    milestones: dict[float, tuple[float, int]],
    targets: tuple[float, ...],
    monitor: Monitor,
    value: float | None,
    elapsed: float,
    samples: int,
) -> None:
    """Note the ``targets`` that ``value`` reaches, keeping the earliest arrival."""
    if value is None:
        return
    for target in targets:
        if monitor.reaches(value, target) and (
            target not in milestones or elapsed < milestones[target][0]
        ):
            milestones[target] = (elapsed, samples)


def milestone_lines(milestones: dict[float, tuple[float, int]], split: str, name: str) -> list[str]:
    return [
        f"{split} {name} {target:g} first reached after {t:.1f} s, {n:,} samples"
        for target, (t, n) in sorted(milestones.items())
    ]


def final_metrics(
    metrics: dict[str, float], split: str, milestones: dict[float, tuple[float, int]]
) -> dict[str, float]:
    """The run's summary for TensorBoard's hparams: the last scores, times to milestones."""
    out = {f"{split}_{k}": v for k, v in metrics.items()}
    for target, (t, _) in milestones.items():
        out[f"time_to_{target:g}_s"] = t
    return out
