"""One optimizer step's forward and backward passes, the same for both strategies.

``--grad-accum N`` splits a step into N micro-batches: each one's loss is divided by N
before its backward pass, so their gradients add up to that of one batch N times the size.
``--amp`` runs the forward pass and the loss under ``torch.autocast``; parameters,
gradients, optimizer state and the step itself stay fp32.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from hogwild.precision import Precision
from hogwild.supervised.task import Objective


@dataclass
class StepStats:
    """What one step trained on: its loss summed over the samples (a tensor on the
    model's device, so no step waits for a GPU) and their count."""

    loss_sum: torch.Tensor
    samples: int


def to_device(batch: Any, device: torch.device) -> Any:
    """The batch's tensors on ``device`` (lists, tuples and dicts followed)."""
    if device.type == "cpu":
        return batch
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


def backward_micro_batches(
    model: nn.Module,
    objective: Objective,
    micro: Sequence[Any],
    precision: Precision,
    no_sync: Callable[[], AbstractContextManager] | None = None,
    device: torch.device | None = None,
) -> StepStats:
    """Add the gradient of the mean loss over ``micro`` to the parameters' ``.grad``.

    Under ``no_sync`` (DDP's), all but the last backward pass stay local, so a step
    all-reduces its gradients once, not once per micro-batch.
    """
    n = len(micro)
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    samples = 0
    for i, batch in enumerate(micro, 1):
        local = no_sync() if no_sync is not None and i < n else contextlib.nullcontext()
        with local:
            with precision.autocast():
                out = objective(model, batch)
            precision.backward(out.loss / n)
        loss_sum += out.loss.detach().double() * out.samples
        samples += out.samples
    return StepStats(loss_sum, samples)


def group_steps(batches: Sequence[Any], grad_accum: int) -> list[list[Any]]:
    """Micro-batches in groups of ``grad_accum``, one per optimizer step (an epoch's last
    step may have fewer; its losses are divided by its own count)."""
    return [list(batches[i : i + grad_accum]) for i in range(0, len(batches), grad_accum)]
