"""One ``--mode ddp`` rank, in its own spawned process: synchronous steps, rank 0 reports.

Every rank trains the same model wrapped in ``DistributedDataParallel`` on its
``DistributedSampler`` shard and all-reduces telemetry and a stop flag every
``--log-interval`` batches; rank 0 alone tests, writes TensorBoard, checkpoints and sends
its console lines to the parent (:mod:`hogwild.mnist.ddp`).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import signal
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import Dataset, DistributedSampler

from hogwild.mnist.checkpoints import save_run_checkpoint
from hogwild.mnist.config import MnistConfig, epoch_lr
from hogwild.mnist.data import MnistData
from hogwild.mnist.model import build_model, channels_last
from hogwild.mnist.report import (
    EpochScore,
    MnistResult,
    final_metrics,
    milestone_lines,
    progress_line,
    test_and_log,
    training_text,
)
from hogwild.mnist.steps import StepStats, backward_micro_batches, group_steps
from hogwild.precision import Precision
from hogwild.procs import SharedFlag, die_with_parent
from hogwild.rundir import RunDir


def make_torch_optimizer(cfg: MnistConfig, params: Iterable[torch.nn.Parameter]):
    """The standard optimizer that ``--optimizer`` names, with the same hyperparameters."""
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.lr)
    return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum)


def ddp_step(
    model: DistributedDataParallel,
    optimizer: torch.optim.Optimizer,
    micro: list[tuple[torch.Tensor, torch.Tensor]],
    precision: Precision,
) -> StepStats:
    """One synchronous step: all but the last micro-batch under ``no_sync``, so the ranks
    all-reduce their gradients once per step, however many micro-batches it has."""
    optimizer.zero_grad(set_to_none=True)
    stats = backward_micro_batches(model, micro, precision, no_sync=model.no_sync)
    precision.step(optimizer)
    return stats


def use_cuda(world: int) -> bool:
    """NCCL and one GPU per rank when there are enough GPUs; otherwise gloo on the CPU."""
    return torch.cuda.is_available() and torch.cuda.device_count() >= world


def rank_main(
    rank: int,
    cfg: MnistConfig,
    data: MnistData,
    port: int,
    state: dict[str, Any] | None,
    stop: SharedFlag,
    messages: Any,
    parent_pid: int,
) -> None:
    """One rank, in its own spawned process."""
    die_with_parent(parent_pid)  # SIGKILL, not spawn's SIGINT (ignored below), if it dies
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent: it sets `stop`
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    torch.set_num_threads(cfg.threads_per_worker)
    if use_cuda(cfg.workers):
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=cfg.workers,
        timeout=datetime.timedelta(seconds=cfg.dist_timeout),
    )
    try:
        _Rank(rank, cfg, data, state, stop, messages, device, backend).run()
        # Leave together: no rank closes its connections while rank 0 still tests or
        # writes its checkpoint (a failure skips this: the exception goes to the parent).
        dist.barrier()
    finally:
        dist.destroy_process_group()
    # DistributedDataParallel keeps the gloo process group, and its C++ threads, alive past
    # destroy_process_group (they are still running here); an interpreter that tears down
    # around them can abort ("terminate called without an active exception", SIGABRT).
    # Everything is saved and sent: leave without that teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


#: The slots of each rank's training window, summed over the ranks every --log-interval
#: batches: the summed train loss, the correct predictions, the samples trained and the
#: ranks asking to stop (each rank's own vote is 0 or 1).
LOSS_SUM, CORRECT, SEEN, STOP_VOTES = WINDOW_SLOTS = range(4)


class _Rank:
    def __init__(
        self,
        rank: int,
        cfg: MnistConfig,
        data: MnistData,
        state: dict[str, Any] | None,
        stop: SharedFlag,
        messages: Any,
        device: torch.device,
        backend: str,
    ) -> None:
        self.rank, self.cfg, self.data, self.stop = rank, cfg, data, stop
        self.messages, self.device, self.backend = messages, device, backend
        self.is_main = rank == 0
        torch.manual_seed(cfg.seed)
        self.nhwc = cfg.channels_last and device.type == "cpu"
        model = build_model(cfg.model).to(device)
        if state is not None:
            model.load_state_dict(state["model"])
        if self.nhwc:
            # Channels-last weights too, so that their gradients have the layout of DDP's
            # buckets (it warns otherwise); as fast as hogwild mode's NCHW weights here.
            # torch's own overloads of Module.to leave out its memory_format argument.
            model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        # DDP broadcasts rank 0's weights at construction, so all ranks start alike.
        self.model = DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
        self.optimizer = make_torch_optimizer(cfg, self.model.parameters())
        self.precision = Precision(cfg.amp, device.type)
        if state is not None:
            self.optimizer.load_state_dict(state["optimizer"])
            if state.get("scaler") and self.precision.scaler is not None:
                self.precision.scaler.load_state_dict(state["scaler"])
        self.sampler: DistributedSampler[int] = DistributedSampler(
            cast("Dataset[int]", range(data.train_images.shape[0])),  # only its len() is read
            num_replicas=cfg.workers,
            rank=rank,
            shuffle=True,
            seed=cfg.seed,
        )
        self.start_epoch = state["epoch"] if state else 0
        self.samples = state["samples"] if state else 0
        self.elapsed0 = state["elapsed"] if state else 0.0
        self.milestones: dict[float, tuple[float, int]] = dict(state["milestones"]) if state else {}
        self.history: list[dict[str, float]] = []
        self._t0 = self._last_progress = 0.0
        self.rundir: RunDir | None = None
        if self.is_main:
            run_dir = state["run_dir"] if state else None
            self.rundir = RunDir(cfg.logdir, "mnist-ddp", cfg, cfg.run_name, resume_dir=run_dir)
            self.checkpoint_path = Path(cfg.checkpoint or self.rundir.path / "checkpoint.pt")
            self.test_x = data.test_images.to(device)
            self.test_y = data.test_labels.to(device)

    def _print(self, text: str) -> None:
        if self.is_main:
            self.messages.put(("print", text))

    # -- the run -----------------------------------------------------------------------
    def run(self) -> None:
        cfg = self.cfg
        self._print(
            f"training {cfg.model} ({sum(p.numel() for p in self.model.parameters()):,} "
            f"parameters) with {cfg.workers} DDP rank(s) ({self.backend}), {training_text(cfg)}, "
            f"on {self.data.train_images.shape[0]} images; run folder "
            f"{self.rundir.path if self.rundir else '-'}"
        )
        self._t0 = time.monotonic() - self.elapsed0
        epoch, final, saved, stopped = self.start_epoch, None, True, False
        try:
            while epoch < cfg.epochs:
                saved = False
                completed, train_time, epoch_samples = self._train_epoch(epoch)
                if not completed:
                    stopped = True
                    break
                epoch += 1
                if self.is_main:
                    final = self._end_epoch(epoch, train_time, epoch_samples)
                saved = True
                if epoch < cfg.epochs and self._agree_to_stop(final):
                    stopped = self.stop.is_set()
                    break
        except (RuntimeError, dist.DistBackendError):
            # A peer died or timed out: the weights are those of the last step all ranks
            # completed, so rank 0 still leaves a checkpoint to resume from.
            if self.is_main and not saved:
                with contextlib.suppress(Exception):
                    self._save_checkpoint(epoch, final)
            raise
        finally:
            if self.rundir is not None:
                self.rundir.close(final_metrics(final, self.milestones))
        if not self.is_main:
            return
        if not saved:
            # Stopped mid-epoch: as in hogwild mode, a resume redoes that epoch.
            self._save_checkpoint(epoch, final)
        self._print(f"checkpoint: {self.checkpoint_path}")
        for line in milestone_lines(self.milestones):
            self._print(line)
        result = MnistResult(
            exit_code=143 if stopped else 0,  # the parent puts its own signal's code
            run_dir=self.rundir.path if self.rundir else None,
            checkpoint=self.checkpoint_path,
            epochs_done=epoch,
            samples=self.samples,
            test_accuracy=None if final is None else final.accuracy,
            test_loss=None if final is None else final.loss,
            elapsed=time.monotonic() - self._t0,
            milestones=dict(self.milestones),
            history=self.history,
        )
        self.messages.put(("result", result))

    def _train_epoch(self, epoch: int) -> tuple[bool, float, int]:
        """One epoch of synchronous steps; False if the ranks agreed to stop before its end."""
        cfg, device = self.cfg, self.device
        for group in self.optimizer.param_groups:
            group["lr"] = epoch_lr(cfg, epoch)
        self.sampler.set_epoch(epoch)
        order = torch.tensor(list(self.sampler), dtype=torch.int64)
        batches = list(torch.split(order, cfg.batch_size))
        if cfg.max_batches_per_epoch is not None:
            batches = batches[: cfg.max_batches_per_epoch]
        steps = group_steps(batches, cfg.grad_accum)
        images, labels = self.data.train_images, self.data.train_labels
        # All-reduced every --log-interval steps; its slots are named above the class.
        window = torch.zeros(len(WINDOW_SLOTS), dtype=torch.float64, device=device)
        epoch_samples = 0
        self.model.train()
        start = time.monotonic()
        for i, group in enumerate(steps, 1):
            micro = []
            for idx in group:
                x = images.index_select(0, idx).to(device, non_blocking=True)
                y = labels.index_select(0, idx).to(device, non_blocking=True)
                micro.append((channels_last(x) if self.nhwc else x, y))
            stats = ddp_step(self.model, self.optimizer, micro, self.precision)
            window[LOSS_SUM] += stats.loss_sum
            window[CORRECT] += stats.correct
            window[SEEN] += stats.samples
            if i % cfg.log_interval == 0 or i == len(steps):
                window[STOP_VOTES] = float(self.stop.is_set())
                dist.all_reduce(window)
                loss_sum, correct, n, stop = window.tolist()  # in slot order
                window.zero_()
                self.samples += int(n)
                epoch_samples += int(n)
                if self.rundir is not None:
                    self.rundir.scalars(
                        {"train/loss": loss_sum / n, "train/accuracy": 100.0 * correct / n},
                        self.samples,
                    )
                    self._progress(epoch, epoch_samples, loss_sum / n, start)
                if stop > 0:
                    return False, time.monotonic() - start, epoch_samples
        return True, time.monotonic() - start, epoch_samples

    def _progress(self, epoch: int, samples: int, loss: float, start: float) -> None:
        now = time.monotonic()
        if now - self._last_progress < 0.5:
            return
        self._last_progress = now
        rate = samples / max(now - start, 1e-9)
        self.messages.put(("progress", progress_line(epoch, self.cfg.epochs, samples, loss, rate)))

    def _agree_to_stop(self, final: EpochScore | None) -> bool:
        """Between epochs: rank 0's verdict (target accuracy reached, or a stop request)."""
        target = self.cfg.target_accuracy
        reached = final is not None and target is not None and final.accuracy >= target
        verdict = torch.tensor(
            [2.0 if reached else 1.0 if self.stop.is_set() else 0.0], device=self.device
        )
        dist.broadcast(verdict, src=0)
        if verdict.item() == 2.0:
            self._print(f"reached --target-accuracy {target}%: stopping")
        return verdict.item() > 0

    def _end_epoch(self, epoch: int, train_time: float, epoch_samples: int) -> EpochScore:
        """Rank 0: score the test set, log, checkpoint (the others wait at the next collective)."""
        cfg = self.cfg
        assert self.rundir is not None
        final, line, record = test_and_log(
            self.model.module,
            self.test_x,
            self.test_y,
            self.nhwc,
            cfg,
            self.rundir,
            epoch,
            epoch_samples,
            train_time,
            self._t0,
            self.samples,
            self.milestones,
        )
        self._print(line)
        self.history.append(record)
        self._save_checkpoint(epoch, final)
        return final

    def _save_checkpoint(self, epoch: int, final: EpochScore | None) -> Path | None:
        """The one torch.optim state is identical on every rank: rank 0's is saved. So is
        each rank's fp16 GradScaler: they all see the same all-reduced gradients, so they
        skip the same steps and hold the same scale."""
        scaler = self.precision.scaler
        return save_run_checkpoint(
            self.checkpoint_path,
            self.cfg,
            self.model.module,
            [_to_cpu(self.optimizer.state_dict())],
            epoch=epoch,
            samples=self.samples,
            elapsed=time.monotonic() - self._t0,
            final=final,
            milestones=self.milestones,
            scaler=None if scaler is None else scaler.state_dict(),
        )


def _to_cpu(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().clone()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_to_cpu(v) for v in obj]
    return obj
