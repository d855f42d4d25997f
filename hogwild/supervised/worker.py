"""A Hogwild! worker: one epoch over its own shard, straight into the shared model."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import Dataset

from hogwild.optim import SharedOptimizer
from hogwild.pool import BufferPool, PoolTimeout
from hogwild.precision import Precision
from hogwild.procs import WorkerContext
from hogwild.sharing import BufferSlots, SharedModel
from hogwild.sparse import RowOptimizer
from hogwild.supervised.data import batches, shard_indices
from hogwild.supervised.position import EpochPosition, ShardPositions
from hogwild.supervised.steps import StepStats, backward_micro_batches, to_device
from hogwild.supervised.task import Objective

TELEMETRY: dict[str, tuple[tuple[int, ...], torch.dtype]] = {
    "loss_sum": ((), torch.float64),  # summed over the samples of this message
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
    table_lr: float
    grad_accum: int = 1  # micro-batches per step
    amp: str = "off"
    log_interval: int = 10
    max_batches: int | None = None
    loader_workers: int = 0
    passes: int = 1  # >1 only for benchmarks that want a long steady window
    node_rank: int = 0  # under torchrun: this node's rank, and how many nodes share the data
    nodes: int = 1
    resume: EpochPosition | None = None  # where a stopped run left this epoch
    device: str = "cpu"  # of the shared model: the batches go there


@dataclass
class Optimizers:
    """Each worker's dense optimizers (one per parameter group, its state shared so that
    a restarted worker and a checkpoint keep it) and the tables' row optimizers (one
    state for all workers)."""

    dense: list[list[SharedOptimizer]]  # [worker][group]
    rows: dict[str, RowOptimizer]


def train_worker(
    ctx: WorkerContext,
    shared: SharedModel,
    optimizers: Optimizers,
    pool: BufferPool,
    data: Dataset,
    objective: Objective,
    plan: EpochPlan,
    buffer_slots: BufferSlots | None,
    positions: ShardPositions,
) -> None:
    """One worker's epoch: lock-free steps over its shard, telemetry every ``log_interval``.
    A resumed epoch's worker takes the stopped one's order and skips what it stepped
    through; a restarted worker redoes its shard in an order of its own."""
    model = shared.module
    grads = shared.attach_grads()
    tables = dict(shared.tables)
    dense = optimizers.dense[ctx.rank]
    model.train()
    device = torch.device(plan.device)
    precision = Precision(plan.amp, device.type)
    producer = pool.producer(ctx.rank)
    seed, skip = ctx.seed, 0
    if plan.resume is not None and ctx.incarnation == 0:
        seed, skip = plan.resume.seeds[ctx.rank], plan.resume.skip(ctx.rank)
    positions.start(ctx.rank, seed, skip)
    order = shard_indices(
        len(data),  # type: ignore[arg-type]
        plan.shuffle_seed,
        plan.node_rank * plan.num_workers + ctx.rank,
        plan.num_workers * plan.nodes,
        seed,
    )
    stream: Iterator[Any] = itertools.chain(
        batches(data, order[skip * plan.batch_size :], plan.batch_size, plan.loader_workers),
        *(
            batches(data, order, plan.batch_size, plan.loader_workers)
            for _ in range(1, plan.passes)
        ),
    )
    if plan.max_batches is not None:
        stream = itertools.islice(stream, max(plan.max_batches - skip, 0))
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    pending = 0

    def send() -> None:
        nonlocal pending
        while True:  # block while the main process is behind, but never past a stop request
            try:
                with producer.message(timeout=0.5) as msg:
                    msg["loss_sum"].copy_(loss_sum)
                    msg["samples"].fill_(pending)
                break
            except PoolTimeout:
                if ctx.should_stop():
                    return
        loss_sum.zero_()
        pending = 0

    for i, micro in enumerate(_groups(stream, plan.grad_accum), 1):
        if ctx.should_stop():
            break
        stats = hogwild_step(
            model,
            objective,
            [to_device(batch, device) for batch in micro],
            precision,
            grads,
            dense,
            tables,
            optimizers.rows,
            plan.lr,
            plan.table_lr,
            device,
        )
        positions.step(ctx.rank, len(micro))
        loss_sum.add_(stats.loss_sum)
        pending += stats.samples
        if i % plan.log_interval == 0:
            send()
    stopped = ctx.should_stop()
    if pending and not stopped:
        send()
    if buffer_slots is not None and not stopped:
        buffer_slots.put(model, ctx.rank)


def _groups(stream: Iterator[Any], size: int) -> Iterator[list[Any]]:
    while group := list(itertools.islice(stream, size)):
        yield group


def hogwild_step(
    model: torch.nn.Module,
    objective: Objective,
    micro: Sequence[object],
    precision: Precision,
    grads: Sequence[torch.Tensor],
    dense: Sequence[SharedOptimizer],
    tables: dict[str, torch.nn.Parameter],
    rows: dict[str, RowOptimizer],
    lr: float,
    table_lr: float | None = None,
    device: torch.device | None = None,
) -> StepStats:
    """One lock-free step: the micro-batches' gradients add up in the worker's private
    buffers, then each dense vector (at ``lr``) and each touched row of each table (at
    ``table_lr``, by default ``lr``) is updated; ``device``: the model's (None: the CPU)."""
    if precision.scaler is not None:
        raise ValueError("a Hogwild! step has no GradScaler: fp16 is for ddp on CUDA")
    for grad in grads:
        grad.zero_()
    for p in tables.values():
        p.grad = None
    stats = backward_micro_batches(model, objective, micro, precision, device=device)
    for grad, opt in zip(grads, dense, strict=True):
        if grad.numel():
            opt.step(grad, 0, lr=lr)
    for name, p in tables.items():
        if p.grad is not None:
            rows[name].step(p.grad, lr=lr if table_lr is None else table_lr)
    return stats
