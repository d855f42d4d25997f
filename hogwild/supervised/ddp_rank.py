"""One ``--strategy ddp`` rank, in its own process: synchronous steps, rank 0
scores, logs and checkpoints (:mod:`hogwild.supervised.ddp`)."""

from __future__ import annotations

import contextlib
import datetime
import io
import itertools
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import Dataset, DistributedSampler

from hogwild.checkpoint import save_checkpoint_or_warn
from hogwild.precision import Precision
from hogwild.procs import SharedFlag, die_with_parent
from hogwild.run import CHECKPOINT
from hogwild.rundir import RunDir
from hogwild.sharing import sparse_parameters
from hogwild.sparse import touched_rows
from hogwild.supervised.callbacks import Callback
from hogwild.supervised.checkpoints import checkpoint, keep_best
from hogwild.supervised.config import FitConfig, epoch_lr
from hogwild.supervised.data import batches
from hogwild.supervised.devices import ddp_on_cuda
from hogwild.supervised.epochs import EpochBook
from hogwild.supervised.optimizers import torch_optimizers
from hogwild.supervised.position import EpochPosition, shape_of
from hogwild.supervised.report import App, FitResult, evaluate, progress_line, training_text
from hogwild.supervised.steps import StepStats, backward_micro_batches, group_steps, to_device
from hogwild.supervised.task import Objective, Task


def ddp_step(
    model: DistributedDataParallel,
    objective: Objective,
    optimizers: list[torch.optim.Optimizer],
    micro: list[Any],
    precision: Precision,
    device: torch.device,
    tables: Sequence[torch.nn.Parameter] = (),
) -> StepStats:
    """One synchronous step: all but the last micro-batch under ``no_sync``, so the ranks
    all-reduce their gradients once per step, however many micro-batches it has; the
    sparse ``tables`` (which DDP ignores) are averaged after it (:func:`average_sparse`)."""
    for opt in optimizers:
        opt.zero_grad(set_to_none=True)
    micro = [to_device(b, device) for b in micro]
    stats = backward_micro_batches(model, objective, micro, precision, model.no_sync, device)
    for p in tables:
        p.grad = average_sparse(p.grad, p)
    if precision.scaler is None:
        for opt in optimizers:
            opt.step()
    else:
        for opt in optimizers:
            precision.scaler.step(opt)
        precision.scaler.update()
    return stats


def average_sparse(grad: torch.Tensor | None, table: torch.Tensor) -> torch.Tensor:
    """The ranks' mean of a table's sparse gradient, all of its rows gathered (padded to the
    longest rank's). DDP's own sparse all-reduce over gloo corrupted the heap within a
    minute on the 5M-rating recommender (benchmarks/sparse.py: SIGABRT, "malloc():
    unaligned tcache chunk"), 3 runs of 3."""
    world = dist.get_world_size()
    if grad is None:  # this rank's batch looked up no row: it still takes part
        grad = torch.sparse_coo_tensor(
            torch.zeros((1, 0), dtype=torch.int64),
            table.new_zeros((0, *table.shape[1:])),
            table.shape,
        )
    rows, values = touched_rows(grad)
    counts = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(counts, torch.tensor([rows.numel()]))
    longest = max(int(c) for c in counts)
    padded_rows = rows.new_zeros(longest)
    padded_rows[: rows.numel()] = rows
    padded_values = values.new_zeros((longest, *values.shape[1:]))
    padded_values[: rows.numel()] = values
    all_rows = [torch.empty_like(padded_rows) for _ in range(world)]
    all_values = [torch.empty_like(padded_values) for _ in range(world)]
    dist.all_gather(all_rows, padded_rows)
    dist.all_gather(all_values, padded_values)
    n = [int(c) for c in counts]
    indices = torch.cat([r[:k] for r, k in zip(all_rows, n, strict=True)])
    summed = torch.cat([v[:k] for v, k in zip(all_values, n, strict=True)])
    return torch.sparse_coo_tensor(indices[None], summed / world, table.shape)


def rank_main(
    rank: int,
    cfg: FitConfig,
    task: Task,
    app: App,
    callbacks: list[Callback],
    port: int,
    state: dict[str, Any] | None,
    stop: SharedFlag,
    messages: Any,
    parent_pid: int,
) -> None:
    """One rank, in its own forked or spawned process."""
    die_with_parent(parent_pid)  # SIGKILL, not spawn's SIGINT (ignored below), if it dies
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent: it sets `stop`
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    torch.set_num_threads(cfg.threads_per_worker)
    if ddp_on_cuda(cfg):
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
        _Rank(rank, cfg, task, app, callbacks, state, stop, messages, device, backend).run()
        # Leave together: no rank closes its connections while rank 0 still scores or
        # writes its checkpoint (a failure skips this: the exception goes to the parent).
        dist.barrier()
    finally:
        dist.destroy_process_group()
    # DDP keeps the gloo group's C++ threads alive past destroy_process_group; an
    # interpreter tearing down around them can abort (SIGABRT). All is saved and sent.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


#: The slots of each rank's training window, summed over the ranks every --log-interval
#: steps: the summed train loss, the samples trained and the ranks asking to stop.
LOSS_SUM, SEEN, STOP_VOTES = WINDOW_SLOTS = range(3)


class _Rank:
    def __init__(
        self,
        rank: int,
        cfg: FitConfig,
        task: Task,
        app: App,
        callbacks: list[Callback],
        state: dict[str, Any] | None,
        stop: SharedFlag,
        messages: Any,
        device: torch.device,
        backend: str,
    ) -> None:
        self.rank, self.cfg, self.task, self.app, self.stop = rank, cfg, task, app, stop
        self.messages, self.device, self.backend = messages, device, backend
        self.is_main = rank == 0
        torch.manual_seed(cfg.seed)
        model = task.model.to(device)
        if state is not None:
            model.load_state_dict(state["model"])
        sparse = sparse_parameters(model)
        self.tables = [p for p in model.parameters() if p in sparse]
        ignored = [n for n, p in model.named_parameters() if p in sparse]
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, ignored)
        # DDP broadcasts rank 0's weights at construction, so all ranks start alike.
        self.model = DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
        self.optimizers = torch_optimizers(cfg, model)
        self.precision = Precision(cfg.amp, device.type)
        if state is not None:
            for opt, sd in zip(self.optimizers, state["optimizers"], strict=True):
                opt.load_state_dict(sd)
            if state.get("scaler") and self.precision.scaler is not None:
                self.precision.scaler.load_state_dict(state["scaler"])
        n = len(task.train)  # type: ignore[arg-type]
        self.sampler: DistributedSampler[int] = DistributedSampler(
            cast("Dataset[int]", range(n)),  # only its len() is read
            num_replicas=cfg.workers,
            rank=rank,
            shuffle=True,
            seed=cfg.seed,
        )
        self.book = EpochBook(cfg, task, app, callbacks)
        self.start_epoch = state["epoch"] if state else 0
        self.samples = state["samples"] if state else 0
        self.elapsed0 = state["elapsed"] if state else 0.0
        self.resume_at: EpochPosition | None = state["position"] if state else None
        self._done = 0  # micro-batches stepped in the current epoch
        if state is not None:
            self.book.load(state)
        self._t0 = self._last_progress = 0.0
        self.rundir: RunDir | None = None
        self.best_path: Path | None = None
        if self.is_main:
            run_dir = state["run_dir"] if state else None
            self.rundir = RunDir(cfg.logdir, f"{app.name}-ddp", cfg, cfg.run_name, run_dir)
            self.checkpoint_path = Path(cfg.checkpoint or self.rundir.path / CHECKPOINT)

    def _print(self, text: str) -> None:
        if self.is_main:
            self.messages.put(("print", text))

    def run(self) -> None:
        cfg, n = self.cfg, len(self.task.train)  # type: ignore[arg-type]
        params = sum(p.numel() for p in self.model.parameters())
        self._print(
            f"training {type(self.model.module).__name__} ({params:,} parameters) with "
            f"{cfg.workers} DDP rank(s) ({self.backend}), {training_text(cfg)}, on {n:,} samples; "
            f"run folder {self.rundir.path if self.rundir else '-'}"
        )
        self._t0 = time.monotonic() - self.elapsed0
        epoch, saved, stopped = self.start_epoch, True, False
        position: EpochPosition | None = None
        try:
            while epoch < cfg.epochs:
                saved = False
                completed, train_time, epoch_samples, loss_sum = self._train_epoch(epoch)
                if not completed:
                    stopped = True
                    position = EpochPosition(
                        epoch, [self._done] * cfg.workers, epoch_samples, loss_sum,
                        train_time, shape_of(cfg, n),
                    )  # fmt: skip
                    break
                epoch += 1
                reason = None
                if self.is_main:
                    reason = self._end_epoch(epoch, train_time, epoch_samples, loss_sum)
                saved = True
                if epoch < cfg.epochs and self._agree_to_stop(reason):
                    stopped = self.stop.is_set()
                    break
        except (RuntimeError, dist.DistBackendError):
            # A peer died or timed out: the weights are those of the last step all ranks
            # completed, so rank 0 still leaves a checkpoint to resume from.
            if self.is_main and not saved:
                with contextlib.suppress(Exception):
                    self._save(epoch)
            raise
        finally:
            if self.rundir is not None:
                self.rundir.close(self.book.summary())
        if not self.is_main:
            return
        if not saved:
            self._save(epoch, position)
        self._print(f"checkpoint: {self.checkpoint_path}")
        for line in self.book.closing_lines():
            self._print(line)
        # As bytes: a tensor would be sent as a shared-memory handle, which dies with us.
        weights = io.BytesIO()
        torch.save(
            {k: v.detach().cpu() for k, v in self.model.module.state_dict().items()}, weights
        )
        self.messages.put(("weights", weights.getvalue()))
        result = FitResult(
            exit_code=143 if stopped else 0,  # the parent puts its own signal's code
            run_dir=self.rundir.path if self.rundir else None,
            checkpoint=self.checkpoint_path,
            epochs_done=epoch,
            samples=self.samples,
            metrics=dict(self.book.metrics),
            history=list(self.book.history),
            best=self.book.monitor.state(),
            best_checkpoint=self.best_path,
            elapsed=time.monotonic() - self._t0,
            milestones=dict(self.book.milestones),
        )
        self.messages.put(("result", result))

    def _train_epoch(self, epoch: int) -> tuple[bool, float, int, float]:
        """One epoch of synchronous steps; False if the ranks agreed to stop before its end."""
        cfg, device = self.cfg, self.device
        tables = {id(p) for p in self.tables}
        for opt in self.optimizers:
            for param_group in opt.param_groups:
                table = id(param_group["params"][0]) in tables
                param_group["lr"] = epoch_lr(cfg, epoch, table)
        self.sampler.set_epoch(epoch)
        order = torch.tensor(list(self.sampler), dtype=torch.int64)
        at, self.resume_at = self.resume_at, None
        skip = at.skip(self.rank) if at is not None and at.epoch == epoch else 0
        read = batches(
            self.task.train, order[skip * cfg.batch_size :], cfg.batch_size, cfg.loader_workers
        )
        limit = (
            None if cfg.max_batches_per_epoch is None else max(cfg.max_batches_per_epoch - skip, 0)
        )
        micro = list(itertools.islice(read, limit))
        steps = group_steps(micro, cfg.grad_accum)
        window = torch.zeros(len(WINDOW_SLOTS), dtype=torch.float64, device=device)
        epoch_samples, epoch_loss, seconds0 = 0, 0.0, 0.0
        if skip and at is not None:
            epoch_samples, epoch_loss, seconds0 = at.samples, at.loss_sum, at.seconds
            self._print(f"resuming epoch {epoch + 1} after its first {at.samples:,} samples")
        self._done = skip
        self.model.train()
        start = time.monotonic() - seconds0
        for i, group in enumerate(steps, 1):
            stats = ddp_step(
                self.model,
                self.task.objective,
                self.optimizers,
                group,
                self.precision,
                device,
                self.tables,
            )
            self._done += len(group)
            window[LOSS_SUM] += stats.loss_sum
            window[SEEN] += stats.samples
            if i % cfg.log_interval == 0 or i == len(steps):
                window[STOP_VOTES] = float(self.stop.is_set())
                dist.all_reduce(window)
                loss_sum, n, stop = window.tolist()  # in slot order
                window.zero_()
                self.samples += int(n)
                epoch_samples += int(n)
                epoch_loss += loss_sum
                if self.rundir is not None:
                    self.rundir.scalars({"train/loss": loss_sum / max(n, 1)}, self.samples)
                    self._progress(epoch, epoch_samples, loss_sum / max(n, 1), start)
                if stop > 0:
                    return False, time.monotonic() - start, epoch_samples, epoch_loss
        return True, time.monotonic() - start, epoch_samples, epoch_loss

    def _progress(self, epoch: int, samples: int, loss: float, start: float) -> None:
        now = time.monotonic()
        if now - self._last_progress < 0.5:
            return
        self._last_progress = now
        rate = samples / max(now - start, 1e-9)
        self.messages.put(("progress", progress_line(epoch, self.cfg.epochs, samples, loss, rate)))

    def _agree_to_stop(self, reason: str | None) -> bool:
        """Between epochs: rank 0's verdict (a target or callback, or a stop request)."""
        verdict = torch.tensor(
            [2.0 if reason else 1.0 if self.stop.is_set() else 0.0], device=self.device
        )
        dist.broadcast(verdict, src=0)
        if reason:
            self._print(reason)
        return verdict.item() > 0

    def _end_epoch(
        self, epoch: int, train_time: float, epoch_samples: int, loss_sum: float
    ) -> str | None:
        """Rank 0: score, log, checkpoint (the others wait at the next collective)."""
        task, cfg = self.task, self.cfg
        module = self.model.module
        if task.val is not None:
            metrics = evaluate(
                module, task.val, task.objective, task.metrics, cfg.val_batch_size, self.device
            )
        else:
            metrics = {"loss": loss_sum / max(epoch_samples, 1)}
        assert self.rundir is not None
        line, improved = self.book.end(
            epoch,
            metrics,
            self.rundir,
            samples=self.samples,
            epoch_samples=epoch_samples,
            train_time=train_time,
            elapsed=time.monotonic() - self._t0,
        )
        self._print(line)
        saved = self._save(epoch)
        if improved:
            self.best_path = keep_best(saved, self.app.prog) or self.best_path
        return self.book.stop_reason(epoch)

    def _save(self, epoch: int, position: EpochPosition | None = None) -> Path | None:
        """The torch.optim states are identical on every rank: rank 0's are saved. So is
        fp16's GradScaler: every rank sees the same all-reduced gradients. ``position``:
        where the ranks stopped inside epoch ``epoch`` (all at the same step)."""
        scaler = self.precision.scaler
        state = checkpoint(
            self.app,
            self.cfg,
            self.model.module,
            {"torch": [_to_cpu(opt.state_dict()) for opt in self.optimizers]},
            self.book.state(),
            epoch=epoch,
            samples=self.samples,
            elapsed=time.monotonic() - self._t0,
            scaler=None if scaler is None else scaler.state_dict(),
            position=position,
        )
        return save_checkpoint_or_warn(state, self.checkpoint_path, self.app.prog)


def _to_cpu(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().clone()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_to_cpu(v) for v in obj]
    return obj
