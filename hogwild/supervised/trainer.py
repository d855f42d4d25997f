"""The main process of the hogwild strategy: one worker generation per epoch, then score,
log and checkpoint.

One epoch is one generation of N workers: each trains on its shard of that epoch's
shuffle and exits. Meanwhile the main process only reads telemetry and watches the
workers (a dead one is restarted and redoes its shard with a fresh seed). When all are
done, nothing trains: the main process merges the buffers if asked, scores the
validation set, logs, checkpoints and starts the next generation. A fork per epoch costs
milliseconds; in exchange there is no cross-process barrier to get wrong and every
checkpoint is of a quiescent model. Under ``torchrun`` each node runs its own workers on
its own shards and the nodes average their parameters every ``--sync-every`` seconds
(:class:`hogwild.distributed.NodeSync`); rank 0 alone scores, logs and checkpoints.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from hogwild.console import Progress
from hogwild.distributed import launched_by_torchrun
from hogwild.errors import UsageError
from hogwild.evaluator import resolve_device
from hogwild.pool import BufferPool
from hogwild.precision import check_amp
from hogwild.procs import resolve_start_method
from hogwild.run import ANOTHER_NODE, Generation, RunEnd, RunLoop, Workers
from hogwild.sharing import BufferSlots, SharedModel
from hogwild.supervised.callbacks import Callback
from hogwild.supervised.checkpoints import checkpoint, keep_best, load_resume, resumed_run_dir
from hogwild.supervised.config import FitConfig, epoch_lr
from hogwild.supervised.devices import hogwild_device
from hogwild.supervised.epochs import EpochBook
from hogwild.supervised.live_eval import LiveEvaluation, check_live_evaluation
from hogwild.supervised.multinode import agree_on_start, check_identical
from hogwild.supervised.optimizers import make_optimizers
from hogwild.supervised.position import (
    EpochPosition,
    ShardPositions,
    resume_position,
    shape_of,
    shard_samples,
)
from hogwild.supervised.report import App, FitResult, evaluate, progress_line, training_text
from hogwild.supervised.task import Task, one_line
from hogwild.supervised.worker import TELEMETRY, EpochPlan, train_worker


class SampleCount:
    """The run's samples (every node's, as of the last sync round, plus this node's since),
    the current epoch's, and this node's not yet sent to the others."""

    def __init__(self, start: int = 0) -> None:
        self.total, self.epoch = start, 0
        self.loss_sum = 0.0  # this node's, this epoch
        self._unsent = self._in_round = 0

    def add(self, n: int, loss_sum: float) -> None:
        self.total += n
        self.epoch += n
        self._unsent += n
        self.loss_sum += loss_sum

    def new_epoch(self) -> None:
        self.epoch, self.loss_sum = 0, 0.0

    def start_round(self) -> int:
        self._in_round, self._unsent = self._unsent, 0
        return self._in_round

    def end_round(self, all_nodes: int) -> None:
        others = all_nodes - self._in_round
        self._in_round = 0
        self.total += others
        self.epoch += others


def check_hogwild(cfg: FitConfig) -> None:
    """What hogwild refuses before anything is read (:func:`~hogwild.supervised.api.preflight`)."""
    device = hogwild_device(cfg)
    if device.type == "cuda":
        if launched_by_torchrun():
            raise UsageError(
                "--device cuda shares one machine's GPU: across machines use --strategy ddp"
            )
        if cfg.amp == "fp16":
            raise UsageError(
                "--amp fp16 needs a GradScaler, which lock-free steps do not have; use bf16"
            )
        cfg.start_method = "spawn"  # a CUDA context does not survive fork
    cfg.start_method = resolve_start_method(cfg.start_method)
    check_amp(cfg.amp, device.type, why_cpu="Hogwild! workers train on the CPU")
    if cfg.eval_interval > 0:
        resolve_device(cfg.eval_device)  # fail now, not in the evaluator process


class HogwildFit:
    """The main process (see the module): builds the shared model, one worker generation
    per epoch in the engine's :class:`~hogwild.run.RunLoop`, and between two, score, log
    and checkpoint."""

    def __init__(
        self,
        cfg: FitConfig,
        task: Task,
        app: App,
        callbacks: Sequence[Callback] = (),
        out: Any = None,
    ) -> None:
        # One thread here, before any tensor work: GNU OpenMP does not survive fork, so a
        # parent that ever ran a multi-threaded op would hang workers using more than one.
        torch.set_num_threads(1)
        self.cfg, self.task, self.app = cfg, task, app
        self.progress = Progress(stream=out or sys.stdout)
        self.book = EpochBook(cfg, task, app, callbacks)
        resume = load_resume(cfg, app) if cfg.resume else None

        self.device = hogwild_device(cfg)
        self.shared = SharedModel(task.model.to(self.device), cfg.buffers)
        if launched_by_torchrun() and len(self.shared.groups) > 1:
            raise UsageError(
                "under torchrun the nodes average one parameter vector: give every "
                "trainable parameter one dtype"
            )
        self.optimizers = make_optimizers(cfg, self.shared, cfg.workers)
        if cfg.eval_interval > 0:
            check_live_evaluation(self.shared, task.val is not None)
        self.buffer_slots = (
            BufferSlots(task.model, cfg.workers) if cfg.buffers == "average" else None
        )
        self.positions = ShardPositions(cfg.workers)
        self.start_epoch, samples, self.elapsed0 = 0, 0, 0.0
        self.resume_at: EpochPosition | None = None
        if resume is not None:
            samples = self._restore(resume)
        self._loss_window: list[tuple[float, int]] = []
        self._epoch, self._start, self._t0 = 0, 0.0, 0.0
        self.loop = RunLoop(
            cfg,
            app.prog,
            TELEMETRY,
            params=self.shared.primary.flat,
            counters=1,
            progress=self.progress,
            wait_timeout=0.05 if launched_by_torchrun() else 0.25,
        )
        self.rank, self.nodes = self.loop.rank, self.loop.nodes
        if self.loop.sync is not None:
            try:
                state = (self.start_epoch, samples, self.elapsed0, self.book.state())
                state = agree_on_start(cfg, self.rank, self.nodes, state, app.same_on_every_node)
                self.start_epoch, samples, self.elapsed0, book = state
                self.book.load(book)
            except BaseException:
                self.loop.close()
                raise
        if resume is not None and self.nodes == 1:
            self.resume_at = resume_position(resume, cfg, len(task.train), self._print)  # type: ignore[arg-type]
        self.live_eval: LiveEvaluation | None = None
        self.epoch = self.start_epoch
        self.count = SampleCount(samples)
        self.best_path: Path | None = None
        self._in_epoch = False  # a generation started and not completed
        self._seconds0 = 0.0  # of the current epoch, before a resume

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def _restore(self, ck: dict[str, Any]) -> int:
        """Weights and every optimizer's state, in place (shared storage kept)."""
        try:
            self.task.model.load_state_dict(ck["model"])
            dense, rows = ck["optimizers"]["dense"], ck["optimizers"]["rows"]
            for rank, opts in enumerate(self.optimizers.dense):
                # Another worker count is allowed: ranks reuse the saved states round-robin.
                for opt, state in zip(opts, dense[rank % len(dense)], strict=True):
                    opt.load_state_dict(state)
            for name, row_opt in self.optimizers.rows.items():
                row_opt.load_state_dict(rows[name])
        except (RuntimeError, ValueError, KeyError, TypeError, ZeroDivisionError) as e:
            raise UsageError(
                f"{self.cfg.resume}: does not fit this model ({one_line(e)})"
            ) from None
        self.start_epoch = int(ck["epoch"])
        self.elapsed0 = float(ck.get("elapsed", 0.0))
        self.book.load(ck)
        return int(ck.get("samples", 0))

    # -- the run -----------------------------------------------------------------------
    def run(self) -> FitResult:
        cfg = self.cfg
        if self.start_epoch >= cfg.epochs:
            self._print(
                f"{cfg.resume} already holds {self.start_epoch} epochs (--epochs {cfg.epochs}): "
                "nothing to train"
            )
            return self._result(0, None)
        if self.is_main and cfg.checkpoint:
            self.loop.checkpoint_path = Path(cfg.checkpoint)
        rundir = self.loop.open_run_dir(self.app.name, cfg, cfg.run_name, resumed_run_dir(cfg))
        self.rundir = rundir
        self._print(self._banner())
        self._t0 = time.monotonic() - self.elapsed0
        self.loop.run(self)
        return self.result

    def _banner(self) -> str:
        cfg, n = self.cfg, len(self.task.train)  # type: ignore[arg-type]
        if not self.is_main:
            return (
                f"node {self.rank} of {self.nodes}: {cfg.workers} Hogwild! worker(s) on this "
                f"node's shards of {n:,} samples; node 0 scores, logs and checkpoints"
            )
        on = f" on each of {self.nodes} nodes (torchrun)" if self.nodes > 1 else ""
        tables = sum(1 for _ in self.shared.tables)
        sparse = f", {tables} sparse table(s)" if tables else ""
        return (
            f"training {type(self.task.model).__name__} ({self.shared.numel:,} parameters"
            f"{sparse}) with {cfg.workers} Hogwild! worker(s){on}, {training_text(cfg)}, on "
            f"{n:,} samples; run folder {self.rundir.path}"
        )

    def next_generation(self, last: Generation | None, telemetry: BufferPool) -> Workers | None:
        """After an epoch's generation: score, log, checkpoint; then the next epoch's.
        An epoch stopped before every worker finished does not count; its checkpoint says
        where each worker was (a resume goes on from there)."""
        cfg, loop = self.cfg, self.loop
        if last is None and cfg.eval_interval > 0 and self.is_main:
            self.live_eval = LiveEvaluation(
                cfg, self.task, self.shared, self.book, self.rundir, self._t0
            )
            loop.watch(self.live_eval)
        if last is not None and last.completed:
            self.epoch += 1
            self._in_epoch = False
            if self._end_epoch(self.epoch, self._seconds0 + last.seconds):
                self._last()
                return None
        if loop.reason == ANOTHER_NODE:
            self._print("another node was asked to stop: stopping")
        if (last is not None and not last.completed) or self.epoch >= cfg.epochs or loop.stopping:
            self._last()
            return None
        return self._generation(self.epoch)

    def _last(self) -> None:
        """No more generations: under torchrun, check all nodes hold the same weights."""
        if self.loop.sync is not None:
            check_identical(self.shared.primary.flat, self.rank, self.nodes, self._print)

    def _generation(self, epoch: int) -> Workers:
        cfg = self.cfg
        plan = EpochPlan(
            epoch=epoch,
            shuffle_seed=cfg.seed * 1_000_003 + epoch,
            num_workers=cfg.workers,
            batch_size=cfg.batch_size,
            lr=epoch_lr(cfg, epoch),
            table_lr=epoch_lr(cfg, epoch, table=True),
            grad_accum=cfg.grad_accum,
            amp=cfg.amp,
            log_interval=cfg.log_interval,
            max_batches=cfg.max_batches_per_epoch,
            loader_workers=cfg.loader_workers,
            node_rank=self.rank,
            nodes=self.nodes,
            resume=self._take_resume(epoch),
            device=str(self.device),
        )
        workers = Workers(
            train_worker,
            (
                self.shared,
                self.optimizers,
                self.loop.pool,
                self.task.train,
                self.task.objective,
                plan,
                self.buffer_slots,
                self.positions,
            ),
            seed=cfg.seed + 100_003 * (epoch + 1) + 1_000_003 * self.rank,
        )
        self._epoch, self._in_epoch = epoch, True
        self.task.model.train()
        self._start = time.monotonic() - self._seconds0
        return workers

    def _take_resume(self, epoch: int) -> EpochPosition | None:
        """The stopped run's position if ``epoch`` is the one it stopped in (once); the
        epoch's count then starts from what it had done."""
        position, self.resume_at = self.resume_at, None
        self.count.new_epoch()
        self._seconds0 = 0.0
        if position is None or position.epoch != epoch:
            return None
        self.count.epoch, self.count.loss_sum = position.samples, position.loss_sum
        self._seconds0 = position.seconds
        self._print(f"resuming epoch {epoch + 1} after its first {position.samples:,} samples")
        return position

    def _position(self) -> EpochPosition | None:
        """Where this epoch's workers are, for a checkpoint cut inside it (one node only:
        under torchrun rank 0 knows only its own workers)."""
        if not self._in_epoch or self.nodes > 1:
            return None
        cfg, n = self.cfg, len(self.task.train)  # type: ignore[arg-type]
        done = self.positions.done()
        return EpochPosition(
            epoch=self._epoch,
            done=done,
            samples=shard_samples(n, cfg.workers, done, cfg.batch_size),
            loss_sum=self.count.loss_sum,
            seconds=time.monotonic() - self._start,
            shape=shape_of(cfg, n),
            seeds=self.positions.seeds(),
        )

    def tick(self, ready: Sequence[Any], now: float) -> None:
        if self.live_eval is not None:
            self.live_eval.poll(ready, self.count.total)
        self._show_progress()

    def round_counters(self) -> list[float]:
        return [float(self.count.start_round())]

    def round_gather(self) -> None:
        return None

    def on_round(self, totals: torch.Tensor, gathered: Any) -> None:
        (all_nodes_samples,) = totals.tolist()  # the one counter of round_counters()
        self.count.end_round(int(all_nodes_samples))

    def _end_epoch(self, epoch: int, train_time: float) -> bool:
        """Score, log, checkpoint (rank 0); True to stop: a target, a callback."""
        cfg, task = self.cfg, self.task
        if self.buffer_slots is not None:
            self.buffer_slots.merge(task.model)
        stop = False
        if self.is_main:
            if task.val is not None:
                metrics = evaluate(
                    task.model,
                    task.val,
                    task.objective,
                    task.metrics,
                    cfg.val_batch_size,
                    self.device,
                )
            else:
                metrics = {"loss": self.count.loss_sum / max(self.count.epoch, 1)}
            line, improved = self.book.end(
                epoch,
                metrics,
                self.rundir,
                samples=self.count.total,
                epoch_samples=self.count.epoch,
                train_time=train_time,
                elapsed=time.monotonic() - self._t0,
            )
            self._print(line)
            saved = self.loop.save_checkpoint()
            if improved:
                self.best_path = keep_best(saved, self.app.prog) or self.best_path
            reason = self.book.stop_reason(epoch)
            if reason is not None:
                self._print(reason)
                stop = True
        if self.loop.sync is not None and epoch < cfg.epochs and not self.loop.stopping:
            stop = self.loop.vote(stop)
        return stop

    def finish(self, end: RunEnd) -> dict[str, float]:
        self.result = self._result(
            end.exit_code, self.loop.checkpoint_path if self.is_main else None
        )
        if end.exit_code == 0 and self.live_eval is not None:
            self.live_eval.final_score(self.count.total, lambda: self.loop.shutdown.requested)
        if self.is_main:
            self._print(f"checkpoint: {self.loop.checkpoint_path}")
            for line in self.book.closing_lines():
                self._print(line)
        return self.book.summary()

    def _result(self, exit_code: int, ck: Path | None) -> FitResult:
        return FitResult(
            exit_code=exit_code,
            run_dir=getattr(getattr(self, "rundir", None), "path", None),
            checkpoint=ck,
            epochs_done=self.epoch,
            samples=self.count.total,
            model=self.task.model,
            metrics=dict(self.book.metrics),
            history=list(self.book.history),
            best=self.book.monitor.state(),
            best_checkpoint=self.best_path,
            elapsed=time.monotonic() - self._t0 if self._t0 else self.elapsed0,
            milestones=dict(self.book.milestones),
        )

    # -- telemetry -----------------------------------------------------------------------
    def on_message(self, view: dict[str, torch.Tensor]) -> None:
        n = int(view["samples"])
        if n == 0:
            return
        loss_sum = float(view["loss_sum"])
        self.count.add(n, loss_sum)
        self._loss_window = [*self._loss_window[-31:], (loss_sum / n, n)]
        self.rundir.scalars({"train/loss": loss_sum / n}, self.count.total)

    def _show_progress(self) -> None:
        if not self._loss_window:
            return
        window = self._loss_window
        loss = sum(v * n for v, n in window) / sum(n for _, n in window)
        rate = self.count.epoch / max(time.monotonic() - self._start, 1e-9)
        per_epoch = None if self.cfg.max_batches_per_epoch else len(self.task.train)  # type: ignore[arg-type]
        self.progress.update(
            progress_line(self._epoch, self.cfg.epochs, self.count.epoch, loss, rate, per_epoch)
        )

    def checkpoint_state(self) -> dict[str, Any]:
        """Epochs done, the weights, the optimizers; cut inside an epoch, also where each
        worker was in its shard (:mod:`~hogwild.supervised.position`)."""
        opts = self.optimizers
        position = self._position()
        samples = self.count.total
        if position is not None:  # the telemetry not yet sent is in the weights: count it
            samples += position.samples - self.count.epoch
        return checkpoint(
            self.app,
            self.cfg,
            self.task.model,
            {
                "dense": [[o.state_dict() for o in per_worker] for per_worker in opts.dense],
                "rows": {name: o.state_dict() for name, o in opts.rows.items()},
            },
            self.book.state(),
            epoch=self.epoch,
            samples=samples,
            elapsed=time.monotonic() - self._t0,
            position=position,
        )

    def close(self) -> None:
        self.loop.close()
        self.task.model.cpu()  # what fit() returns: the trained module, on the CPU

    def _print(self, text: str) -> None:
        self.progress.print(text)
