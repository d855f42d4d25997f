"""The main process of hogwild mode: one worker generation per epoch, then test and save.

One epoch is one generation of N workers: each trains on its shard of that epoch's
shuffle (``DistributedSampler``-style: a permutation seeded by (seed, epoch), split N
ways) and exits. Meanwhile the main process only consumes telemetry and watches the
workers (restarting a dead one, which redoes its shard with a fresh seed). When all are
done, nothing trains: the main process scores the test set, logs, checkpoints, and
starts the next generation. A fork per epoch costs milliseconds; in exchange there is
no cross-process barrier to get wrong and every checkpoint is of a quiescent model.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing as mp

from hogwild.distributed import NodeFailure, launched_by_torchrun
from hogwild.errors import UsageError
from hogwild.evaluator import resolve_device
from hogwild.flat import flatten_parameters
from hogwild.mnist.checkpoints import check_output_paths, load_resume, save_run_checkpoint
from hogwild.mnist.config import PROG, MnistConfig, epoch_lr
from hogwild.mnist.data import load_data
from hogwild.mnist.live_eval import LiveEvaluation
from hogwild.mnist.model import build_model
from hogwild.mnist.multinode import NodeRounds
from hogwild.mnist.report import (
    MnistResult,
    final_metrics,
    milestone_lines,
    progress_line,
    rate_text,
    test_and_log,
)
from hogwild.mnist.worker import TELEMETRY, EpochPlan, make_optimizer, train_worker
from hogwild.pool import BufferPool
from hogwild.procs import FailurePolicy, WorkerFailure, WorkerGroup
from hogwild.rundir import Progress, RunDir
from hogwild.shutdown import GracefulShutdown
from hogwild.supervise import Supervisor

log = logging.getLogger(__name__)


class MnistRun:
    """The main process: builds the shared model, runs one worker generation per epoch."""

    def __init__(self, cfg: MnistConfig, out: Any = None) -> None:
        # One thread here, before any tensor work: GNU OpenMP does not survive fork, so a
        # parent that ever ran a multi-threaded op would hang workers that use more than one
        # thread. The main process only computes between generations anyway.
        torch.set_num_threads(1)
        self.cfg = cfg
        self.out = out or sys.stdout
        self._validate()
        resume = load_resume(cfg) if cfg.resume else None
        torch.manual_seed(cfg.seed)
        self.data = load_data(cfg)

        self.model = build_model(cfg.model)
        self.flat = flatten_parameters(self.model).share_memory_()
        self.optimizers = [make_optimizer(cfg, self.flat) for _ in range(cfg.workers)]
        self.start_epoch, self.samples, self.elapsed0 = 0, 0, 0.0
        self.milestones: dict[float, tuple[float, int]] = {}
        if resume is not None:
            self._restore(resume)

        self.policy = FailurePolicy(cfg.on_worker_failure, cfg.max_restarts)
        self.group: WorkerGroup | None = None
        self.supervisor: Supervisor | None = None
        self.live_eval: LiveEvaluation | None = None
        self.progress = Progress(stream=self.out)
        self._epoch, self._epoch_samples = 0, 0
        self._loss_window: list[tuple[float, int]] = []
        self._t0 = 0.0

        # Under torchrun: this process is one node; rank 0 alone tests, logs, checkpoints.
        self.rounds: NodeRounds | None = None
        self.rank, self.nodes = 0, 1
        if launched_by_torchrun():
            self.rounds = rounds = NodeRounds(
                self.flat,
                cfg,
                stop_requested=lambda: self.shutdown.requested,
                add_samples=self._add_others_samples,
                say=self._print,
            )
            try:
                self.rank, self.nodes = rounds.rank, rounds.nodes
                state = (self.start_epoch, self.samples, self.elapsed0, self.milestones)
                state = rounds.agree_on_start(state)
                self.start_epoch, self.samples, self.elapsed0, self.milestones = state
            except BaseException:
                rounds.close()
                raise

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    # -- setup ---------------------------------------------------------------------
    def _validate(self) -> None:
        cfg = self.cfg
        if cfg.start_method not in mp.get_all_start_methods():
            raise UsageError(f"start method {cfg.start_method!r} is not available here")
        if cfg.eval_interval > 0:
            resolve_device(cfg.eval_device)  # fail now, not in the evaluator process
        check_output_paths(cfg)  # fail now, not after the data is read

    def _restore(self, ck: dict[str, Any]) -> None:
        """Load weights and every worker's optimizer state in place (shared storage kept)."""
        try:
            self.model.load_state_dict(ck["model"])
            saved = ck["optimizers"]
            for rank, opt in enumerate(self.optimizers):
                # A different worker count is allowed: ranks reuse saved states round-robin.
                opt.load_state_dict(saved[rank % len(saved)])
        except (RuntimeError, ValueError, KeyError, TypeError, ZeroDivisionError) as e:
            reason = " ".join(str(e).split())[:300] or type(e).__name__
            raise UsageError(f"{self.cfg.resume}: does not fit this model ({reason})") from None
        self.start_epoch = int(ck["epoch"])
        self.samples = int(ck.get("samples", 0))
        self.elapsed0 = float(ck.get("elapsed", 0.0))
        self.milestones = {float(k): tuple(v) for k, v in ck.get("milestones", {}).items()}

    def close(self) -> None:
        """Leave the torchrun group, if this process joined one."""
        if self.rounds is not None:
            self.rounds.close()
            self.rounds = None

    # -- the run -----------------------------------------------------------------------
    def _open_run(self) -> None:
        """Run folder, checkpoint path, telemetry pool: only once there is work to do."""
        cfg = self.cfg
        resume_dir = None
        if cfg.resume and (Path(cfg.resume).parent / "config.json").is_file():
            resume_dir = Path(cfg.resume).parent  # keep logging into the run being resumed
        if self.is_main:
            self.rundir: RunDir | _NoRunDir = RunDir(
                cfg.logdir, "mnist", cfg, cfg.run_name, resume_dir=resume_dir
            )
            self.checkpoint_path = Path(cfg.checkpoint or self.rundir.path / "checkpoint.pt")
        else:
            self.rundir = _NoRunDir()
        ctx = mp.get_context(cfg.start_method)
        self.pool = BufferPool(TELEMETRY, producers=cfg.workers, slots=4, ctx=ctx)
        self.supervisor = Supervisor(
            self.pool,
            self._consume,
            extra=lambda: self.live_eval.waitables() if self.live_eval else (),
            on_kill=lambda: self.live_eval and self.live_eval.kill_now(),
        )

    def run(self, shutdown: GracefulShutdown) -> MnistResult:
        """Train from ``start_epoch`` to ``cfg.epochs`` (or a stop); checkpoint; report."""
        cfg = self.cfg
        self.shutdown = shutdown
        if self.start_epoch >= cfg.epochs:
            self._print(
                f"{cfg.resume} already holds {self.start_epoch} epochs (--epochs {cfg.epochs}): "
                "nothing to train"
            )
            return MnistResult(0, None, None, self.start_epoch, self.samples)
        self._open_run()
        result = MnistResult(0, self.rundir.path, None, self.start_epoch, self.samples)
        self._print(self._banner())
        self._t0 = time.monotonic() - self.elapsed0
        epoch, final, saved = self.start_epoch, None, True
        try:
            if cfg.eval_interval > 0 and self.is_main:
                self.live_eval = LiveEvaluation(
                    cfg, self.flat, self.rundir, self.milestones, self._t0
                )
            try:
                while epoch < cfg.epochs and not self._stopping():
                    saved = False
                    completed, train_time = self._train_epoch(epoch)
                    if not completed:
                        break
                    epoch += 1
                    final = self._end_epoch(epoch, train_time, result)
                    saved = True
                    if self._target_reached(epoch, final):
                        break
                if self.rounds is not None:
                    self.rounds.check_identical()
            except (WorkerFailure, NodeFailure) as e:
                self._stop_workers()
                self.progress.close()
                print(f"{PROG}: error: {e}", file=sys.stderr, flush=True)
                result.exit_code = 1
            finally:
                self._stop_workers()
                self.progress.close()
            if shutdown.requested:
                result.exit_code = shutdown.exit_code
            if not saved:
                # Stopped mid-epoch: the weights hold the partial epoch's progress, the epoch
                # count does not, so a resume redoes that epoch from its start.
                self._save_checkpoint(epoch, final)
            if self.is_main:
                result.checkpoint = self.checkpoint_path
                self._print(f"checkpoint: {self.checkpoint_path}")
            if result.exit_code == 0 and self.live_eval is not None:
                self.live_eval.final_score(self.samples, lambda: shutdown.requested)
            if self.is_main:
                for line in milestone_lines(self.milestones):
                    self._print(line)
        finally:
            if self.live_eval is not None:
                self.live_eval.stop()
            self.pool.close()
            self.rundir.close(final_metrics(final, self.milestones))
        result.epochs_done, result.samples = epoch, self.samples
        result.elapsed = time.monotonic() - self._t0
        result.milestones = dict(self.milestones)
        if final is not None:
            result.test_loss, result.test_accuracy = final
        return result

    def _banner(self) -> str:
        cfg, n = self.cfg, self.data.train_images.shape[0]
        if not self.is_main:
            return (
                f"node {self.rank} of {self.nodes}: {cfg.workers} Hogwild! worker(s) on this "
                f"node's shards of {n} images; node 0 tests, logs and checkpoints"
            )
        on = f" on each of {self.nodes} nodes (torchrun)" if self.rounds is not None else ""
        return (
            f"training {cfg.model} ({self.flat.numel():,} parameters) with {cfg.workers} "
            f"Hogwild! worker(s){on}, {cfg.optimizer}, on {n} images; "
            f"run folder {self.rundir.path}"
        )

    def _train_epoch(self, epoch: int) -> tuple[bool, float]:
        """Run one generation of workers; False if stopped before all finished their shards.

        Across nodes, the epoch ends for all at the same averaging round (see
        :meth:`NodeRounds.epoch_over`), and a last exact round leaves every node the same
        model.
        """
        cfg = self.cfg
        plan = EpochPlan(
            epoch=epoch,
            shuffle_seed=cfg.seed * 1_000_003 + epoch,
            num_workers=cfg.workers,
            batch_size=cfg.batch_size,
            lr=epoch_lr(cfg, epoch),
            log_interval=cfg.log_interval,
            max_batches=cfg.max_batches_per_epoch,
            nhwc=cfg.channels_last,
            node_rank=self.rank,
            nodes=self.nodes,
        )
        self.group = WorkerGroup(
            train_worker,
            (
                self.model,
                self.optimizers,
                self.pool,
                self.data.train_images,
                self.data.train_labels,
                plan,
            ),
            num_workers=cfg.workers,
            seed=cfg.seed + 100_003 * (epoch + 1) + 1_000_003 * self.rank,
            num_threads=cfg.threads_per_worker,
            start_method=cfg.start_method,
            policy=self.policy,
            on_restart=self.supervisor.restarted,
        )
        self._epoch_samples, self._epoch = 0, epoch
        if self.rounds is not None:
            self.rounds.start_epoch()
        self.model.train()
        start = time.monotonic()
        self.supervisor.start(self.group)
        while not self._epoch_over():
            ready = self.supervisor.wait(timeout=0.25 if self.rounds is None else 0.05)
            if self.live_eval is not None:
                self.live_eval.poll(ready, self.samples)
            self._show_progress(start)
        self.supervisor.drain()
        train_time = time.monotonic() - start
        # Every shard done counts even if a stop request came in meanwhile: nothing is lost.
        completed = self.group.finished
        self._stop_workers()
        if self.rounds is not None:
            completed = self.rounds.last_round()
        return completed, train_time

    # -- alone or across nodes ---------------------------------------------------------
    def _stopping(self) -> bool:
        """Alone, a signal stops the run; across nodes, a stop all of them agreed on."""
        if self.rounds is not None:
            return self.rounds.stop_agreed
        return self.shutdown.requested

    def _epoch_over(self) -> bool:
        """Alone: all workers are done (or a stop). Across nodes: what the rounds say."""
        assert self.group is not None
        if self.rounds is None:
            return self.group.finished or self.shutdown.requested
        return self.rounds.epoch_over(self.group.finished)

    def _add_others_samples(self, n: int) -> None:
        self.samples += n
        self._epoch_samples += n

    def _target_reached(self, epoch: int, final: tuple[float, float] | None) -> bool:
        """Stop for ``--target-accuracy``? Only rank 0 tests, so across nodes its verdict
        goes to all in a blocking round (in which the others wait while rank 0 tests)."""
        cfg = self.cfg
        reached = (
            final is not None
            and cfg.target_accuracy is not None
            and final[1] >= cfg.target_accuracy
        )
        rounds = self.rounds
        if rounds is not None and epoch < cfg.epochs and not rounds.stop_agreed:
            reached = rounds.agree_on_target(reached)
        if reached:
            if self.is_main:
                self._print(f"reached --target-accuracy {cfg.target_accuracy}%: stopping")
            else:
                self._print(f"node 0 reached --target-accuracy {cfg.target_accuracy}%: stopping")
        return reached

    def _end_epoch(
        self, epoch: int, train_time: float, result: MnistResult
    ) -> tuple[float, float] | None:
        """Test, log and checkpoint (rank 0 alone; other nodes return None)."""
        cfg = self.cfg
        if not self.is_main:
            rate = self._epoch_samples / max(train_time, 1e-9)
            self._print(
                f"epoch {epoch}: {rate_text(rate)} samples/s on all nodes, {train_time:.1f} s "
                "(node 0 scores the test set)"
            )
            return None
        assert isinstance(self.rundir, RunDir)
        final, line, record = test_and_log(
            self.model,
            self.data.test_images,
            self.data.test_labels,
            cfg.channels_last,
            cfg,
            self.rundir,
            epoch,
            self._epoch_samples,
            train_time,
            self._t0,
            self.samples,
            self.milestones,
        )
        self._print(line)
        result.history.append(record)
        self._save_checkpoint(epoch, final)
        return final

    # -- telemetry -----------------------------------------------------------------------
    def _consume(self, view: dict[str, torch.Tensor]) -> None:
        n = int(view["samples"])
        if n == 0:
            return
        self.samples += n
        self._epoch_samples += n
        if self.rounds is not None:
            self.rounds.unsynced += n
        loss = float(view["loss_sum"]) / n
        self._loss_window = [*self._loss_window[-31:], (loss, n)]
        self.rundir.scalars(
            {"train/loss": loss, "train/accuracy": 100.0 * int(view["correct"]) / n},
            self.samples,
        )

    def _show_progress(self, start: float) -> None:
        if not self._loss_window:
            return
        loss = sum(v * n for v, n in self._loss_window) / sum(n for _, n in self._loss_window)
        rate = self._epoch_samples / max(time.monotonic() - start, 1e-9)
        # A whole epoch is every training image once (all nodes together), unless capped.
        per_epoch = None if self.cfg.max_batches_per_epoch else self.data.train_images.shape[0]
        self.progress.update(
            progress_line(self._epoch, self.cfg.epochs, self._epoch_samples, loss, rate, per_epoch)
        )

    # -- bookkeeping -------------------------------------------------------------------
    def _save_checkpoint(self, epoch: int, final: tuple[float, float] | None) -> Path | None:
        if not self.is_main:
            return None
        return save_run_checkpoint(
            self.checkpoint_path,
            self.cfg,
            self.model,
            [opt.state_dict() for opt in self.optimizers],
            epoch=epoch,
            samples=self.samples,
            elapsed=time.monotonic() - self._t0,
            final=final,
            milestones=self.milestones,
        )

    def _stop_workers(self) -> None:
        if self.supervisor is not None:
            self.supervisor.stop_workers(timeout=5.0)
        self.group = None

    def request_stop(self) -> None:
        """First Ctrl-C/SIGTERM: raise the stop flag now, so a signalled worker is not restarted."""
        if self.supervisor is not None:
            self.supervisor.request_stop()

    def kill_all(self) -> None:
        """Second Ctrl-C: kill every child at once."""
        if self.supervisor is not None:
            self.supervisor.kill_all()

    def _print(self, text: str) -> None:
        self.progress.print(text)


class _NoRunDir:
    """The run folder of nodes other than rank 0: they log nothing (rank 0 owns the run)."""

    path = None

    def scalars(self, values: dict[str, float], step: int) -> None:
        pass

    def close(self, final_metrics: dict[str, float] | None = None) -> None:
        pass


def train(cfg: MnistConfig, out: Any = None) -> MnistResult:
    """Run training with graceful Ctrl-C/SIGTERM handling; the programmatic entry point.

    ``out`` receives the console lines (default stdout). The caller's torch thread count
    is restored afterwards (the run itself keeps the main process at one thread).
    """
    if cfg.mode == "ddp":
        from hogwild.mnist.ddp import train_ddp

        return train_ddp(cfg, out)
    threads = torch.get_num_threads()
    try:
        trainer = MnistRun(cfg, out)
        try:
            with GracefulShutdown(
                on_force=trainer.kill_all, on_request=trainer.request_stop
            ) as shutdown:
                return trainer.run(shutdown)
        finally:
            trainer.close()
    finally:
        torch.set_num_threads(threads)
