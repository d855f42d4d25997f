"""A fixed pool of shared-memory buffers recycled between producers and one consumer.

PyTorch's multiprocessing notes advise reusing the buffers passed through queues: with
the default ``file_descriptor`` sharing strategy, every tensor put on a queue costs a
file-descriptor handshake (~150-270 us for 5 KB here) while an integer index costs
~17 us. So the tensors are allocated and shared once, up front, and only slot indices
travel, through ``SimpleQueue``s (no feeder threads to deadlock at exit).

Each producer owns its own slots and its own *free*/*full* queue pair. That costs
nothing and buys robustness: a ``SimpleQueue``'s locks are not released when a process
holding them is killed, so with shared queues one ``kill -9`` could wedge every other
producer. With one pair per producer a dead producer can only lose its own pair, which
:meth:`BufferPool.reset_producer` replaces.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import time
from collections.abc import Iterator, Mapping, Sequence, Set
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from multiprocessing.reduction import ForkingPickler
from typing import TYPE_CHECKING, Any, Protocol, cast

import torch

if TYPE_CHECKING:
    from multiprocessing.synchronize import Lock

Layout = Mapping[str, tuple[Sequence[int], torch.dtype]]


class PoolTimeout(TimeoutError):
    """No slot became free (or no message arrived) within the timeout."""


class _QueueEnds(Protocol):
    """The private attributes of ``SimpleQueue`` used here (typeshed leaves them out)."""

    _reader: Connection
    _rlock: Lock


def queue_reader(queue: mp.queues.SimpleQueue) -> Connection:
    """The connection that becomes readable when ``queue`` holds a message."""
    return cast(_QueueEnds, queue)._reader


def get_with_timeout(queue: mp.queues.SimpleQueue, timeout: float | None) -> Any:
    """``SimpleQueue.get`` with a timeout (the standard one has none)."""
    ends = cast(_QueueEnds, queue)
    deadline = None if timeout is None else time.monotonic() + timeout
    # ``acquire(timeout=-1)`` would not block: a SemLock clamps a negative timeout to 0.
    locked = (
        ends._rlock.acquire() if timeout is None else ends._rlock.acquire(True, max(timeout, 0))
    )
    if not locked:
        raise PoolTimeout
    try:
        remaining = None if deadline is None else max(deadline - time.monotonic(), 0)
        if not ends._reader.poll(remaining):
            raise PoolTimeout
        data = ends._reader.recv_bytes()
    finally:
        ends._rlock.release()
    return ForkingPickler.loads(data)


@dataclass
class _Channel:
    free: mp.queues.SimpleQueue
    full: mp.queues.SimpleQueue


class Producer:
    """The producing end of one channel; picklable, so it can be handed to a worker."""

    def __init__(self, buffers: dict[str, torch.Tensor], channel: _Channel) -> None:
        self.buffers = buffers
        self._channel = channel

    def acquire(self, timeout: float | None = None) -> int:
        """Take a free slot; raise :class:`PoolTimeout` if none comes in ``timeout`` s."""
        return get_with_timeout(self._channel.free, timeout)

    def view(self, slot: int) -> dict[str, torch.Tensor]:
        return {name: t[slot] for name, t in self.buffers.items()}

    def submit(self, slot: int) -> None:
        self._channel.full.put(slot)

    def give_back(self, slot: int) -> None:
        """Put a slot acquired here (and not submitted) back on the free list, unsent."""
        self._channel.free.put(slot)

    @contextlib.contextmanager
    def message(self, timeout: float | None = None) -> Iterator[dict[str, torch.Tensor]]:
        """Fill a slot in place inside the ``with`` block; it is sent on normal exit.

        If the block raises, the slot goes back to the free list instead (not leaked).
        """
        slot = self.acquire(timeout)
        with self._returned_on_error(slot):
            yield self.view(slot)
        self.submit(slot)

    def try_message(self) -> contextlib.AbstractContextManager[dict[str, torch.Tensor] | None]:
        """Like :meth:`message` but yields ``None`` at once when every slot is in use."""
        return self._try_message()

    @contextlib.contextmanager
    def _try_message(self) -> Iterator[dict[str, torch.Tensor] | None]:
        try:
            slot = self.acquire(0)
        except PoolTimeout:
            yield None
            return
        with self._returned_on_error(slot):
            yield self.view(slot)
        self.submit(slot)

    @contextlib.contextmanager
    def _returned_on_error(self, slot: int) -> Iterator[None]:
        try:
            yield
        except BaseException:
            self.give_back(slot)
            raise


class BufferPool:
    """``slots`` preallocated buffers of ``layout`` for each of ``producers`` producers.

    The consumer (the process that built the pool, or one it is handed to) waits on
    :meth:`readers`, takes ``(producer, slot)`` with :meth:`take`, reads :meth:`view`,
    then gives the slot back with :meth:`release`.

    Slot ownership is exact at all times: every slot is free, held by its producer
    (acquired, not yet submitted), pending (submitted, not yet taken) or taken by the
    consumer. Only the last is recorded here, in the consuming process; a copy of the
    pool pickled to another process (a spawned consumer) starts out holding nothing.
    """

    def __init__(
        self, layout: Layout, producers: int, slots: int = 4, ctx: BaseContext | None = None
    ) -> None:
        if producers < 1 or slots < 1:
            raise ValueError("a pool needs at least one producer and one slot each")
        self._ctx = ctx or mp.get_context()
        self.slots = slots
        self.layout = {name: (tuple(shape), dtype) for name, (shape, dtype) in layout.items()}
        self.buffers = {
            name: torch.zeros((producers * slots, *shape), dtype=dtype).share_memory_()
            for name, (shape, dtype) in self.layout.items()
        }
        self._channels = [self._new_channel(p) for p in range(producers)]
        # Consumer-side bookkeeping, local to the consuming process: slots it has taken
        # and not released yet.
        self._taken: set[int] = set()
        self._next = 0  # the producer :meth:`receive` serves first, when it has a message

    def __getstate__(self) -> dict:
        # Whoever unpickles the pool has taken nothing (yet): the takes recorded here are
        # this process's, and their releases happen here.
        return {**self.__dict__, "_taken": set()}

    def _new_channel(self, producer: int, held: Set[int] = frozenset()) -> _Channel:
        ch = _Channel(self._ctx.SimpleQueue(), self._ctx.SimpleQueue())
        for slot in self._slots_of(producer):
            if slot not in held:
                ch.free.put(slot)
        return ch

    def _slots_of(self, producer: int) -> range:
        return range(producer * self.slots, (producer + 1) * self.slots)

    @property
    def producers(self) -> int:
        return len(self._channels)

    def producer(self, index: int) -> Producer:
        return Producer(self.buffers, self._channels[index])

    def readers(self) -> list[Connection]:
        """Connections that become readable when a message is waiting (for ``connection.wait``)."""
        return [queue_reader(ch.full) for ch in self._channels]

    def waiting(self) -> int:
        """How many producers have a message waiting to be taken."""
        return len(wait(self.readers(), 0))

    def owner(self, reader: object) -> int | None:
        for i, ch in enumerate(self._channels):
            if queue_reader(ch.full) is reader:
                return i
        return None

    def take(self, producer: int, timeout: float | None = 0) -> int | None:
        """The next submitted slot of ``producer``, or ``None`` if none arrives in time."""
        try:
            slot = get_with_timeout(self._channels[producer].full, timeout)
        except PoolTimeout:
            return None
        self._taken.add(slot)
        return slot

    def receive(self, timeout: float | None = None) -> int | None:
        """The next submitted slot of any producer, or ``None`` after ``timeout`` s. Taken
        round-robin among the producers with one waiting: a consumer slower than its
        producers would otherwise serve the first of them for ever."""
        ready = [self.owner(reader) for reader in wait(self.readers(), timeout)]
        for producer in sorted(ready, key=lambda p: (cast(int, p) - self._next) % self.producers):
            assert producer is not None  # ready came from self.readers()
            slot = self.take(producer)
            if slot is not None:
                self._next = producer + 1
                return slot
        return None

    def view(self, slot: int) -> dict[str, torch.Tensor]:
        return {name: t[slot] for name, t in self.buffers.items()}

    def release(self, slot: int) -> None:
        """Give back a slot this process took with :meth:`take` or :meth:`receive`.

        A slot it does not hold (one :meth:`reset_producer` returned as pending, or one
        released already) is free already and is left alone: a slot is never freed twice.
        """
        if slot not in self._taken:
            return
        self._taken.remove(slot)
        self._channels[slot // self.slots].free.put(slot)

    def reset_producer(self, index: int) -> list[int]:
        """Give producer ``index`` a fresh channel (after its producer or consumer died).

        Every slot of ``index`` that this process has not taken is free on the new
        channel: those the dead party held, those on the old free list, and those pending
        in the old full queue. Slots this process has taken and not released yet stay
        out until their :meth:`release` frees them (so the successor cannot overwrite
        one still being read). Once those are released, exactly ``slots`` are free.

        Returns the pending slots, oldest first, so they can still be read: read them at
        once, before the producer's successor starts (their slots are free again). They
        need no :meth:`release`; releasing one anyway is ignored.
        """
        old = self._channels[index]
        pending = []
        while True:
            try:
                pending.append(get_with_timeout(old.full, 0))
            except PoolTimeout:
                break
        held = self._taken.intersection(self._slots_of(index))
        self._close(old)
        self._channels[index] = self._new_channel(index, held)
        return pending

    def close(self) -> None:
        for ch in self._channels:
            self._close(ch)

    @staticmethod
    def _close(ch: _Channel) -> None:
        ch.free.close()
        ch.full.close()
