"""Beyond one machine: node processes launched by ``torchrun`` keep their models in step.

Each node runs an ordinary Hogwild! group on its own shared model. The node's main
process (one ``torch.distributed`` rank, gloo backend) averages the flat parameters
with the other nodes every ``sync_every`` seconds, asynchronously: the all-reduce runs
in gloo's background thread while the local workers keep updating, and the average is
then applied as a *delta* (``params += average - snapshot``), so local progress made
during the collective is kept, not overwritten. Optimizer state stays local.

Every round also all-reduces a small vector of counters (env steps, stop votes, ...),
so all nodes see global totals and agree on when to stop: rounds happen in the same
order on every rank, which is all collectives need to pair up. A node that dies makes
the others' next collective fail at once; one that stops answering (frozen, SIGSTOP, a
lost link) makes it time out, ``timeout`` s past the stopped node's next due round, so a
merely slow node is waited for while a stopped one ends the run within a bounded time.
"""

from __future__ import annotations

import datetime
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch
import torch.distributed as dist

from hogwild.errors import UsageError

_T = TypeVar("_T")


def launched_by_torchrun() -> bool:
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


class NodeFailure(RuntimeError):
    """Another node died or stopped answering; this one cannot go on."""


@dataclass
class SyncResult:
    """What a finished round tells every node: the sum of each counter over all nodes."""

    totals: torch.Tensor
    rounds: int
    gathered: list[torch.Tensor] | None = None  # every node's ``gather`` vector, by rank


class NodeSync:
    """Periodic, non-blocking parameter averaging across ``torchrun`` nodes."""

    def __init__(
        self,
        params: torch.Tensor,
        num_counters: int,
        sync_every: float = 2.0,
        timeout: float = 30.0,
    ) -> None:
        # A node that votes starts its round at once; the others join theirs when due, up
        # to ``sync_every`` s later. Only the silence past that counts against a node.
        self.timeout = timeout + sync_every
        if not dist.is_initialized():
            try:
                dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=self.timeout))
            except (RuntimeError, ValueError) as e:
                raise UsageError(f"cannot join the torchrun group: {_first_line(e)}") from None
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.params = params
        self.sync_every = sync_every
        self._snapshot = torch.empty_like(params)
        self._pre = torch.empty_like(params)
        self._counters = torch.zeros(num_counters, dtype=torch.float64)
        self._work: list[dist.Work] = []
        self._gathered: list[torch.Tensor] | None = None
        self._last = time.monotonic()
        self.rounds = 0
        self.broadcast_from_rank0()

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def broadcast_from_rank0(self) -> None:
        """Start every node from rank 0's parameters (a resumed or seeded model)."""
        snapshot = self.params.clone()
        self._guard(lambda: dist.broadcast(snapshot, src=0))
        self.params.copy_(snapshot)

    @property
    def in_flight(self) -> bool:
        return bool(self._work)

    def due(self) -> bool:
        return not self._work and time.monotonic() - self._last >= self.sync_every

    def start(
        self, counters: torch.Tensor | list[float], gather: torch.Tensor | None = None
    ) -> None:
        """Begin a round: snapshot the parameters and all-reduce them with ``counters``.

        ``gather`` (same shape on every node), if given, is all-gathered in the same round:
        for what cannot be averaged, such as running statistics to merge.
        """
        self._pre.copy_(self.params)
        self._snapshot.copy_(self._pre)
        self._counters.copy_(torch.as_tensor(counters, dtype=torch.float64))
        self._gathered = None
        if gather is not None:
            self._gathered = [torch.empty_like(gather) for _ in range(self.world)]
            mine = gather.clone()
        self._work = self._guard(
            lambda: [
                dist.all_reduce(self._snapshot, async_op=True),
                dist.all_reduce(self._counters, async_op=True),
                *(
                    [dist.all_gather(self._gathered, mine, async_op=True)]
                    if gather is not None
                    else []
                ),
            ]
        )

    def poll(self, block: bool = False, exact: bool = False) -> SyncResult | None:
        """If the round in flight has finished, apply the average and return the totals.

        ``exact``: set the parameters to the average itself (bit-identical on every node),
        for a final round when no worker is updating any more.
        """
        if not self._work:
            return None
        if not block and not all(w.is_completed() for w in self._work):
            return None
        self._guard(lambda: [w.wait() for w in self._work])
        self._work = []
        mean = self._snapshot.div_(self.world)
        if exact:
            self.params.copy_(mean)
        else:
            # params += mean - pre: keeps what local workers did while the collective ran.
            self.params.add_(mean.sub_(self._pre))
        self._last = time.monotonic()
        self.rounds += 1
        return SyncResult(self._counters.clone(), self.rounds, self._gathered)

    def final_round(
        self, counters: torch.Tensor | list[float], gather: torch.Tensor | None = None
    ) -> SyncResult:
        """A blocking, exact round once workers have stopped: all nodes end identical."""
        if self._work:
            self.poll(block=True)
        self.start(counters, gather)
        result = self.poll(block=True, exact=True)
        assert result is not None
        return result

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()

    def _guard(self, fn: Callable[[], _T]) -> _T:
        try:
            return fn()
        except (RuntimeError, dist.DistBackendError) as e:
            raise node_failure(self.rank, e, self.timeout) from None


def node_failure(rank: int, e: BaseException, timeout: float | None = None) -> NodeFailure:
    """The one line a failed collective ends the run with (``timeout``: what it waited)."""
    return NodeFailure(f"node {rank}: lost contact with the other nodes ({_reason(e, timeout)})")


def _reason(e: BaseException, timeout: float | None) -> str:
    text = re.sub(r"^\[[^\]]*\.(cc|cpp|h):\d+\] ", "", _first_line(e))  # gloo's source line
    if re.search(r"time(d)? ?out", text, re.IGNORECASE):  # gloo words it several ways
        waited = f"in {timeout:g} s" if timeout is not None else "in time"
        return f"no answer {waited}: stopped, hung or unreachable"
    return text.split(". ")[0]


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__
