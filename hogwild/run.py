"""The engine's main loop: an app plugs in what is its own, the loop does the plumbing.

Both apps' main processes make the same moves: catch Ctrl-C/SIGTERM, start a generation
of workers, wait on telemetry, workers and evaluator with a timeout, hand each message
to the app, ask it after every wait whether to stop, agree with the other nodes under
``torchrun``, checkpoint now and then and at the end, and on every way out (a reason, a
signal, a failed worker or node) stop the workers, the evaluator and the pool. That is
:class:`RunLoop`. What the app keeps is in :class:`RunApp`: the worker generations it
starts, what a message means, its reasons to stop, what a checkpoint holds, what it
counts across nodes, and its summary. An app with one long generation (A3C) returns one
:class:`Workers`; one with a generation per epoch (MNIST) returns the next until it is
done. The loop turns each into a :class:`~hogwild.procs.WorkerGroup` with the run's
settings and its own wiring (telemetry, restarts), so no app touches either.

Across nodes, every round of :class:`~hogwild.distributed.NodeSync` carries two votes in
front of the app's own counters: *stop* (any node's vote stops all) and *done* (the
generation is over when every node is done). Rounds pair up by their order on each node,
so every decision is taken from round totals, which are the same on all nodes.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.multiprocessing as mp

from hogwild.checkpoint import save_checkpoint_or_warn
from hogwild.config import EngineConfig
from hogwild.console import Progress
from hogwild.distributed import NodeFailure, NodeSync, SyncResult, launched_by_torchrun
from hogwild.pool import BufferPool
from hogwild.procs import FailurePolicy, WorkerFailure, WorkerGroup
from hogwild.rundir import RunDir
from hogwild.shutdown import GracefulShutdown
from hogwild.supervise import Supervisor

__all__ = [
    "ANOTHER_NODE",
    "CHECKPOINT",
    "INTERRUPTED",
    "Generation",
    "RunApp",
    "RunEnd",
    "RunLoop",
    "Workers",
]

INTERRUPTED = "interrupted"
#: The run folder's own checkpoint, written periodically and at the end.
CHECKPOINT = "checkpoint.pt"
ANOTHER_NODE = "another node stopped"


@dataclass(frozen=True)
class Workers:
    """What one generation runs: ``target(ctx, *args)`` in each of the run's ``workers``
    processes (``ctx``: a :class:`~hogwild.procs.WorkerContext`).

    Everything else is the run's, from its :class:`~hogwild.config.EngineConfig`: the
    count (which also sizes the telemetry pool), threads per worker, start method, and
    the failure policy, whose ``max_restarts`` holds for the whole run, not per generation.
    ``seed``: the generation's base seed (each rank, and each restart, gets its own from
    it); ``restartable=False``: a worker's failure ends the run whatever
    ``--on-worker-failure`` says (for workers whose peers could not take a new one back).
    """

    target: Callable[..., None]
    args: tuple[Any, ...]
    seed: int
    restartable: bool = True


@dataclass
class Generation:
    """How one generation of workers ended.

    ``reason``: why the run is to stop (None: the generation just ended); ``completed``:
    every worker (on every node) finished its work; ``seconds``: from its start until its
    last message was read.
    """

    reason: str | None
    completed: bool
    seconds: float


@dataclass
class RunEnd:
    """What the app's :meth:`RunApp.finish` is told."""

    reason: str | None
    exit_code: int
    seconds: float  # since the loop started
    checkpoint: Path | None  # the final checkpoint, if this node wrote one


class RunApp(Protocol):
    """What an application plugs into :class:`RunLoop`."""

    def next_generation(self, last: Generation | None, telemetry: BufferPool) -> Workers | None:
        """The next generation of workers to run (``last``: how the one before ended), or
        None when the run is over (see :attr:`RunLoop.stopping`). ``telemetry``: the run's
        pool, for the workers' arguments (each sends on its rank's producer); the same one
        every generation."""

    def on_message(self, view: dict[str, torch.Tensor]) -> None:
        """One telemetry message (a view of its slot, valid during the call)."""

    def tick(self, ready: Sequence[Any], now: float) -> str | None:
        """After each wait (``ready``: what woke it): the app's reason to stop, if any."""

    def checkpoint_state(self) -> dict[str, Any]:
        """What a checkpoint holds (called periodically and at the end, on the main node)."""

    def round_counters(self) -> list[float]:
        """Across nodes: this node's counters for a round (summed over nodes)."""

    def round_gather(self) -> torch.Tensor | None:
        """Across nodes: a vector to all-gather in the same round (or None)."""

    def on_round(self, totals: torch.Tensor, gathered: list[torch.Tensor] | None) -> None:
        """Across nodes: a round's totals of the app's counters, and the gathered vectors."""

    def finish(self, end: RunEnd) -> dict[str, float] | None:
        """Workers stopped, final checkpoint written: summarise; the run folder's metrics."""


class Watched(Protocol):
    """A process beside the workers (an evaluator) as the loop sees it: the app builds,
    starts and feeds it; the loop waits on it with the workers and stops or kills it with
    them (:meth:`RunLoop.watch`)."""

    def waitables(self) -> list[Any]:
        """What to wake up on (its pipe, its process sentinel)."""

    def request_stop(self) -> None:
        """Ask it to finish (Ctrl-C, SIGTERM)."""

    def kill_now(self) -> None:
        """Kill it (a second signal)."""

    def stop(self) -> None:
        """Stop it and wait (the run's end)."""


class NullRunDir:
    """The run folder of nodes other than rank 0: they log nothing (rank 0 owns the run)."""

    path = None

    def scalar(self, tag: str, value: float, step: int) -> None:
        pass

    def scalars(self, values: dict[str, float], step: int) -> None:
        pass

    def close(self, final_metrics: dict[str, float] | None = None) -> None:
        pass


class RunLoop:
    """One node's main loop. Under ``torchrun`` it joins the group on construction (and
    ``params`` start from rank 0's); :meth:`close` leaves it.

    ``counters``: how many counters the app adds to each round (see
    :meth:`RunApp.round_counters`); ``wait_timeout``: the longest wait between two ticks;
    ``time_limit``: seconds after which the run stops; ``checkpoint_every``: seconds
    between checkpoints while workers run (None: only at the end and when the app calls
    :meth:`save_checkpoint`); ``shutdown``: the handler the caller entered before setting
    the run up (see :meth:`run`).
    """

    def __init__(
        self,
        cfg: EngineConfig,
        prog: str,
        layout: dict[str, tuple[tuple[int, ...], torch.dtype]],
        *,
        params: torch.Tensor,
        counters: int = 0,
        progress: Progress | None = None,
        wait_timeout: float = 0.1,
        time_limit: float | None = None,
        checkpoint_every: float | None = None,
        warn: Callable[[str], None] | None = None,
        shutdown: GracefulShutdown | None = None,
    ) -> None:
        self.cfg, self.prog, self.layout = cfg, prog, layout
        self.progress = progress or Progress()
        self.wait_timeout, self.time_limit = wait_timeout, time_limit
        self.checkpoint_every = checkpoint_every
        self.warn = warn  # prints a failed checkpoint write's warning (default: stderr)
        self.sync: NodeSync | None = None
        if launched_by_torchrun():
            self.sync = NodeSync(
                params, 3 + counters, sync_every=cfg.sync_every, timeout=cfg.dist_timeout
            )
        self.rank = self.sync.rank if self.sync else 0
        self.nodes = self.sync.world if self.sync else 1
        self.rundir: RunDir | NullRunDir = NullRunDir()
        self.checkpoint_path: Path | None = None
        self.evaluator: Watched | None = None
        self.pool: BufferPool | None = None
        self.supervisor: Supervisor | None = None
        # One policy for the run: --max-restarts counts the restarts of every generation.
        self.policy = FailurePolicy(cfg.on_worker_failure, cfg.max_restarts)
        # The caller's handler while it sets the run up (its run folder made, its workers not
        # yet started): a signal it caught stops the run as soon as :meth:`run` begins.
        self.shutdown = shutdown or GracefulShutdown()
        self.reason: str | None = None
        self.t0 = time.monotonic()
        self._dirty = False  # workers ran since the last checkpoint
        self._round_reason: str | None = None
        self._all_done = False
        self._signal_elsewhere: int = 0  # the signal that interrupted another node, if any

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def stopping(self) -> bool:
        """Alone, a signal stops the run; across nodes, a stop all of them agreed on."""
        return self.reason is not None or (self.sync is None and self.shutdown.requested)

    def open_run_dir(
        self, name: str, config: Any, run_name: str | None, resume_dir: Path | None = None
    ) -> RunDir | NullRunDir:
        """The run folder (rank 0 alone) and its ``checkpoint.pt``, unless already set."""
        if self.is_main:
            self.rundir = RunDir(self.cfg.logdir, name, config, run_name, resume_dir=resume_dir)
            self.checkpoint_path = self.checkpoint_path or self.rundir.path / CHECKPOINT
        return self.rundir

    def watch(self, evaluator: Watched) -> None:
        """Wait on ``evaluator`` with the workers from now on, and stop it with them."""
        self.evaluator = evaluator

    def _open_pool(self) -> Supervisor:
        """The telemetry pool and the supervisor that reads it (before the first group)."""
        if self.supervisor is None:
            ctx = mp.get_context(self.cfg.start_method)
            self.pool = BufferPool(self.layout, producers=self.cfg.workers, slots=4, ctx=ctx)
            self.supervisor = Supervisor(
                self.pool,
                self._on_message,
                extra=lambda: self.evaluator.waitables() if self.evaluator else (),
                on_stop=lambda: self.evaluator.request_stop() if self.evaluator else None,
                on_kill=lambda: self.evaluator.kill_now() if self.evaluator else None,
            )
        return self.supervisor

    def _on_message(self, view: dict[str, torch.Tensor]) -> None:
        self.app.on_message(view)

    # -- the run -------------------------------------------------------------------------
    def run(self, app: RunApp) -> int:
        """Run generations until the app has none left or a reason to stop; the exit code:
        0, 128 + signal number after Ctrl-C/SIGTERM (on any node under torchrun), 1 after a
        failed worker or node (one line on stderr). Workers, evaluator, pool and node group
        are gone afterwards."""
        self.app = app
        sup = self._open_pool()
        exit_code = 0
        with GracefulShutdown(on_force=sup.kill_all, on_request=sup.request_stop) as shutdown:
            shutdown.take_over(self.shutdown)
            self.shutdown = shutdown
            self.t0 = time.monotonic()
            try:
                last = None
                while (workers := app.next_generation(last, sup.pool)) is not None:
                    last = self._generation(workers)
            except (WorkerFailure, NodeFailure) as e:
                sup.stop_workers(timeout=5.0)
                self.progress.close()
                print(f"{self.prog}: error: {e}", file=sys.stderr, flush=True)
                exit_code = 1
            finally:
                try:
                    self._end(exit_code)
                finally:
                    self._close_children()
                    self.close()
            return self.exit_code

    def _generation(self, workers: Workers) -> Generation:
        """Start ``workers``, tick until a reason to stop or they are done; stop them."""
        sup, app = self.supervisor, self.app
        assert sup is not None
        self._all_done = False
        self._dirty = True
        start = last_ckpt = time.monotonic()
        group = sup.start(self._group(workers, sup))
        while True:
            ready = sup.wait(timeout=self.wait_timeout)
            now = time.monotonic()
            local = app.tick(ready, now)
            if self.checkpoint_every is not None and now - last_ckpt >= self.checkpoint_every:
                self.save_checkpoint()
                last_ckpt = now
            if self.shutdown.requested:
                local = INTERRUPTED
            if local is None and self.time_limit is not None and now - self.t0 >= self.time_limit:
                local = "time limit reached"
            if self.sync is None:
                if local is not None or group.finished:
                    self.reason = local
                    break
            elif self._round(local, group.completed and local is None):
                break
        sup.drain()
        seconds = time.monotonic() - start
        # Every worker done counts even if a stop request came in meanwhile; one that
        # returned because of the stop does not.
        completed = group.completed if self.sync is None else self._all_done
        sup.stop_workers(timeout=5.0)
        if self.sync is not None:
            completed = self._final_round()
        return Generation(self.reason, completed, seconds)

    def _group(self, workers: Workers, sup: Supervisor) -> WorkerGroup:
        """``workers`` as a group with the run's settings; a restart first reads what the
        dead worker had sent (:meth:`Supervisor.restarted`)."""
        cfg = self.cfg
        return WorkerGroup(
            workers.target,
            workers.args,
            cfg.workers,
            workers.seed,
            num_threads=cfg.threads_per_worker,
            start_method=cfg.start_method,
            policy=self.policy if workers.restartable else FailurePolicy("abort"),
            on_restart=sup.restarted,
        )

    def _end(self, exit_code: int) -> None:
        sup = self.supervisor
        if sup is not None:
            sup.stop_workers(timeout=5.0)
        self.progress.close()
        if self.shutdown.requested:
            exit_code = self.shutdown.exit_code
        elif exit_code == 0 and self._signal_elsewhere:
            # Interrupted on one node is interrupted on all: torchrun's launcher waits (5
            # min) at exit for the other nodes unless every node succeeded or none did.
            exit_code = 128 + self._signal_elsewhere
        self.exit_code = exit_code
        seconds = time.monotonic() - self.t0
        path = self.save_checkpoint() if self._dirty else None
        metrics = None
        try:
            metrics = self.app.finish(RunEnd(self.reason, exit_code, seconds, path))
        finally:  # the run folder (and --track's W&B run) closes on every path
            self.rundir.close(metrics)

    def _close_children(self) -> None:
        if self.evaluator is not None:
            self.evaluator.stop()
            self.evaluator = None
        if self.pool is not None:
            self.pool.close()

    def close(self) -> None:
        """Leave the torchrun group, if this process joined one."""
        if self.sync is not None:
            self.sync.close()
            self.sync = None

    # -- checkpoints ---------------------------------------------------------------------
    def save_checkpoint(
        self, state: dict[str, Any] | None = None, path: Path | None = None
    ) -> Path | None:
        """Save ``state`` (default: the app's :meth:`~RunApp.checkpoint_state`) at ``path``
        (default: the run's checkpoint); None when not the main node or the write failed
        (one warning line: the atomic write kept the previous file, and the run goes on)."""
        path = path or self.checkpoint_path
        if path is None:
            return None
        if state is None:
            state = self.app.checkpoint_state()
            self._dirty = self.supervisor is not None and self.supervisor.group is not None
        return save_checkpoint_or_warn(state, path, self.prog, self.warn)

    # -- across nodes --------------------------------------------------------------------
    def _round(self, local: str | None, done: bool) -> bool:
        """Start a round when due (or at once with a vote); True when one ended the
        generation: some node voted to stop, or every node is done."""
        sync = self.sync
        assert sync is not None
        if not sync.in_flight and (local is not None or done or sync.due()):
            self._round_reason = local
            sync.start(self._counters(local is not None, done), self.app.round_gather())
        result = sync.poll()
        if result is None:
            return False
        self._all_done = self._count(result) >= self.nodes
        return self._all_done or self.reason is not None

    def _final_round(self) -> bool:
        """The blocking, exact round once workers stopped: identical models everywhere.
        True if every node had finished."""
        assert self.sync is not None
        stop = self.reason is not None or self.shutdown.requested
        self._round_reason = self.reason or (INTERRUPTED if self.shutdown.requested else None)
        result = self.sync.final_round(
            self._counters(stop, self._all_done), self.app.round_gather()
        )
        self._all_done = self._count(result) >= self.nodes
        return self._all_done

    def vote(self, flag: bool) -> bool:
        """A blocking round between generations: True if any node votes ``flag``.

        The parameters are identical on every node here; they are put back bit for bit
        after the (exact) average.
        """
        if self.sync is None:
            return flag
        keep = self.sync.params.clone()
        self._round_reason = INTERRUPTED if self.shutdown.requested else None
        result = self.sync.final_round(
            self._counters(self.shutdown.requested, flag), self.app.round_gather()
        )
        self.sync.params.copy_(keep)
        return self._count(result) > 0

    # A round sums, over nodes: [votes to stop, nodes done (or votes for vote()'s flag),
    # the numbers of the signals that interrupted nodes, *the app's counters].
    _STOP_VOTES, _DONE_VOTES, _SIGNALS, _APP_COUNTERS = 0, 1, 2, slice(3, None)

    def _counters(self, stop: bool, done: bool) -> list[float]:
        signum = float(self.shutdown.signum or 0)
        return [float(stop), float(done), signum, *self.app.round_counters()]

    def _count(self, result: SyncResult) -> int:
        """Hand the app its counters; note a stop voted elsewhere; the nodes done."""
        totals = result.totals
        self.app.on_round(totals[self._APP_COUNTERS], result.gathered)
        if totals[self._STOP_VOTES] > 0 and self.reason is None:
            self.reason = self._round_reason or ANOTHER_NODE
        if totals[self._SIGNALS] > 0 and not self.shutdown.requested:
            # A sum: one signal's number, or for several nodes a stand-in, SIGTERM's.
            only_ctrl_c = int(totals[self._SIGNALS]) == signal.SIGINT
            self._signal_elsewhere = signal.SIGINT if only_ctrl_c else signal.SIGTERM
        return int(totals[self._DONE_VOTES])
