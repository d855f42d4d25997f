"""Each worker's shard of an epoch, read as batches.

A shard is ``DistributedSampler``'s: every ``shards``-th index of a permutation that all
workers compute alike from the epoch's seed, so shards are disjoint and cover the data.
A ``TensorDataset`` (in shared memory) is indexed a batch at a time; any other map-style
``Dataset`` goes through the worker's own ``DataLoader`` over its indices, in the worker
itself unless ``--loader-workers`` asks for loader processes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

__all__ = ["batches", "first_batch", "shard_indices"]


def shard_indices(n: int, shuffle_seed: int, shard: int, shards: int, seed: int) -> torch.Tensor:
    """Shard ``shard`` of ``shards`` of an epoch's permutation of ``range(n)``, in an order
    of its own from ``seed`` (which changes when a dead worker is restarted)."""
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(shuffle_seed))
    mine = perm[shard::shards]
    order = torch.randperm(mine.numel(), generator=torch.Generator().manual_seed(seed))
    return mine[order]


def batches(
    data: Dataset, indices: torch.Tensor, batch_size: int, loader_workers: int = 0
) -> Iterator[Any]:
    """The batches of ``data`` at ``indices``, in order, as a ``DataLoader`` collates them;
    none for no indices (``torch.split`` of an empty tensor gives one empty batch: a resumed
    worker whose shard was done stepped once more)."""
    if not len(indices):
        return
    if isinstance(data, TensorDataset):
        for idx in torch.split(indices, batch_size):
            yield [t.index_select(0, idx) for t in data.tensors]
        return
    loader = DataLoader(
        data, batch_size=batch_size, sampler=indices.tolist(), num_workers=loader_workers
    )
    yield from loader


def first_batch(data: Dataset, batch_size: int) -> Any:
    """The first ``batch_size`` samples, collated (the main process's check)."""
    n = min(batch_size, len(data))  # type: ignore[arg-type]
    return next(batches(data, torch.arange(n), n))
