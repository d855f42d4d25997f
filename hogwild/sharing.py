"""A user's module made ready for lock-free training by many processes.

Every trainable parameter moves into shared memory, in one flat vector per dtype
(:mod:`hogwild.flat`): dense parameters first, which the shared optimizers step as one
vector, then the weights of embeddings with sparse gradients, which
:mod:`hogwild.sparse` steps row by row. Frozen parameters (``requires_grad=False``) are
shared as they are and never stepped. Buffers (BatchNorm's running statistics) follow
``buffers``: ``shared``, updated in place by every worker like the parameters, or
``average``: each worker keeps its own during an epoch and the main process averages
them at its end (:class:`BufferSlots`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import cast

import torch
from torch import nn

from hogwild.flat import assign_views

__all__ = ["BUFFER_POLICIES", "BufferSlots", "FlatGroup", "SharedModel", "sparse_parameters"]

BUFFER_POLICIES = ("shared", "average")


def sparse_parameters(module: nn.Module) -> set[nn.Parameter]:
    """The weights whose gradients are sparse: those of ``Embedding``/``EmbeddingBag``
    built with ``sparse=True``."""
    found: set[nn.Parameter] = set()
    for m in module.modules():
        if isinstance(m, (nn.Embedding, nn.EmbeddingBag)) and m.sparse and m.weight.requires_grad:
            found.add(cast(nn.Parameter, m.weight))
    return found


@dataclass
class FlatGroup:
    """The trainable parameters of one dtype, as views of one shared flat vector.

    ``flat[:dense]`` holds the dense parameters (the optimizer's vector); the embedding
    tables follow, each a view in ``tables`` (by parameter name).
    """

    dtype: torch.dtype
    flat: torch.Tensor
    dense: int
    dense_params: list[nn.Parameter]
    tables: dict[str, nn.Parameter] = field(default_factory=dict)

    @property
    def dense_vector(self) -> torch.Tensor:
        return self.flat[: self.dense]


class SharedModel:
    """``module``'s parameters in shared memory, grouped for Hogwild! steps (see the module).

    The module itself keeps working as always (forward, ``state_dict``, autograd): its
    parameters are only re-homed.
    """

    def __init__(self, module: nn.Module, buffers: str = "shared") -> None:
        if buffers not in BUFFER_POLICIES:
            raise ValueError(f"buffers must be one of {BUFFER_POLICIES}, got {buffers!r}")
        self.module, self.buffer_policy = module, buffers
        sparse = sparse_parameters(module)
        names = {p: n for n, p in module.named_parameters()}
        trainable = [p for p in names if p.requires_grad]
        if not trainable:
            raise ValueError("the model has no trainable parameters")
        self.groups: list[FlatGroup] = []
        for dtype in sorted({p.dtype for p in trainable}, key=str):
            dense = [p for p in trainable if p.dtype == dtype and p not in sparse]
            tables = [p for p in trainable if p.dtype == dtype and p in sparse]
            ordered = dense + tables
            flat = torch.cat([p.detach().reshape(-1) for p in ordered]).share_memory_()
            assign_views(ordered, flat, grad=False)
            self.groups.append(
                FlatGroup(
                    dtype,
                    flat,
                    sum(p.numel() for p in dense),
                    dense,
                    {names[p]: p for p in tables},
                )
            )
        self.groups.sort(key=lambda g: -g.flat.numel())
        for p in names:
            if not p.requires_grad:
                p.data.share_memory_()
        if buffers == "shared":
            for b in module.buffers():
                b.share_memory_()

    @property
    def primary(self) -> FlatGroup:
        """The largest group: what crosses nodes and the evaluator when it is the only one."""
        return self.groups[0]

    @property
    def numel(self) -> int:
        return sum(p.numel() for p in self.module.parameters())

    @property
    def tables(self) -> Iterator[tuple[str, nn.Parameter]]:
        for g in self.groups:
            yield from g.tables.items()

    def attach_grads(self) -> list[torch.Tensor]:
        """Give the dense parameters ``.grad`` views of one zeroed flat gradient per group
        (a worker's private buffers); the tables' sparse gradients come from autograd."""
        grads = []
        for g in self.groups:
            grad = torch.zeros(g.dense, dtype=g.dtype, device=g.flat.device)
            assign_views(g.dense_params, grad, grad=True)
            grads.append(grad)
        return grads


class BufferSlots:
    """``average``'s buffers: one shared slot per worker, merged by the main process.

    Floating-point buffers are averaged over the workers that trained; integer ones
    (BatchNorm's ``num_batches_tracked``) advance by the sum of the workers' advances.
    """

    def __init__(self, module: nn.Module, workers: int) -> None:
        self.names = [n for n, _ in module.named_buffers()]
        self.slots = {
            n: torch.zeros((workers, *b.shape), dtype=b.dtype).share_memory_()
            for n, b in module.named_buffers()
        }
        self.done = torch.zeros(workers, dtype=torch.bool).share_memory_()

    def __bool__(self) -> bool:
        return bool(self.names)

    def put(self, module: nn.Module, rank: int) -> None:
        """A worker's buffers at the end of its shard."""
        for n, b in module.named_buffers():
            self.slots[n][rank].copy_(b)
        self.done[rank] = True

    def merge(self, module: nn.Module) -> None:
        """The main process, after an epoch: the workers' buffers into ``module``'s."""
        done = self.done.nonzero().flatten()
        if done.numel():
            for n, b in module.named_buffers():
                slot = self.slots[n].index_select(0, done).to(b.device)
                if b.is_floating_point():
                    b.copy_(slot.mean(0))
                else:
                    b.add_((slot - b).sum(0))
        self.done.zero_()
