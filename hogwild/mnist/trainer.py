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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from hogwild.console import Progress
from hogwild.distributed import launched_by_torchrun
from hogwild.errors import UsageError
from hogwild.evaluator import resolve_device
from hogwild.flat import flatten_parameters
from hogwild.mnist.checkpoints import check_output_paths, load_resume, run_checkpoint
from hogwild.mnist.config import PROG, MnistConfig, epoch_lr
from hogwild.mnist.counting import SampleCount
from hogwild.mnist.data import load_data
from hogwild.mnist.live_eval import LiveEvaluation
from hogwild.mnist.model import build_model
from hogwild.mnist.multinode import agree_on_start, check_identical
from hogwild.mnist.report import (
    EpochScore,
    MnistResult,
    final_metrics,
    milestone_lines,
    progress_line,
    rate_text,
    test_and_log,
    training_text,
)
from hogwild.mnist.worker import TELEMETRY, EpochPlan, make_optimizer, train_worker
from hogwild.pool import BufferPool
from hogwild.precision import check_amp
from hogwild.procs import resolve_start_method
from hogwild.run import ANOTHER_NODE, Generation, RunEnd, RunLoop, Workers
from hogwild.rundir import RunDir

log = logging.getLogger(__name__)


class MnistRun:
    """The main process: builds the shared model; one worker generation per epoch in the
    engine's :class:`~hogwild.run.RunLoop`, and between two, test, log and checkpoint."""

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
        self.data = load_data(cfg.data_dir, cfg.download, cfg.train_subset)

        self.model = build_model(cfg.model)
        self.flat = flatten_parameters(self.model).share_memory_()
        self.optimizers = [make_optimizer(cfg, self.flat) for _ in range(cfg.workers)]
        self.start_epoch, samples, self.elapsed0 = 0, 0, 0.0
        self.milestones: dict[float, tuple[float, int]] = {}
        if resume is not None:
            samples = self._restore(resume)

        self.live_eval: LiveEvaluation | None = None
        self.progress = Progress(stream=self.out)
        self._epoch, self._start = 0, 0.0
        self._loss_window: list[tuple[float, int]] = []
        self._t0 = 0.0
        self.final: EpochScore | None = None

        # Under torchrun: this process is one node; rank 0 alone tests, logs, checkpoints.
        self.loop = RunLoop(
            cfg,
            PROG,
            TELEMETRY,
            params=self.flat,
            counters=1,
            progress=self.progress,
            wait_timeout=0.05 if launched_by_torchrun() else 0.25,
        )
        self.rank, self.nodes = self.loop.rank, self.loop.nodes
        if self.loop.sync is not None:
            try:
                state = (self.start_epoch, samples, self.elapsed0, self.milestones)
                state = agree_on_start(cfg, self.rank, self.nodes, state)
                self.start_epoch, samples, self.elapsed0, self.milestones = state
            except BaseException:
                self.loop.close()
                raise
        self.epoch = self.start_epoch
        self.count = SampleCount(samples)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    # -- setup ---------------------------------------------------------------------
    def _validate(self) -> None:
        cfg = self.cfg
        cfg.start_method = resolve_start_method(cfg.start_method)
        check_amp(cfg.amp, "cpu", why_cpu="hogwild mode's workers train on the CPU")
        if cfg.eval_interval > 0:
            resolve_device(cfg.eval_device)  # fail now, not in the evaluator process
        check_output_paths(cfg)  # fail now, not after the data is read

    def _restore(self, ck: dict[str, Any]) -> int:
        """Load weights and every worker's optimizer state in place (shared storage kept);
        the samples trained so far."""
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
        self.elapsed0 = float(ck.get("elapsed", 0.0))
        self.milestones = {float(k): tuple(v) for k, v in ck.get("milestones", {}).items()}
        return int(ck.get("samples", 0))

    def close(self) -> None:
        """Leave the torchrun group, if this process joined one."""
        self.loop.close()

    # -- the run -----------------------------------------------------------------------
    def _open_run(self) -> None:
        """Run folder and checkpoint path: only once there is work to do."""
        cfg = self.cfg
        resume_dir = None
        if cfg.resume and (Path(cfg.resume).parent / "config.json").is_file():
            resume_dir = Path(cfg.resume).parent  # keep logging into the run being resumed
        if self.is_main and cfg.checkpoint:
            self.loop.checkpoint_path = Path(cfg.checkpoint)
        self.rundir = self.loop.open_run_dir("mnist", cfg, cfg.run_name, resume_dir=resume_dir)
        self.checkpoint_path = self.loop.checkpoint_path

    def run(self) -> MnistResult:
        """Train from ``start_epoch`` to ``cfg.epochs`` (or a stop); checkpoint; report."""
        cfg = self.cfg
        if self.start_epoch >= cfg.epochs:
            self._print(
                f"{cfg.resume} already holds {self.start_epoch} epochs (--epochs {cfg.epochs}): "
                "nothing to train"
            )
            return MnistResult(0, None, None, self.start_epoch, self.count.total)
        self._open_run()
        self.result = MnistResult(0, self.rundir.path, None, self.start_epoch, self.count.total)
        self._print(self._banner())
        self._t0 = time.monotonic() - self.elapsed0
        self.loop.run(self)
        return self.result

    def _banner(self) -> str:
        cfg, n = self.cfg, self.data.train_images.shape[0]
        if not self.is_main:
            return (
                f"node {self.rank} of {self.nodes}: {cfg.workers} Hogwild! worker(s) on this "
                f"node's shards of {n} images; node 0 tests, logs and checkpoints"
            )
        on = f" on each of {self.nodes} nodes (torchrun)" if self.nodes > 1 else ""
        return (
            f"training {cfg.model} ({self.flat.numel():,} parameters) with {cfg.workers} "
            f"Hogwild! worker(s){on}, {training_text(cfg)}, on {n} images; "
            f"run folder {self.rundir.path}"
        )

    def next_generation(self, last: Generation | None, telemetry: BufferPool) -> Workers | None:
        """After an epoch's generation: test, log, checkpoint; then the next epoch's.

        An epoch stopped before every worker (on every node) finished its shard does not
        count: the final checkpoint holds its progress, and a resume redoes it. Across
        nodes, the epoch ends for all at the same round, and a last exact round leaves
        every node the same model (the engine's rounds).
        """
        cfg, loop = self.cfg, self.loop
        if last is None and cfg.eval_interval > 0 and self.is_main:
            self.live_eval = LiveEvaluation(cfg, self.flat, self.rundir, self.milestones, self._t0)
            loop.watch(self.live_eval)
        if last is not None and last.completed:
            self.epoch += 1
            self.final = self._end_epoch(self.epoch, last.seconds)
            if self._target_reached(self.epoch, self.final):
                self._last()
                return None
        if loop.reason == ANOTHER_NODE:
            self._print("another node was asked to stop: stopping")
        if (last is not None and not last.completed) or self.epoch >= cfg.epochs or loop.stopping:
            self._last()
            return None
        return self._generation(self.epoch, telemetry)

    def _last(self) -> None:
        if self.loop.sync is not None:
            check_identical(self.flat, self.rank, self.nodes, self._print)

    def _generation(self, epoch: int, telemetry: BufferPool) -> Workers:
        """One generation of workers: each trains on its shard of this epoch's shuffle."""
        cfg = self.cfg
        plan = EpochPlan(
            epoch=epoch,
            shuffle_seed=cfg.seed * 1_000_003 + epoch,
            num_workers=cfg.workers,
            batch_size=cfg.batch_size,
            lr=epoch_lr(cfg, epoch),
            grad_accum=cfg.grad_accum,
            amp=cfg.amp,
            log_interval=cfg.log_interval,
            max_batches=cfg.max_batches_per_epoch,
            nhwc=cfg.channels_last,
            node_rank=self.rank,
            nodes=self.nodes,
        )
        workers = Workers(
            train_worker,
            (
                self.model,
                self.optimizers,
                telemetry,
                self.data.train_images,
                self.data.train_labels,
                plan,
            ),
            seed=cfg.seed + 100_003 * (epoch + 1) + 1_000_003 * self.rank,
        )
        self.count.new_epoch()
        self._epoch = epoch
        self.model.train()
        self._start = time.monotonic()
        return workers

    def tick(self, ready: Sequence[Any], now: float) -> None:
        if self.live_eval is not None:
            self.live_eval.poll(ready, self.count.total)
        self._show_progress(self._start)

    # -- across nodes: counters [samples trained since the last round] -------------------
    def round_counters(self) -> list[float]:
        return [float(self.count.start_round())]

    def round_gather(self) -> None:
        return None

    def on_round(self, totals: torch.Tensor, gathered: Any) -> None:
        """Add the samples the other nodes trained."""
        (all_nodes_samples,) = totals.tolist()  # the one counter of round_counters()
        self.count.end_round(int(all_nodes_samples))

    def _target_reached(self, epoch: int, final: EpochScore | None) -> bool:
        """Stop for ``--target-accuracy``? Only rank 0 tests, so across nodes its verdict
        goes to all in a blocking round (in which the others wait while rank 0 tests)."""
        cfg = self.cfg
        reached = (
            final is not None
            and cfg.target_accuracy is not None
            and final.accuracy >= cfg.target_accuracy
        )
        if self.loop.sync is not None and epoch < cfg.epochs and not self.loop.stopping:
            reached = self.loop.vote(reached)
        if reached:
            if self.is_main:
                self._print(f"reached --target-accuracy {cfg.target_accuracy}%: stopping")
            else:
                self._print(f"node 0 reached --target-accuracy {cfg.target_accuracy}%: stopping")
        return reached

    def _end_epoch(self, epoch: int, train_time: float) -> EpochScore | None:
        """Test, log and checkpoint (rank 0 alone; other nodes return None)."""
        cfg = self.cfg
        if not self.is_main:
            rate = self.count.epoch / max(train_time, 1e-9)
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
            self.count.epoch,
            train_time,
            self._t0,
            self.count.total,
            self.milestones,
        )
        self._print(line)
        self.result.history.append(record)
        self.final = final
        self.loop.save_checkpoint()
        return final

    def finish(self, end: RunEnd) -> dict[str, float]:
        """Workers stopped and the final checkpoint written: the final score, the report."""
        result = self.result
        result.exit_code = end.exit_code
        if self.is_main:
            result.checkpoint = self.checkpoint_path
            self._print(f"checkpoint: {self.checkpoint_path}")
        if end.exit_code == 0 and self.live_eval is not None:
            self.live_eval.final_score(self.count.total, lambda: self.loop.shutdown.requested)
        if self.is_main:
            for line in milestone_lines(self.milestones):
                self._print(line)
        result.epochs_done, result.samples = self.epoch, self.count.total
        result.elapsed = time.monotonic() - self._t0
        result.milestones = dict(self.milestones)
        if self.final is not None:
            result.test_loss, result.test_accuracy = self.final.loss, self.final.accuracy
        return final_metrics(self.final, self.milestones)

    # -- telemetry -----------------------------------------------------------------------
    def on_message(self, view: dict[str, torch.Tensor]) -> None:
        n = int(view["samples"])
        if n == 0:
            return
        self.count.add(n)
        loss = float(view["loss_sum"]) / n
        self._loss_window = [*self._loss_window[-31:], (loss, n)]
        self.rundir.scalars(
            {"train/loss": loss, "train/accuracy": 100.0 * int(view["correct"]) / n},
            self.count.total,
        )

    def _show_progress(self, start: float) -> None:
        if not self._loss_window:
            return
        loss = sum(v * n for v, n in self._loss_window) / sum(n for _, n in self._loss_window)
        rate = self.count.epoch / max(time.monotonic() - start, 1e-9)
        # A whole epoch is every training image once (all nodes together), unless capped.
        per_epoch = None if self.cfg.max_batches_per_epoch else self.data.train_images.shape[0]
        self.progress.update(
            progress_line(self._epoch, self.cfg.epochs, self.count.epoch, loss, rate, per_epoch)
        )

    # -- bookkeeping -------------------------------------------------------------------
    def checkpoint_state(self) -> dict[str, Any]:
        """Epochs done and the weights; stopped mid-epoch, the weights hold the partial
        epoch's progress, the epoch count does not, so a resume redoes that epoch."""
        return run_checkpoint(
            self.cfg,
            self.model,
            [opt.state_dict() for opt in self.optimizers],
            epoch=self.epoch,
            samples=self.count.total,
            elapsed=time.monotonic() - self._t0,
            final=self.final,
            milestones=self.milestones,
        )

    def _print(self, text: str) -> None:
        self.progress.print(text)


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
            return trainer.run()
        finally:
            trainer.close()
    finally:
        torch.set_num_threads(threads)
