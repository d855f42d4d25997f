"""A Hogwild! worker: one epoch's SGD over its own shard, straight into the shared model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from hogwild.flat import attach_flat_grad
from hogwild.mnist.config import MnistConfig
from hogwild.mnist.model import channels_last
from hogwild.mnist.steps import StepStats, backward_micro_batches, group_steps
from hogwild.optim import SharedAdam, SharedOptimizer, SharedSGD
from hogwild.pool import BufferPool, PoolTimeout
from hogwild.precision import Precision
from hogwild.procs import WorkerContext

TELEMETRY: dict[str, tuple[tuple[int, ...], torch.dtype]] = {
    "loss_sum": ((), torch.float64),  # summed over the samples of this message
    "correct": ((), torch.int64),
    "samples": ((), torch.int64),
}


@dataclass(frozen=True)
class EpochPlan:
    """What every worker of one generation needs to know besides its rank."""

    epoch: int
    shuffle_seed: int  # the same for all workers: they must agree on the shards
    num_workers: int
    batch_size: int  # of a micro-batch
    lr: float
    grad_accum: int = 1  # micro-batches per step
    amp: str = "off"
    log_interval: int = 10
    max_batches: int | None = None
    nhwc: bool = True
    passes: int = 1  # >1 only for benchmarks that want a long steady window
    node_rank: int = 0  # under torchrun: this node's rank, and how many nodes share the data
    nodes: int = 1


def shard_indices(n: int, plan: EpochPlan, rank: int, seed: int) -> torch.Tensor:
    """This worker's sample indices for the epoch, in its own random order.

    The shard is ``DistributedSampler``'s: every ``num_workers``-th index of a permutation
    that all workers compute alike from ``shuffle_seed``, so the shards are disjoint and
    cover the data. Across ``nodes`` nodes there are ``nodes * num_workers`` shards and
    local worker ``rank`` of node ``node_rank`` takes shard ``node_rank * num_workers +
    rank``. Within the shard the order comes from the worker's own ``seed``, which
    changes when a dead worker is restarted.
    """
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(plan.shuffle_seed))
    shard = perm[plan.node_rank * plan.num_workers + rank :: plan.num_workers * plan.nodes]
    order = torch.randperm(shard.numel(), generator=torch.Generator().manual_seed(seed))
    return shard[order]


def train_worker(
    ctx: WorkerContext,
    model: nn.Module,
    optimizers: Sequence[SharedOptimizer],
    pool: BufferPool,
    images: torch.Tensor,
    labels: torch.Tensor,
    plan: EpochPlan,
) -> None:
    """One worker's epoch: Hogwild! SGD over its shard, telemetry every ``log_interval`` steps.

    ``model``'s parameters are views of the shared flat tensor, which this worker's own
    optimizer updates in place; the gradient buffer is private to the process.
    """
    optimizer = optimizers[ctx.rank]
    grad = attach_flat_grad(model, optimizer.params)
    model.train()
    precision = Precision(plan.amp, "cpu")
    producer = pool.producer(ctx.rank)
    order = shard_indices(images.shape[0], plan, ctx.rank, ctx.seed)
    batches = list(torch.split(order, plan.batch_size)) * plan.passes
    if plan.max_batches is not None:
        batches = batches[: plan.max_batches]
    steps = group_steps(batches, plan.grad_accum)
    loss_sum = torch.zeros((), dtype=torch.float64)
    correct = torch.zeros((), dtype=torch.int64)
    pending = 0

    def send() -> None:
        nonlocal pending
        while True:  # block while the main process is behind, but never past a stop request
            try:
                with producer.message(timeout=0.5) as msg:
                    msg["loss_sum"].copy_(loss_sum)
                    msg["correct"].copy_(correct)
                    msg["samples"].fill_(pending)
                break
            except PoolTimeout:
                if ctx.should_stop():
                    return
        loss_sum.zero_()
        correct.zero_()
        pending = 0

    for i, group in enumerate(steps, 1):
        if ctx.should_stop():
            break
        micro = []
        for idx in group:
            x = images.index_select(0, idx)
            micro.append((channels_last(x) if plan.nhwc else x, labels.index_select(0, idx)))
        stats = hogwild_step(model, optimizer, grad, micro, precision, plan.lr)
        loss_sum.add_(stats.loss_sum)
        correct.add_(stats.correct)
        pending += stats.samples
        if i % plan.log_interval == 0 and i != len(steps):
            send()
    if pending and not ctx.should_stop():
        send()


def hogwild_step(
    model: nn.Module,
    optimizer: SharedOptimizer,
    grad: torch.Tensor,
    micro: Sequence[tuple[torch.Tensor, torch.Tensor]],
    precision: Precision,
    lr: float,
) -> StepStats:
    """One lock-free step: the micro-batches' gradients add up in the worker's private
    ``grad`` (the flat ``.grad`` of ``model``), then one update of the shared parameters."""
    if precision.scaler is not None:
        raise ValueError("a Hogwild! step has no GradScaler: fp16 is for ddp mode on CUDA")
    grad.zero_()
    stats = backward_micro_batches(model, micro, precision)
    optimizer.step(grad, 0, lr=lr)
    return stats


def make_optimizer(cfg: MnistConfig, flat: torch.Tensor) -> SharedOptimizer:
    """One worker's optimizer over the shared flat parameters, its state in shared memory."""
    if cfg.optimizer == "adam":
        opt: SharedOptimizer = SharedAdam(flat, lr=cfg.lr)
    else:
        opt = SharedSGD(flat, lr=cfg.lr, momentum=cfg.momentum)
    return opt.share_memory()
