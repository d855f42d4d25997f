"""One optimizer step's forward and backward passes, shared by both modes.

``--grad-accum N`` splits a step into N micro-batches of ``--batch-size``: each one's loss
is divided by N before its backward pass, so their gradients add up to that of one batch
of N x B. ``--amp`` runs the forward pass and the loss under ``torch.autocast``;
parameters, gradients, optimizer state and the step itself stay fp32.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from hogwild.precision import Precision


@dataclass
class StepStats:
    """What one step trained on: the loss summed over its samples, the correct
    predictions (tensors on the model's device, so no step waits for a GPU) and the count."""

    loss_sum: torch.Tensor
    correct: torch.Tensor
    samples: int


def backward_micro_batches(
    model: nn.Module,
    micro: Sequence[tuple[torch.Tensor, torch.Tensor]],
    precision: Precision,
    no_sync: Callable[[], AbstractContextManager] | None = None,
) -> StepStats:
    """Add the gradient of the mean loss over ``micro`` to the parameters' ``.grad``.

    Under ``no_sync`` (DDP's), all but the last backward pass stay local, so a step
    all-reduces its gradients once, not once per micro-batch.
    """
    n = len(micro)
    device = micro[0][1].device
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    correct = torch.zeros((), dtype=torch.int64, device=device)
    samples = 0
    for i, (x, y) in enumerate(micro, 1):
        local = no_sync() if no_sync is not None and i < n else contextlib.nullcontext()
        with local:
            with precision.autocast():
                out = model(x)
                loss = F.nll_loss(out, y)
            precision.backward(loss / n)
        with torch.no_grad():
            loss_sum += loss.detach().double() * y.shape[0]
            correct += (out.argmax(1) == y).sum()
        samples += y.shape[0]
    return StepStats(loss_sum, correct, samples)


def group_steps(batches: Sequence[torch.Tensor], grad_accum: int) -> list[list[torch.Tensor]]:
    """Micro-batch indices in groups of ``grad_accum``, one per optimizer step (an epoch's
    last step may have fewer; its losses are divided by its own count)."""
    return [list(batches[i : i + grad_accum]) for i in range(0, len(batches), grad_accum)]
