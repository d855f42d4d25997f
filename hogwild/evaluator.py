"""Score the shared model while training runs, in a process of its own.

The evaluator is started with ``spawn`` (never ``fork``: CUDA cannot be used in a
forked child) and holds its own copy of the model, on the GPU when there is one. The
main process offers it snapshots of the flat shared parameters through a
:class:`~hogwild.pool.BufferPool` of CPU shared-memory slots; the evaluator copies a
snapshot onto its device, hands the slot back at once and scores its copy. No CUDA
tensor ever crosses a process boundary, so PyTorch's CUDA-sharing rules (the producer
must outlive the consumer's use) are met trivially. Training never waits: a snapshot is
offered only when a slot is free, otherwise that evaluation is skipped. A stop request
interrupts a scoring under way (:data:`INTERRUPT`): its score is not wanted any more.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
import torch.multiprocessing as mp
from torch import nn

from hogwild.errors import UsageError
from hogwild.flat import flatten_buffers, flatten_parameters
from hogwild.pool import BufferPool, queue_reader
from hogwild.procs import FailurePolicy, WorkerContext, WorkerGroup

if TYPE_CHECKING:
    from multiprocessing.queues import SimpleQueue

log = logging.getLogger(__name__)

ScoreFn = Callable[[nn.Module, torch.device, int], dict[str, float]]

#: What a stop request sends an evaluator that has started: a scoring under way ends at
#: once (go's 200 games went past the 5 s a stop waits for).
INTERRUPT = getattr(signal, "SIGUSR1", None)


@dataclass(frozen=True, eq=False)
class Snapshot:
    """What was offered: ``params`` (and ``buffers``) exactly as sent, the ``step`` it was
    offered at and, under ``kept``, whatever the caller asked to keep with it."""

    params: torch.Tensor
    step: int
    kept: Any = None
    buffers: torch.Tensor | None = None


# The two messages the evaluator sends back on its results queue (defined at module level,
# so that they pickle by name).
class Started(NamedTuple):
    """The evaluator's first message (again after each restart): the device it really uses."""

    device: str


class Scored(NamedTuple):
    """One snapshot's score: ``seq`` names the offer it scored, ``step`` its training step."""

    seq: int
    step: int
    metrics: dict[str, float]


#: ``auto`` picks CUDA only for models at least this large: scoring runs batch-1 forwards,
#: and for a small MLP (17k parameters) a kernel launch and a host-device copy per step
#: cost more than the CPU's whole forward (~16 us on one core).
AUTO_CUDA_MIN_PARAMS = 1_000_000


def resolve_device(
    name: str, numel: int | None = None, flag: str = "--eval-device"
) -> torch.device:
    """``auto``: CUDA when available and the model has at least ``AUTO_CUDA_MIN_PARAMS``
    parameters (``numel``; unknown counts as large). Asking for CUDA without one is a usage
    error."""
    if name == "auto":
        big = numel is None or numel >= AUTO_CUDA_MIN_PARAMS
        return torch.device("cuda" if big and torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"{flag} cuda: no CUDA device is available (try auto or cpu)")
    if name not in ("cpu", "cuda"):
        raise UsageError(f"{flag} must be auto, cpu or cuda, not {name!r}")
    return torch.device(name)


def _evaluate_forever(
    ctx: WorkerContext,
    build: Callable[[], nn.Module],
    score: ScoreFn,
    pool: BufferPool,
    results: SimpleQueue[Started | Scored],
    device: str,
    armed: torch.Tensor,
) -> None:
    dev = torch.device(device)
    model = build().to(dev).eval()
    flat = flatten_parameters(model)
    buffers = flatten_buffers(model)
    scoring = _Scoring()
    armed.fill_(os.getpid())
    results.put(Started(str(dev)))
    while not ctx.should_stop():
        slot = pool.receive(timeout=0.2)
        if slot is None:
            continue
        view = pool.view(slot)
        flat.copy_(view["params"])
        if buffers.numel():
            buffers.copy_(view["buffers"])
        step, seq = int(view["step"]), int(view["seq"])
        pool.release(slot)
        try:
            with scoring, torch.no_grad():
                metrics = score(model, dev, step)
        except _Interrupted:
            break
        results.put(Scored(seq, step, metrics))


class _Interrupted(BaseException):
    """A stop request came in while a snapshot was being scored (a BaseException, as
    KeyboardInterrupt is: no ``except Exception`` of a scoring swallows it)."""


class _Scoring:
    """The stretch :data:`INTERRUPT` may cut short: a scoring, not a wait for a snapshot
    or a message under way (the loop checks its stop flag there)."""

    def __init__(self) -> None:
        self.active = False
        if INTERRUPT is not None:
            signal.signal(INTERRUPT, self._interrupt)

    def _interrupt(self, signum: int, frame: object) -> None:
        if self.active:
            raise _Interrupted

    def __enter__(self) -> None:
        self.active = True

    def __exit__(self, *exc: object) -> None:
        self.active = False


class Evaluator:
    """A spawned process that scores parameter snapshots and reports back to the main process.

    A snapshot is the flat parameter vector and, for a model with floating-point buffers
    (e.g. observation statistics), the flat buffer vector (``buffers_numel`` elements).
    """

    def __init__(
        self,
        build: Callable[[], nn.Module],
        score: ScoreFn,
        numel: int,
        *,
        buffers_numel: int = 0,
        device: str = "auto",
        seed: int = 0,
        slots: int = 2,
        policy: FailurePolicy | None = None,
    ) -> None:
        self.device = resolve_device(device, numel)
        ctx = mp.get_context("spawn")
        # ``seq`` numbers the offers: two at the same step (no worker reported in between,
        # or a resumed run) must not share a key, or a score could meet the wrong snapshot.
        layout = {
            "params": ((numel,), torch.float32),
            "step": ((), torch.int64),
            "seq": ((), torch.int64),
        }
        if buffers_numel:
            layout["buffers"] = ((buffers_numel,), torch.float32)
        self.pool = BufferPool(
            layout,
            producers=1,
            slots=slots,
            ctx=ctx,
        )
        self._ctx = ctx
        self._armed = torch.zeros((), dtype=torch.int64).share_memory_()  # see _interrupt
        self.results = ctx.SimpleQueue()
        self._backlog: list[tuple[int, dict[str, float], Snapshot | None]] = []
        self._build, self._score = build, score
        self.group = WorkerGroup(
            _evaluate_forever,
            self._process_args(),
            num_workers=1,
            seed=seed,
            start_method="spawn",
            name="evaluator",
            policy=policy or FailurePolicy("restart", max_restarts=3),
            on_restart=lambda _rank: self._reset_channels(),
        )
        self.device_used: str | None = None
        self.snapshots: dict[int, Snapshot] = {}  # by sequence number
        self._seq = 0

    def _reset_channels(self) -> None:
        # The evaluator died, perhaps holding a lock of either channel (killed inside a
        # put or a get) or a slot (between take and release): its successor gets new
        # channels with every slot free, since this process (the producer) takes none.
        # Snapshots it had not taken are dropped; scores it had sent are kept.
        self.pool.reset_producer(0)
        self._backlog += self._read(self.results)
        self.results.close()
        self.results = self._ctx.SimpleQueue()
        self.group.args = self._process_args()

    def _process_args(self) -> tuple:
        """What :func:`_evaluate_forever` is started with (after the worker context)."""
        return (self._build, self._score, self.pool, self.results, str(self.device), self._armed)

    def start(self) -> Evaluator:
        self.group.start()
        return self

    def offer(
        self,
        params: torch.Tensor,
        step: int,
        buffers: torch.Tensor | None = None,
        keep: Callable[[], Any] | None = None,
    ) -> bool:
        """Send a snapshot if the evaluator has a free slot; never blocks training.

        ``keep()`` (e.g. the statistics that go with these parameters) is called only when
        a slot was free, before anything is copied (so it may fill ``buffers``); what it
        returns comes back with the snapshot's score, under ``kept``, and is never sent.
        """
        with self.pool.producer(0).try_message() as msg:
            if msg is None:
                return False
            kept = keep() if keep is not None else None
            self._seq += 1
            msg["params"].copy_(params)
            msg["step"].fill_(step)
            msg["seq"].fill_(self._seq)
            if "buffers" in msg:
                assert buffers is not None, "the evaluated model has buffers: offer them"
                msg["buffers"].copy_(buffers)
            # Keep exactly what is sent (not the live vector, which workers keep writing),
            # so the caller can checkpoint the parameters behind a score.
            sent = msg["buffers"].clone() if "buffers" in msg else None
            self.snapshots[self._seq] = Snapshot(msg["params"].clone(), step, kept, sent)
        while len(self.snapshots) > self.pool.slots + 2:
            self.snapshots.pop(next(iter(self.snapshots)))
        return True

    def waitables(self) -> list[Any]:
        return [queue_reader(self.results), *self.group.sentinels()]

    def collect(
        self, ready: Sequence[Any] = ()
    ) -> list[tuple[int, dict[str, float], Snapshot | None]]:
        """Scores that arrived, as ``(step, metrics, snapshot scored)``; checks the process.

        The :class:`Snapshot` is None if it was dropped from
        the short history kept here; a caller must not save anything else in its place.
        """
        out = self._read(self.results)
        self.group.check(ready)
        out += self._backlog
        self._backlog = []
        return out

    def _read(
        self, results: SimpleQueue[Started | Scored]
    ) -> list[tuple[int, dict[str, float], Snapshot | None]]:
        out = []
        while not results.empty():
            msg: Started | Scored = results.get()
            if isinstance(msg, Started):
                self.device_used = msg.device
                log.info("evaluator running on %s", msg.device)
            else:
                out.append((msg.step, msg.metrics, self.snapshots.pop(msg.seq, None)))
        return out

    def request_stop(self) -> None:
        """First Ctrl-C/SIGTERM: raise its stop flag (a signalled evaluator is not restarted)."""
        self.group.stop_event.set()
        self._interrupt()

    def _interrupt(self) -> None:
        """End a scoring under way, if the evaluator process has its handler in place
        (``armed`` with its pid; before that, the signal would kill it). Called from a
        signal handler too, so it reads no queue."""
        if INTERRUPT is None or not self.group.slots:  # never started
            return
        proc = self.group.slots[0].process
        if proc.pid is not None and proc.pid == int(self._armed) and proc.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, INTERRUPT)

    def kill_now(self) -> None:
        """Second Ctrl-C: kill it at once."""
        self.group.kill_now()

    def stop(self, timeout: float = 5.0) -> None:
        self.request_stop()
        self.group.stop(timeout)
        self.pool.close()
        self.results.close()
