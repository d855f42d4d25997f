"""Hogwild! nodes under torchrun: what the trainer checks beyond the engine's rounds.

Every node runs its own worker generations on its own shards and averages parameters with
the others in the rounds of the engine's :class:`~hogwild.run.RunLoop` (which also agree
on epoch ends and stops). Here: that every node got the same training flags, at the start,
and that all ended with the same parameters, at the end.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from hogwild.distributed import node_failure
from hogwild.errors import UsageError
from hogwild.supervised.config import FitConfig

log = logging.getLogger(__name__)

# Settings that must be the same on every node of a torchrun job: they decide the shards,
# the schedule and what is trained. An app adds its own (App.same_on_every_node).
SAME_ON_EVERY_NODE = (
    "strategy", "model", "data", "loss", "step", "optimizer", "table_optimizer", "table_lr",
    "batch_size", "grad_accum",
    "amp", "epochs", "lr", "momentum", "weight_decay", "lr_decay", "seed", "workers",
    "max_batches_per_epoch", "target", "monitor", "buffers",
)  # fmt: skip


def params_digest(flat: torch.Tensor) -> str:
    """A short fingerprint of the parameters' exact bits (nodes compare theirs at the end)."""
    return hashlib.sha256(flat.detach().cpu().contiguous().numpy().tobytes()).hexdigest()[:16]


def agree_on_start(
    cfg: FitConfig, rank: int, nodes: int, state: tuple[Any, ...], more: tuple[str, ...] = ()
) -> tuple[Any, ...]:
    """Check that every node got the same training flags; return rank 0's ``state``.

    The weights already came from rank 0 (NodeSync's broadcast); the epoch and sample
    counts of a resumed run come from rank 0 too, so only rank 0 needs the checkpoint
    (another node given ``--resume`` also restores its own workers' optimizer state).
    """
    names = (*SAME_ON_EVERY_NODE, *more)
    mine = {k: getattr(cfg, k) for k in names}
    gathered: list[Any] = [None] * nodes
    _collective(rank, lambda: dist.all_gather_object(gathered, (mine, *state)))
    differ = [k for k in names if any(g[0][k] != mine[k] for g in gathered)]
    if differ:
        flags = ", ".join("--" + k.replace("_", "-") for k in differ)
        raise UsageError(f"every node must be given the same {flags} (they differ)")
    return tuple(gathered[0][1:])


def check_identical(flat: torch.Tensor, rank: int, nodes: int, say: Callable[[str], None]) -> None:
    """Compare the final parameters of all nodes (they must be the same bits)."""
    digest = params_digest(flat)
    digests: list[Any] = [None] * nodes
    _collective(rank, lambda: dist.all_gather_object(digests, digest))
    if len(set(digests)) == 1:
        say(f"final parameters identical on all {nodes} nodes (sha256 {digest})")
    else:
        log.warning("final parameters differ between nodes: %s", ", ".join(digests))


def _collective(rank: int, fn: Callable[[], object]) -> None:
    """A collective of the app's own; like NodeSync's, a failure is a NodeFailure."""
    try:
        fn()
    except (RuntimeError, dist.DistBackendError) as e:
        raise node_failure(rank, e) from None
