"""What a supervised run trains: the model, the data, the objective and the metrics.

A :class:`Task` holds the live objects, whether they came from ``fit(...)`` or from
``module:function`` references on the command line. :func:`check_task` tries them
together on the first batch, in the main process and on a copy of the model, so that a
mistake (data the model cannot take, a loss that is not a scalar) is one line before any
worker starts.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset, IterableDataset, TensorDataset

from hogwild.errors import UsageError
from hogwild.refs import resolve
from hogwild.supervised.data import first_batch

__all__ = [
    "LOSS_FUNCTIONS",
    "Forward",
    "Objective",
    "Task",
    "accuracy",
    "batch_size_of",
    "check_task",
    "resolve_loss",
    "resolve_metric",
]

Metric = Callable[[torch.Tensor, torch.Tensor], Any]

LOSS_FUNCTIONS: dict[str, Callable[..., torch.Tensor]] = {
    "cross_entropy": F.cross_entropy,
    "nll": F.nll_loss,
    "mse": F.mse_loss,
    "l1": F.l1_loss,
    "bce": F.binary_cross_entropy_with_logits,
}


def accuracy(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Percent correct: the arg-max class, or for one logit per sample, its sign."""
    if output.dim() == target.dim() + 1 and output.shape[-1] > 1:
        predicted = output.argmax(-1)
    else:
        predicted = (output.reshape(target.shape) > 0).to(target.dtype)
    return 100.0 * (predicted == target).double().mean()


BUILT_IN_METRICS: dict[str, Metric] = {"accuracy": accuracy}


class Forward(NamedTuple):
    """One batch through the objective: its mean loss, the model's output and the target
    (None for a step function) and its sample count."""

    loss: torch.Tensor
    output: Any
    target: Any
    samples: int


def batch_size_of(batch: Any) -> int:
    """Samples in a batch: the first dimension of its first tensor."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    items = list(batch.values()) if isinstance(batch, dict) else batch
    if isinstance(items, (list, tuple)):
        for item in items:
            n = batch_size_of(item)
            if n:
                return n
    return 0


@dataclass
class Objective:
    """``loss(model(input), target)`` for ``(input, target)`` batches, or ``step(model,
    batch)`` for any other batch."""

    loss: Callable[..., torch.Tensor] | None = None
    step: Callable[[nn.Module, Any], torch.Tensor] | None = None

    def __call__(self, model: nn.Module, batch: Any) -> Forward:
        if self.step is not None:
            return Forward(self.step(model, batch), None, None, batch_size_of(batch))
        assert self.loss is not None
        if not isinstance(batch, (list, tuple)) or len(batch) != 2:
            raise TypeError(
                f"a batch is a {type(batch).__name__}"
                + (f" of {len(batch)} items" if isinstance(batch, (list, tuple)) else "")
                + ", not (input, target): pass a step function for other batches"
            )
        x, y = batch
        out = model(x)
        return Forward(self.loss(out, y), out, y, batch_size_of(y))


@dataclass
class Task:
    """The live objects of a run. ``model``: the module trained (shared in hogwild);
    ``metrics``: name -> ``fn(output, target)``, averaged over the validation samples."""

    model: nn.Module
    train: Dataset
    val: Dataset | None
    objective: Objective
    metrics: dict[str, Metric] = field(default_factory=dict)


def resolve_loss(loss: str | Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    if callable(loss):
        return loss
    if loss in LOSS_FUNCTIONS:
        return LOSS_FUNCTIONS[loss]
    if ":" not in loss:
        names = ", ".join(LOSS_FUNCTIONS)
        raise UsageError(f"unknown loss {loss!r}: use one of {names}, or module:function")
    return resolve(loss, "--loss")


def resolve_metric(metric: str | Metric) -> tuple[str, Metric]:
    if callable(metric):
        return getattr(metric, "__name__", "metric"), metric
    if metric in BUILT_IN_METRICS:
        return metric, BUILT_IN_METRICS[metric]
    if ":" not in metric:
        raise UsageError(
            f"unknown metric {metric!r}: use {', '.join(BUILT_IN_METRICS)}, or module:function"
        )
    return metric.partition(":")[2].split(".")[-1], resolve(metric, "--metric")


def build_model(factory: Any, what: str) -> nn.Module:
    """``factory`` itself if a module, else what calling it returns, which must be one."""
    if isinstance(factory, nn.Module):
        return factory
    model = call_factory(factory, what)
    if not isinstance(model, nn.Module):
        raise UsageError(f"{what} returned a {type(model).__name__}, not a torch.nn.Module")
    return model


def call_factory(factory: Callable[[], Any], what: str) -> Any:
    """What a user's function returns; whatever it raises is one line naming it."""
    try:
        return factory()
    except UsageError:
        raise
    except Exception as e:
        raise UsageError(f"{what} failed: {type(e).__name__}: {one_line(e)}") from e


def check_dataset(data: Any, what: str) -> Dataset:
    if isinstance(data, IterableDataset):
        raise UsageError(
            f"{what} is an IterableDataset: Hogwild! workers and DDP ranks each read a shard "
            "by index, so pass a map-style Dataset (with __len__ and __getitem__)"
        )
    if not (hasattr(data, "__getitem__") and hasattr(data, "__len__")):
        raise UsageError(f"{what} is a {type(data).__name__}, not a map-style Dataset")
    if len(data) == 0:
        raise UsageError(f"{what} is empty")
    return data


def share_tensors(data: Dataset) -> None:
    """In-memory tensors move to shared memory once, so workers read one copy."""
    if isinstance(data, TensorDataset):
        for t in data.tensors:
            t.share_memory_()


def check_task(task: Task, batch_size: int) -> None:
    """The first training batch through a copy of the model, the objective and a backward
    pass: anything that fails is one line naming what, before any worker starts."""
    if task.objective.step is not None and task.metrics:
        raise UsageError(
            "--metric scores (output, target) pairs, which a --step function does not give; "
            "with --step only the loss is scored"
        )
    try:
        batch = first_batch(task.train, batch_size)
    except Exception as e:
        raise UsageError(
            f"cannot read a batch of the training data: {type(e).__name__}: {one_line(e)}"
        ) from e
    model = copy.deepcopy(task.model)
    model.train()
    what = "the step function" if task.objective.step is not None else "the model or loss"
    try:
        out = task.objective(model, batch)
    except UsageError:
        raise
    except Exception as e:
        raise UsageError(
            f"the first training batch does not fit {what}: {type(e).__name__}: {one_line(e)}"
        ) from e
    loss = out.loss
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.is_floating_point():
        shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise UsageError(
            f"the loss must be a floating-point scalar tensor, got {shape}"
            + (" (reduce it with .mean())" if isinstance(loss, torch.Tensor) else "")
        )
    if not loss.requires_grad:
        raise UsageError("the loss does not depend on any trainable parameter of the model")
    try:
        loss.backward()
    except Exception as e:
        raise UsageError(f"the backward pass failed: {type(e).__name__}: {one_line(e)}") from e
    if out.samples < 1:
        raise UsageError("cannot tell how many samples a batch holds (no tensor in it)")
    for name, fn in task.metrics.items():
        try:
            float(fn(out.output.detach(), out.target))
        except Exception as e:
            raise UsageError(
                f"metric {name!r} failed on the first batch: {type(e).__name__}: {one_line(e)}"
            ) from e


def one_line(e: BaseException, limit: int = 300) -> str:
    return " ".join(str(e).split())[:limit] or type(e).__name__
