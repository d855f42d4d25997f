"""Worker processes: start them, watch them, restart or abort on failure, stop them.

The main process waits on the workers' sentinels (``multiprocessing.connection.wait``)
together with whatever else it consumes, so a death is noticed at once, without polling
sleeps. A worker that raises sends its traceback over its own pipe before exiting, so
the main process can log it exactly once.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import random
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, cast

import numpy as np
import torch
import torch.multiprocessing as mp

from hogwild.errors import UsageError
from hogwild.heap import keep_freed_memory

if TYPE_CHECKING:
    from multiprocessing.context import ForkContext, ForkServerContext, SpawnContext

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


class WorkerFailure(RuntimeError):
    """A worker failed and the failure policy says the run cannot go on."""


@dataclass
class WorkerContext:
    """What the engine hands every worker function, besides the application's own arguments."""

    rank: int
    seed: int
    num_threads: int
    stop_event: SharedFlag
    incarnation: int = 0

    def should_stop(self) -> bool:
        return self.stop_event.is_set()


class SharedFlag:
    """A cross-process flag (a stop request, a worker's "done") that takes no lock
    (``Event``-like: set, clear, is_set, wait).

    ``multiprocessing.Event.is_set`` acquires a lock; a worker ``kill -9``'d while inside
    it (workers call :meth:`WorkerContext.should_stop` in their loops) leaves that lock
    held for ever, and every other worker's check, and ``stop()``, then blocks. A plain
    shared byte read or written whole cannot be left half-done.
    """

    def __init__(self, ctx: BaseContext) -> None:
        self._value = ctx.RawValue(ctypes.c_bool, False)

    def set(self) -> None:
        self._value.value = True

    def clear(self) -> None:
        self._value.value = False

    def is_set(self) -> bool:
        return bool(self._value.value)

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True


def die_with_parent(parent_pid: int | None = None) -> None:
    """Ask Linux to kill this process when its parent dies, so no orphan outlives a crash.

    ``parent_pid`` (the pid of the process that started this one) closes the window in
    which the parent died before ``prctl`` took effect: the orphan then has another parent
    (init, or a container's reaper) and exits at once.
    """
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)


@contextlib.contextmanager
def torch_threads(threads: int | None = None) -> Iterator[None]:
    """Torch's intra-op thread count set to ``threads`` (none: left) for the block, and
    restored after it: a forking run, or one-game-at-a-time scoring, must not leave its
    caller single-threaded."""
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _bootstrap(
    target: Callable,
    ctx: WorkerContext,
    args: tuple,
    err: Connection,
    parent_pid: int,
    work_done: SharedFlag,
) -> None:
    die_with_parent(parent_pid)
    keep_freed_memory()
    # The terminal's Ctrl-C reaches the whole process group; only the main process acts on it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A forked child inherits the parent's Python handlers (GracefulShutdown's, say): SIGTERM
    # from stop() must end the worker, not set a flag in its copy of the parent's state.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    torch.set_num_threads(ctx.num_threads)
    seed_everything(ctx.seed)
    try:
        target(ctx, *args)
    except SystemExit as e:
        if e.code not in (None, 0):
            with contextlib.suppress(Exception):
                err.send(f"worker called sys.exit({e.code!r})")
        err.close()
        os._exit(0 if e.code in (None, 0) else 1)
    except BaseException:
        with contextlib.suppress(Exception):
            err.send(traceback.format_exc())
        err.close()
        os._exit(1)
    if not ctx.should_stop():
        work_done.set()  # it returned with its work done, not because a stop was asked
    err.close()


@dataclass
class _Slot:
    rank: int
    process: BaseProcess
    errors: Connection
    incarnation: int
    work_done: SharedFlag
    done: bool = False


@dataclass
class FailurePolicy:
    """On a worker death: ``restart`` it (at most ``max_restarts`` in all) or ``abort``."""

    on_failure: str = "restart"
    max_restarts: int = 100
    restarts: int = field(default=0, init=False)


class WorkerGroup:
    """N processes running ``target(ctx, *args)``, supervised from the main process."""

    def __init__(
        self,
        target: Callable,
        args: tuple,
        num_workers: int,
        seed: int,
        *,
        num_threads: int = 1,
        start_method: str = "fork",
        policy: FailurePolicy | None = None,
        on_restart: Callable[[int], None] | None = None,
        name: str = "worker",
    ) -> None:
        # typeshed gives get_context(str) the base class, which lacks Process.
        self._ctx = cast(
            "ForkContext | SpawnContext | ForkServerContext", mp.get_context(start_method)
        )
        if start_method == "fork":
            # GNU OpenMP does not survive fork: a child that uses a thread pool its parent
            # had started can hang. A forking parent therefore runs single-threaded (it only
            # supervises); every app gets this from the engine, not by remembering it.
            torch.set_num_threads(1)
        self.target, self.args = target, args
        self.num_workers, self.seed, self.num_threads = num_workers, seed, num_threads
        self.policy = policy or FailurePolicy()
        self.on_restart = on_restart
        self.name = name
        self.stop_event = SharedFlag(self._ctx)
        self.slots: list[_Slot] = []

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> WorkerGroup:
        self.slots = [self._spawn(rank, 0) for rank in range(self.num_workers)]
        return self

    def _spawn(self, rank: int, incarnation: int) -> _Slot:
        # A restarted worker gets a fresh seed: replaying the dead one's trajectory helps no one.
        seed = self.seed + 1000 * rank + 7919 * incarnation
        ctx = WorkerContext(rank, seed, self.num_threads, self.stop_event, incarnation)
        reader, writer = self._ctx.Pipe(duplex=False)
        work_done = SharedFlag(self._ctx)
        proc = self._ctx.Process(
            target=_bootstrap,
            args=(self.target, ctx, self.args, writer, os.getpid(), work_done),
            name=f"{self.name}-{rank}",
            daemon=True,
        )
        proc.start()
        writer.close()
        return _Slot(rank, proc, reader, incarnation, work_done)

    def sentinels(self) -> list[int]:
        return [s.process.sentinel for s in self.slots if not s.done]

    @property
    def running(self) -> int:
        return sum(not s.done for s in self.slots)

    @property
    def finished(self) -> bool:
        return all(s.done for s in self.slots)

    @property
    def completed(self) -> bool:
        """Every worker ended by finishing its work: none was cut short by the stop flag
        (a worker that returns when it sees the flag exits 0 too), killed or failed."""
        return all(s.done and s.work_done.is_set() for s in self.slots)

    def check(self, ready: Sequence[object] = ()) -> list[int]:
        """Handle workers that exited: mark successes, restart or abort on failures.

        ``ready`` is what ``connection.wait`` returned (only sentinels of this group matter;
        an empty sequence checks every worker). Returns the ranks that were restarted.
        """
        restarted = []
        for i, s in enumerate(self.slots):
            if s.done or (ready and s.process.sentinel not in ready):
                continue
            if s.process.exitcode is None:
                s.process.join(0)
                if s.process.exitcode is None:
                    continue
            code = s.process.exitcode
            s.done = True
            tb = self._read_traceback(s)
            if code == 0 or self.stop_event.is_set():
                continue
            what = f"{self.name} {s.rank} (pid {s.process.pid}) {_describe_exit(code)}"
            if tb:
                log.error("%s:\n%s", what, tb.rstrip())
            else:
                log.error("%s", what)
            p = self.policy
            if p.on_failure != "restart" or p.restarts >= p.max_restarts:
                reason = "" if p.on_failure != "restart" else f" after {p.restarts} restarts"
                last = tb.strip().splitlines()[-1] if tb else ""
                raise WorkerFailure(f"{what}{': ' + last if last else ''}; aborting{reason}")
            p.restarts += 1
            if self.on_restart is not None:
                self.on_restart(s.rank)
            log.warning(
                "restarting %s %d (restart %d of at most %d)",
                self.name,
                s.rank,
                p.restarts,
                p.max_restarts,
            )
            self.slots[i] = self._spawn(s.rank, s.incarnation + 1)
            restarted.append(s.rank)
        return restarted

    @staticmethod
    def _read_traceback(s: _Slot) -> str:
        try:
            return s.errors.recv() if s.errors.poll(0.05) else ""
        except (EOFError, OSError):
            return ""
        finally:
            s.errors.close()

    def stop(self, timeout: float = 5.0, drain: Callable[[], None] | None = None) -> None:
        """Ask every worker to stop, wait up to ``timeout`` s, then terminate, then kill.

        ``drain`` is called while waiting, so workers blocked on a full pool can finish.
        """
        self.stop_event.set()
        deadline = time.monotonic() + timeout
        for s in self.slots:
            while s.process.is_alive() and time.monotonic() < deadline:
                if drain is not None:
                    drain()
                s.process.join(0.05)
        late = [s.rank for s in self.slots if s.process.is_alive()]
        if late:
            log.warning(
                "%s%s %s did not stop within %g s of the request: terminating",
                self.name,
                "s" if len(late) > 1 else "",
                ", ".join(map(str, late)),
                timeout,
            )
        for sig_step in (BaseProcess.terminate, BaseProcess.kill):
            alive = [s.process for s in self.slots if s.process.is_alive()]
            for p in alive:
                sig_step(p)
            for p in alive:
                p.join(1.0)
        for s in self.slots:
            if not s.done:
                s.done = True
                s.errors.close()

    def kill_now(self) -> None:
        for s in self.slots:
            if s.process.is_alive():
                s.process.kill()


def resolve_start_method(name: str) -> str:
    """The start method workers get: ``name``, but ``spawn`` where forked workers could not
    learn (see :func:`autograd_survives_fork`), with a warning saying why."""
    if name not in mp.get_all_start_methods():
        raise UsageError(f"start method {name!r} is not available here")
    if name == "fork" and not autograd_survives_fork():
        log.warning(
            "starting workers with spawn, not fork: this process has run a backward pass "
            "with an accelerator present, and PyTorch's autograd refuses backward in a "
            "process forked after that"
        )
        return "spawn"
    return name


def autograd_survives_fork() -> bool:
    """Whether a child forked now can run a backward pass. Autograd starts a thread per
    accelerator device at its first backward and marks every later fork as unable to run
    one; without an accelerator it starts none, and no child is needed to tell."""
    accelerator = getattr(torch, "accelerator", None)  # torch 2.6+
    if not (accelerator.is_available() if accelerator else torch.cuda.is_available()):
        return True
    return forked_child_can_backward()


def forked_child_can_backward(timeout: float = 30.0) -> bool:
    """Fork a child that runs one backward pass; one that hangs past ``timeout`` counts as no."""
    proc = mp.get_context("fork").Process(target=_backward_once, daemon=True)
    proc.start()
    proc.join(timeout)
    if proc.exitcode is None:
        proc.kill()
        proc.join()
    return proc.exitcode == 0


def _backward_once() -> None:
    try:
        torch.ones(1, requires_grad=True).sum().backward()
    except Exception:  # an answer (no), not a traceback on the user's console
        os._exit(1)
    os._exit(0)  # not the parent's atexit handlers


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"
