"""The main process's watch over a run: telemetry in, workers and evaluator supervised.

Both apps' main loops are the same few moves around their own decisions: wait on the
telemetry pool, the workers' sentinels and the evaluator at once; hand every message to
the app; let :class:`~hogwild.procs.WorkerGroup` restart or abort a dead worker (reading
what it had sent first); and on the way out stop the workers while still draining, so
none blocks on a full pool. :class:`Supervisor` does those moves; an app keeps what to
do with a message and what to decide after each wait.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from multiprocessing.connection import wait
from typing import Any

import torch

from hogwild.pool import BufferPool
from hogwild.procs import WorkerGroup

__all__ = ["Supervisor"]

OnMessage = Callable[[dict[str, torch.Tensor]], None]


class Supervisor:
    """One telemetry pool, the current worker group (one per generation), extra waitables.

    ``on_message`` receives each telemetry message (a view of its slot, valid during
    the call). ``extra`` returns more things to wait on (an evaluator's result pipe and
    sentinel); ``on_stop``/``on_kill`` reach whatever else the app runs (the evaluator),
    so one first Ctrl-C stops everything and a second kills everything.
    """

    def __init__(
        self,
        pool: BufferPool,
        on_message: OnMessage,
        extra: Callable[[], Sequence[Any]] = tuple,
        on_stop: Callable[[], None] = lambda: None,
        on_kill: Callable[[], None] = lambda: None,
    ) -> None:
        self.pool = pool
        self.on_message = on_message
        self.extra = extra
        self.on_stop, self.on_kill = on_stop, on_kill
        self.group: WorkerGroup | None = None

    def start(self, group: WorkerGroup) -> WorkerGroup:
        """Start a generation of workers (their group's ``on_restart``: :meth:`restarted`)."""
        self.group = group
        group.start()
        return group

    def wait(self, timeout: float) -> list[Any]:
        """Wait for anything to happen, take every message, handle dead workers.

        Returns what was ready, for the app's own checks (evaluator results). Raises
        :class:`~hogwild.procs.WorkerFailure` when the failure policy says so.
        """
        waitables = [*self.pool.readers(), *self.extra()]
        if self.group is not None:
            waitables += self.group.sentinels()
        ready = wait(waitables, timeout=timeout)
        self.drain()
        if self.group is not None:
            self.group.check(ready)
        return ready

    def drain(self) -> None:
        """Hand every message waiting in the pool to the app."""
        for producer in range(self.pool.producers):
            while (slot := self.pool.take(producer, 0)) is not None:
                self.on_message(self.pool.view(slot))
                self.pool.release(slot)

    def restarted(self, rank: int) -> None:
        """A worker died: read what it had sent but was not taken; its slots are free again."""
        for slot in self.pool.reset_producer(rank):
            self.on_message(self.pool.view(slot))

    def stop_workers(self, timeout: float = 5.0) -> None:
        """Stop the current generation, draining meanwhile so no worker blocks on a full pool."""
        if self.group is not None:
            self.group.stop(timeout=timeout, drain=self.drain)
            self.drain()
            self.group = None

    def request_stop(self) -> None:
        """First Ctrl-C/SIGTERM: raise the stop flags now (a signalled worker is not restarted)."""
        if self.group is not None:
            self.group.stop_event.set()
        self.on_stop()

    def kill_all(self) -> None:
        """Second Ctrl-C: kill every child at once."""
        if self.group is not None:
            self.group.kill_now()
        self.on_kill()
