"""Hogwild! on MNIST: N processes train one shared convnet in place, without locks.

This is PyTorch's ``mnist_hogwild`` example, rebuilt on the engine. The parameters live
in one flat shared-memory tensor (:mod:`hogwild.flat`); every worker process runs its own
forward/backward on its own batches and applies its gradient straight to the shared
tensor through *its own* shared optimizer (momentum buffers in shared memory, so they
survive a worker restart and go into checkpoints). Nobody waits for anybody.

One epoch is one generation of N workers: each trains on its shard of that epoch's
shuffle (``DistributedSampler``-style: a permutation seeded by (seed, epoch), split N
ways) and exits. Meanwhile the main process only consumes telemetry and watches the
workers (restarting a dead one, which redoes its shard with a fresh seed). When all are
done, nothing trains: the main process scores the test set, logs, checkpoints, and
starts the next generation. A fork per epoch costs milliseconds; in exchange there is
no cross-process barrier to get wrong and every checkpoint is of a quiescent model.

Two more ways to run the same model on the same data (see ``--help``):

* ``--mode ddp``: the synchronous baseline, N ``DistributedDataParallel`` ranks
  (:mod:`hogwild.mnist.ddp`).
* under ``torchrun``: one Hogwild! node per machine, each with its own workers on its
  own shard of the data, averaging parameters with the other nodes every
  ``--sync-every`` seconds (:class:`hogwild.distributed.NodeSync`). Every node's epoch
  generation must be over before anyone tests: a node that is done keeps voting "done"
  in the averaging rounds until the totals say all nodes are; a last exact round then
  leaves every node with the same model, which rank 0 alone tests, logs and checkpoints.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import logging
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn

from hogwild.checkpoint import load_checkpoint, save_checkpoint
from hogwild.cli import nonnegative_int, positive_float, positive_int, run_cli, unit_float
from hogwild.distributed import NodeFailure, NodeSync, launched_by_torchrun
from hogwild.errors import UsageError
from hogwild.evaluator import Evaluator, resolve_device
from hogwild.flat import attach_flat_grad, flatten_parameters
from hogwild.mnist.data import (
    FILES,
    MNIST_MEAN,
    MNIST_STD,
    MnistData,
    default_data_dir,
    load_mnist,
    read_idx,
)
from hogwild.optim import SharedAdam, SharedOptimizer, SharedSGD
from hogwild.pool import BufferPool, PoolTimeout
from hogwild.procs import FailurePolicy, WorkerContext, WorkerFailure, WorkerGroup
from hogwild.rundir import Progress, RunDir, config_dict
from hogwild.shutdown import GracefulShutdown

log = logging.getLogger(__name__)

PROG = "hogwild-mnist"
CHECKPOINT_FORMAT = "hogwild-mnist"
MILESTONES = (98.0, 99.0)  # test accuracies (%) whose first arrival time is reported

# --------------------------------------------------------------------------- models


class ConvNet(nn.Module):
    """Two 5x5 convolutions (16 and 32 channels) and a 128-unit hidden layer.

    About 80k parameters: with the default flags and 2 workers it reaches about 98.2% test
    accuracy after one epoch and 99% after three or four, where the example's 22k-parameter
    net never gets to 99%. On one thread it trains about as fast as that net (~10k
    samples/s here), thanks to channels-last convolutions. No BatchNorm (its running
    statistics are buffers, not parameters: they would not be shared) and no dropout (not
    needed at this size). Max-pool runs before ReLU, which is the same function at a
    quarter of the ReLU work.
    """

    def __init__(self, c1: int = 16, c2: int = 32, hidden: int = 128) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, c1, 5)
        self.conv2 = nn.Conv2d(c1, c2, 5)
        self.fc1 = nn.Linear(c2 * 4 * 4, hidden)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = F.relu(self.fc1(x.flatten(1)))
        return F.log_softmax(self.fc2(x), dim=1)


class ExampleNet(nn.Module):
    """The network of PyTorch's ``mnist_hogwild`` example (22k parameters, dropout), for
    comparison: it tops out just under 99%."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = F.relu(self.fc1(x.flatten(1)))
        x = F.dropout(x, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)


MODELS: dict[str, Callable[[], nn.Module]] = {"convnet": ConvNet, "example": ExampleNet}


def build_model(name: str = "convnet") -> nn.Module:
    """A fresh model by name (module level, so a spawned evaluator can unpickle it)."""
    return MODELS[name]()


def channels_last(x: torch.Tensor) -> torch.Tensor:
    """``x`` with NHWC strides, which makes oneDNN pick its faster channels-last kernels.

    For one channel, ``Tensor.contiguous(memory_format=channels_last)`` is a no-op (the
    layout is ambiguous) and the convolution then stays NCHW; the memory is the same
    either way, so the strides are simply restated.
    """
    if x.shape[1] == 1:
        x = x.contiguous()
        n, _, h, w = x.shape
        return x.as_strided(x.shape, (h * w, 1, w, 1))
    return x.contiguous(memory_format=torch.channels_last)


def evaluate(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    batch_size: int = 1000,
    nhwc: bool = True,
) -> tuple[float, int]:
    """Mean NLL loss and number correct over ``images``, in eval mode (then restored)."""
    was_training = model.training
    model.eval()
    total_loss, correct = 0.0, 0
    with torch.no_grad():
        for i in range(0, images.shape[0], batch_size):
            x, y = images[i : i + batch_size], labels[i : i + batch_size]
            out = model(channels_last(x) if nhwc else x)
            total_loss += float(F.nll_loss(out, y, reduction="sum"))
            correct += int((out.argmax(1) == y).sum())
    model.train(was_training)
    return total_loss / images.shape[0], correct


# -------------------------------------------------------------------- evaluator side

_TEST_SETS: dict[tuple[str, str], tuple[torch.Tensor, torch.Tensor]] = {}


def load_test_set(data_dir: str | Path) -> tuple[torch.Tensor, torch.Tensor]:
    """Only the 10k test images and labels, normalised (the evaluator needs no more)."""
    data_dir = Path(data_dir)
    tensors = []
    for base in (FILES["test_images"], FILES["test_labels"]):
        raw = data_dir / base
        tensors.append(read_idx(raw if raw.is_file() else data_dir / f"{base}.gz"))
    images, labels = tensors
    x = images.unsqueeze(1).to(torch.float32).div_(255.0).sub_(MNIST_MEAN).div_(MNIST_STD)
    return x, labels.to(torch.int64)


def score_test_set(
    model: nn.Module,
    device: torch.device,
    step: int,
    *,
    data_dir: str,
    batch_size: int = 1000,
    nhwc: bool = True,
) -> dict[str, float]:
    """Evaluator callback: test loss and accuracy (%); the test set is loaded once per process."""
    key = (str(data_dir), str(device))
    if key not in _TEST_SETS:
        x, y = load_test_set(data_dir)
        _TEST_SETS[key] = (x.to(device), y.to(device))
    x, y = _TEST_SETS[key]
    loss, correct = evaluate(model, x, y, batch_size, nhwc and device.type == "cpu")
    return {"accuracy": 100.0 * correct / y.shape[0], "loss": loss}


# ------------------------------------------------------------------------ workers

TELEMETRY: dict[str, tuple[tuple[int, ...], torch.dtype]] = {
    "loss_sum": ((), torch.float64),  # summed over the samples of this message
    "correct": ((), torch.int64),
    "samples": ((), torch.int64),
}


@dataclass(frozen=True)
class EpochPlan:
    """What every worker of one generation needs to know besides its rank."""

    epoch: int
    shuffle_seed: int  # the same for all workers: they must agree on the shards
    num_workers: int
    batch_size: int
    lr: float
    log_interval: int = 10
    max_batches: int | None = None
    nhwc: bool = True
    passes: int = 1  # >1 only for benchmarks that want a long steady window
    node_rank: int = 0  # under torchrun: this node's rank, and how many nodes share the data
    nodes: int = 1


def shard_indices(n: int, plan: EpochPlan, rank: int, seed: int) -> torch.Tensor:
    """This worker's sample indices for the epoch, in its own random order.

    The shard is ``DistributedSampler``'s: every ``num_workers``-th index of a permutation
    that all workers compute alike from ``shuffle_seed``, so the shards are disjoint and
    cover the data. Across ``nodes`` nodes there are ``nodes * num_workers`` shards and
    local worker ``rank`` of node ``node_rank`` takes shard ``node_rank * num_workers +
    rank``. Within the shard the order comes from the worker's own ``seed``, which
    changes when a dead worker is restarted.
    """
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(plan.shuffle_seed))
    shard = perm[plan.node_rank * plan.num_workers + rank :: plan.num_workers * plan.nodes]
    order = torch.randperm(shard.numel(), generator=torch.Generator().manual_seed(seed))
    return shard[order]


def train_worker(
    ctx: WorkerContext,
    model: nn.Module,
    optimizers: Sequence[SharedOptimizer],
    pool: BufferPool,
    images: torch.Tensor,
    labels: torch.Tensor,
    plan: EpochPlan,
) -> None:
    """One worker's epoch: Hogwild! SGD over its shard, telemetry every ``log_interval`` batches.

    ``model``'s parameters are views of the shared flat tensor, which this worker's own
    optimizer updates in place; the gradient buffer is private to the process.
    """
    optimizer = optimizers[ctx.rank]
    grad = attach_flat_grad(model, optimizer.params)
    model.train()
    producer = pool.producer(ctx.rank)
    order = shard_indices(images.shape[0], plan, ctx.rank, ctx.seed)
    batches = list(torch.split(order, plan.batch_size)) * plan.passes
    if plan.max_batches is not None:
        batches = batches[: plan.max_batches]
    loss_sum = torch.zeros((), dtype=torch.float64)
    correct = torch.zeros((), dtype=torch.int64)
    pending = 0

    def send() -> None:
        nonlocal pending
        while True:  # block while the main process is behind, but never past a stop request
            try:
                with producer.message(timeout=0.5) as msg:
                    msg["loss_sum"].copy_(loss_sum)
                    msg["correct"].copy_(correct)
                    msg["samples"].fill_(pending)
                break
            except PoolTimeout:
                if ctx.should_stop():
                    return
        loss_sum.zero_()
        correct.zero_()
        pending = 0

    for i, idx in enumerate(batches, 1):
        if ctx.should_stop():
            break
        x = images.index_select(0, idx)
        y = labels.index_select(0, idx)
        grad.zero_()
        out = model(channels_last(x) if plan.nhwc else x)
        loss = F.nll_loss(out, y)
        loss.backward()
        optimizer.step(grad, 0, lr=plan.lr)
        with torch.no_grad():
            loss_sum.add_(loss.detach(), alpha=y.shape[0])
            correct.add_((out.argmax(1) == y).sum())
        pending += y.shape[0]
        if i % plan.log_interval == 0 and i != len(batches):
            send()
    if pending and not ctx.should_stop():
        send()


# ------------------------------------------------------------------------- config


@dataclass
class MnistConfig:
    """Every setting of a run; written to ``config.json``, TensorBoard and checkpoints."""

    batch_size: int = 64
    test_batch_size: int = 1000
    epochs: int = 4
    lr: float = 0.05
    momentum: float = 0.5
    lr_decay: float = 0.7
    optimizer: str = "sgd"
    model: str = "convnet"
    seed: int = 1
    log_interval: int = 10
    workers: int = 2
    threads_per_worker: int = 1
    start_method: str = "fork"
    data_dir: str = field(default_factory=lambda: str(default_data_dir()))
    download: bool = True
    train_subset: int | None = None
    max_batches_per_epoch: int | None = None
    target_accuracy: float | None = None
    logdir: str = "runs"
    run_name: str | None = None
    checkpoint: str | None = None
    resume: str | None = None
    on_worker_failure: str = "restart"
    max_restarts: int = 10
    eval_interval: float = 0.0
    eval_device: str = "auto"
    channels_last: bool = True
    mode: str = "hogwild"
    sync_every: float = 2.0
    dist_timeout: float = 60.0


# Flags that must be the same on every node of a torchrun job: they decide the shards, the
# schedule and what is trained.
SAME_ON_EVERY_NODE = (
    "mode", "model", "optimizer", "batch_size", "epochs", "lr", "momentum", "lr_decay",
    "seed", "workers", "train_subset", "max_batches_per_epoch", "target_accuracy",
)  # fmt: skip


def make_optimizer(cfg: MnistConfig, flat: torch.Tensor) -> SharedOptimizer:
    """One worker's optimizer over the shared flat parameters, its state in shared memory."""
    if cfg.optimizer == "adam":
        opt: SharedOptimizer = SharedAdam(flat, lr=cfg.lr)
    else:
        opt = SharedSGD(flat, lr=cfg.lr, momentum=cfg.momentum)
    return opt.share_memory()


def epoch_lr(cfg: MnistConfig, epoch: int) -> float:
    """Step decay per epoch (``StepLR(step_size=1, gamma=lr_decay)``); epochs count from 0."""
    return cfg.lr * cfg.lr_decay**epoch


def load_data(cfg: MnistConfig) -> MnistData:
    """All of MNIST (or the first ``--train-subset`` training images), in shared memory."""
    data = load_mnist(cfg.data_dir, download=cfg.download)
    if cfg.train_subset is not None:
        if cfg.train_subset > data.train_images.shape[0]:
            raise UsageError(
                f"--train-subset {cfg.train_subset} exceeds the "
                f"{data.train_images.shape[0]} training images"
            )
        data.train_images = data.train_images[: cfg.train_subset].clone()
        data.train_labels = data.train_labels[: cfg.train_subset].clone()
    return data.share_memory_()


def load_resume(cfg: MnistConfig) -> dict[str, Any]:
    """The ``--resume`` checkpoint, checked against this run's mode, model and optimizer."""
    path = cfg.resume
    try:
        ck = load_checkpoint(path, required=("format", "model", "optimizers", "epoch", "config"))
    except UsageError:
        raise
    except Exception as e:  # the weights-only unpickler can raise anything on garbage
        reason = " ".join(str(e).split())[:200]
        raise UsageError(
            f"{path}: not a readable checkpoint ({type(e).__name__}: {reason})"
        ) from None
    saved = ck["config"]
    if ck["format"] != CHECKPOINT_FORMAT or not isinstance(saved, dict):
        raise UsageError(f"{path}: not a {PROG} checkpoint")
    saved = {"mode": "hogwild", **saved}  # checkpoints from before --mode existed
    for key, flag in (("mode", "--mode"), ("model", "--model"), ("optimizer", "--optimizer")):
        if saved.get(key) != getattr(cfg, key):
            raise UsageError(
                f"{path} was trained with {flag} {saved.get(key)}, "
                f"not {getattr(cfg, key)}; pass {flag} {saved.get(key)}"
            )
    return ck


def params_digest(flat: torch.Tensor) -> str:
    """A short fingerprint of the parameters' exact bits (nodes compare theirs at the end)."""
    return hashlib.sha256(flat.detach().cpu().contiguous().numpy().tobytes()).hexdigest()[:16]


# ----------------------------------------------------------------------- training


@dataclass
class RunResult:
    """What a finished (or stopped) run reports, for tests and benchmarks."""

    exit_code: int
    run_dir: Path | None
    checkpoint: Path | None
    epochs_done: int
    samples: int
    test_accuracy: float | None = None
    test_loss: float | None = None
    elapsed: float = 0.0
    milestones: dict[float, tuple[float, int]] = field(default_factory=dict)
    history: list[dict[str, float]] = field(default_factory=list)


class Trainer:
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
        self.evaluator: Evaluator | None = None
        self.progress = Progress(stream=self.out)
        self._epoch, self._epoch_samples = 0, 0
        self._loss_window: list[tuple[float, int]] = []
        self._offered: dict[int, tuple[float, int]] = {}  # evaluator step -> (time, samples)
        self._t0 = self._last_offer = 0.0

        # Under torchrun: this process is one node; rank 0 alone tests, logs, checkpoints.
        self.sync: NodeSync | None = None
        self.rank, self.nodes = 0, 1
        self._unsynced = self._in_round = 0  # local samples not yet / being counted in a round
        self._stop_agreed = self._all_done = False
        if launched_by_torchrun():
            self.sync = NodeSync(
                self.flat, num_counters=3, sync_every=cfg.sync_every, timeout=cfg.dist_timeout
            )
            try:
                self.rank, self.nodes = self.sync.rank, self.sync.world
                self._agree_on_start()
            except BaseException:
                self.sync.close()
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

    def _agree_on_start(self) -> None:
        """Check that every node got the same training flags; take rank 0's run state.

        The weights already came from rank 0 (NodeSync's broadcast); the epoch and sample
        counts of a resumed run come from rank 0 too, so only rank 0 needs the checkpoint
        (another node given ``--resume`` also restores its own workers' optimizer state).
        """
        assert self.sync is not None
        mine = {k: getattr(self.cfg, k) for k in SAME_ON_EVERY_NODE}
        state = (mine, self.start_epoch, self.samples, self.elapsed0, self.milestones)
        gathered: list[Any] = [None] * self.nodes
        self._collective(lambda: dist.all_gather_object(gathered, state))
        differ = [k for k in SAME_ON_EVERY_NODE if any(g[0][k] != mine[k] for g in gathered)]
        if differ:
            flags = ", ".join("--" + k.replace("_", "-") for k in differ)
            raise UsageError(f"every node must be given the same {flags} (they differ)")
        _, self.start_epoch, self.samples, self.elapsed0, self.milestones = gathered[0]

    def _collective(self, fn: Callable[[], object]) -> None:
        """A collective of the app's own; like NodeSync's, a failure is a NodeFailure."""
        try:
            fn()
        except (RuntimeError, dist.DistBackendError) as e:
            reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
            raise NodeFailure(
                f"node {self.rank}: lost contact with the other nodes ({reason})"
            ) from None

    def close(self) -> None:
        """Leave the torchrun group, if this process joined one."""
        if self.sync is not None:
            self.sync.close()
            self.sync = None

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
        if cfg.start_method == "forkserver":
            # Workers then fork from a server that imported torch once, instead of each
            # importing it again every epoch.
            ctx.set_forkserver_preload(["torch", "hogwild.rundir", "hogwild.evaluator"])
        self.pool = BufferPool(TELEMETRY, producers=cfg.workers, slots=4, ctx=ctx)

    def run(self, shutdown: GracefulShutdown) -> RunResult:
        """Train from ``start_epoch`` to ``cfg.epochs`` (or a stop); checkpoint; report."""
        cfg = self.cfg
        self.shutdown = shutdown
        if self.start_epoch >= cfg.epochs:
            self._print(
                f"{cfg.resume} already holds {self.start_epoch} epochs (--epochs {cfg.epochs}): "
                "nothing to train"
            )
            return RunResult(0, None, None, self.start_epoch, self.samples)
        self._open_run()
        result = RunResult(0, self.rundir.path, None, self.start_epoch, self.samples)
        self._print(self._banner())
        self._t0 = time.monotonic() - self.elapsed0
        self._last_offer = time.monotonic()
        epoch, final, saved = self.start_epoch, None, True
        try:
            if cfg.eval_interval > 0 and self.is_main:
                self._start_evaluator()
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
                if self.sync is not None:
                    self._check_identical()
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
            if result.exit_code == 0:
                self._final_score()
            self._report_milestones()
        finally:
            self._stop_evaluator()
            self.pool.close()
            metrics = {} if final is None else {"test_loss": final[0], "test_accuracy": final[1]}
            for acc, (t, _) in self.milestones.items():
                metrics[f"time_to_{acc:g}_s"] = t
            self.rundir.close(metrics)
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
        on = f" on each of {self.nodes} nodes (torchrun)" if self.sync is not None else ""
        return (
            f"training {cfg.model} ({self.flat.numel():,} parameters) with {cfg.workers} "
            f"Hogwild! worker(s){on}, {cfg.optimizer}, on {n} images; "
            f"run folder {self.rundir.path}"
        )

    def _train_epoch(self, epoch: int) -> tuple[bool, float]:
        """Run one generation of workers; False if stopped before all finished their shards.

        Across nodes, the epoch ends for all at the same averaging round (see
        :meth:`_epoch_over`), and a last exact round leaves every node the same model.
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
            on_restart=self._on_restart,
        )
        self._epoch_samples, self._epoch, self._all_done = 0, epoch, False
        self.model.train()
        start = time.monotonic()
        self.group.start()
        while not self._epoch_over():
            waitables = [*self.pool.readers(), *self.group.sentinels()]
            if self.evaluator is not None:
                waitables += self.evaluator.waitables()
            ready = wait(waitables, timeout=0.25 if self.sync is None else 0.05)
            self._drain()
            self.group.check(ready)
            self._poll_evaluator(ready)
            self._show_progress(start)
        self._drain()
        train_time = time.monotonic() - start
        # Every shard done counts even if a stop request came in meanwhile: nothing is lost.
        completed = self.group.finished
        self._stop_workers()
        if self.sync is not None:
            completed = self._last_round()
        return completed, train_time

    # -- across nodes (torchrun) ---------------------------------------------------------
    # Rounds pair up by their order on each node, so every decision below (epoch over,
    # stop, target reached) is taken from round totals, which are the same on all nodes.
    # Counters: [samples trained since the last round, "my epoch is done", "stop"].

    def _stopping(self) -> bool:
        """Alone, a signal stops the run; across nodes, a stop all of them agreed on."""
        return self._stop_agreed if self.sync is not None else self.shutdown.requested

    def _epoch_over(self) -> bool:
        """Alone: all workers are done (or a stop). Across nodes: the round totals say that
        every node is done, or that some node was asked to stop. A node that is done
        starts its rounds as soon as the last one ends, the others every ``--sync-every``
        seconds (or at once when they get done), so the epoch ends for everyone at the
        first round after the last node finished."""
        sync = self.sync
        assert self.group is not None
        if sync is None:
            return self.group.finished or self.shutdown.requested
        stop = self.shutdown.requested
        done = self.group.finished and not stop
        if not sync.in_flight and (done or stop or sync.due()):
            self._in_round, self._unsynced = self._unsynced, 0
            sync.start([float(self._in_round), float(done), float(stop)])
        result = sync.poll()
        if result is None:
            return False
        self._count_round(result.totals)
        self._all_done = bool(result.totals[1] >= self.nodes)
        return self._all_done or self._stop_agreed

    def _last_round(self) -> bool:
        """The blocking, exact round after the workers stopped: identical models everywhere.
        True if every node finished its shards."""
        assert self.sync is not None
        self._in_round, self._unsynced = self._unsynced, 0
        result = self.sync.final_round(
            [float(self._in_round), float(self._all_done), float(self.shutdown.requested)]
        )
        self._count_round(result.totals)
        return self._all_done

    def _count_round(self, totals: torch.Tensor) -> None:
        """Add the other nodes' samples; note a stop that some node asked for."""
        others = int(totals[0]) - self._in_round
        self._in_round = 0
        self.samples += others
        self._epoch_samples += others
        if totals[2] > 0 and not self._stop_agreed:
            self._stop_agreed = True
            if not self.shutdown.requested:
                self._print("another node was asked to stop: stopping")

    def _target_reached(self, epoch: int, final: tuple[float, float] | None) -> bool:
        """Stop for ``--target-accuracy``? Only rank 0 tests, so across nodes its verdict
        goes to all in a blocking round (in which the others wait while rank 0 tests)."""
        cfg = self.cfg
        reached = (
            final is not None
            and cfg.target_accuracy is not None
            and final[1] >= cfg.target_accuracy
        )
        if self.sync is not None and epoch < cfg.epochs and not self._stop_agreed:
            # NodeSync has no counters-only round; the parameters are identical on every
            # node here, so they are put back bit for bit after the (exact) average.
            keep = self.flat.clone()
            totals = self.sync.final_round(
                [0.0, float(reached), float(self.shutdown.requested)]
            ).totals
            self.flat.copy_(keep)
            self._count_round(totals)
            reached = bool(totals[1] > 0)
        if reached:
            if self.is_main:
                self._print(f"reached --target-accuracy {cfg.target_accuracy}%: stopping")
            else:
                self._print(f"node 0 reached --target-accuracy {cfg.target_accuracy}%: stopping")
        return reached

    def _check_identical(self) -> None:
        """Compare the final parameters of all nodes (they must be the same bits)."""
        digest = params_digest(self.flat)
        digests: list[Any] = [None] * self.nodes
        self._collective(lambda: dist.all_gather_object(digests, digest))
        if len(set(digests)) == 1:
            self._print(f"final parameters identical on all {self.nodes} nodes (sha256 {digest})")
        else:
            log.warning("final parameters differ between nodes: %s", ", ".join(digests))

    def _end_epoch(
        self, epoch: int, train_time: float, result: RunResult
    ) -> tuple[float, float] | None:
        """Test, log and checkpoint (rank 0 alone; other nodes return None)."""
        cfg = self.cfg
        if not self.is_main:
            rate = self._epoch_samples / max(train_time, 1e-9)
            self._print(
                f"epoch {epoch}: {_k(rate)} samples/s on all nodes, {train_time:.1f} s "
                "(node 0 scores the test set)"
            )
            return None
        t = time.monotonic()
        loss, correct = evaluate(
            self.model,
            self.data.test_images,
            self.data.test_labels,
            cfg.test_batch_size,
            cfg.channels_last,
        )
        n_test = self.data.test_images.shape[0]
        acc = 100.0 * correct / n_test
        rate = self._epoch_samples / max(train_time, 1e-9)
        elapsed = time.monotonic() - self._t0
        self._milestone(acc, elapsed, self.samples)
        rd = self.rundir
        rd.scalars(
            {
                "test/loss": loss,
                "test/accuracy": acc,
                "perf/samples_per_sec": rate,
                "perf/epoch_seconds": train_time,
                "perf/test_seconds": time.monotonic() - t,
                "train/lr": epoch_lr(cfg, epoch - 1),
                "train/epoch": epoch,
            },
            self.samples,
        )
        rd.writer.flush()
        self._print(
            f"epoch {epoch}: test loss {loss:.4f}, accuracy {acc:.2f}% ({correct}/{n_test}), "
            f"{_k(rate)} samples/s, {train_time:.1f} s"
        )
        result.history.append(
            {
                "epoch": epoch,
                "test_loss": loss,
                "test_accuracy": acc,
                "samples_per_sec": rate,
                "epoch_seconds": train_time,
                "elapsed": elapsed,
                "samples": self.samples,
            }
        )
        self._save_checkpoint(epoch, (loss, acc))
        return loss, acc

    # -- telemetry -----------------------------------------------------------------------
    def _consume(self, view: dict[str, torch.Tensor]) -> None:
        n = int(view["samples"])
        if n == 0:
            return
        self.samples += n
        self._unsynced += n
        self._epoch_samples += n
        loss = float(view["loss_sum"]) / n
        self._loss_window = [*self._loss_window[-31:], (loss, n)]
        self.rundir.scalars(
            {"train/loss": loss, "train/accuracy": 100.0 * int(view["correct"]) / n},
            self.samples,
        )

    def _drain(self) -> None:
        for producer in range(self.pool.producers):
            while (slot := self.pool.take(producer, 0)) is not None:
                self._consume(self.pool.view(slot))
                self.pool.release(slot)

    def _on_restart(self, rank: int) -> None:
        # Read what the dead worker had sent but we had not taken; its slots are free again.
        for slot in self.pool.reset_producer(rank):
            self._consume(self.pool.view(slot))

    def _show_progress(self, start: float) -> None:
        if not self._loss_window:
            return
        loss = sum(v * n for v, n in self._loss_window) / sum(n for _, n in self._loss_window)
        rate = self._epoch_samples / max(time.monotonic() - start, 1e-9)
        self.progress.update(
            f"epoch {self._epoch + 1}/{self.cfg.epochs}: {self._epoch_samples:,} samples, "
            f"train loss {loss:.4f}, {_k(rate)} samples/s"
        )

    # -- evaluator -----------------------------------------------------------------------
    def _start_evaluator(self) -> None:
        cfg = self.cfg
        self.evaluator = Evaluator(
            functools.partial(build_model, cfg.model),
            functools.partial(
                score_test_set,
                data_dir=str(cfg.data_dir),
                batch_size=cfg.test_batch_size,
                nhwc=cfg.channels_last,
            ),
            self.flat.numel(),
            device=cfg.eval_device,
            seed=cfg.seed,
        ).start()

    def _poll_evaluator(self, ready: Sequence[object], offer: bool = True) -> None:
        ev = self.evaluator
        if ev is None:
            return
        try:
            scored = ev.collect(ready)
        except WorkerFailure as e:
            log.warning("evaluator gave up (%s); training goes on without it", e)
            self._stop_evaluator()
            return
        for step, metrics, _params in scored:
            self.rundir.scalars({f"eval/{k}": v for k, v in metrics.items()}, step)
            offered = self._offered.pop(step, None)
            if offered is not None:
                self._milestone(metrics["accuracy"], *offered)
        now = time.monotonic()
        if offer and now - self._last_offer >= self.cfg.eval_interval:
            self._last_offer = now
            if ev.offer(self.flat, self.samples):
                self._offered[self.samples] = (now - self._t0, self.samples)
                while len(self._offered) > 16:
                    self._offered.pop(next(iter(self._offered)))

    def _final_score(self, timeout: float = 30.0) -> None:
        """Have the evaluator score the final weights too, so its curve ends where training did."""
        deadline = time.monotonic() + timeout
        offered = self.samples in self._offered
        while self.evaluator is not None and (not offered or self.samples in self._offered):
            if not offered and self.evaluator.offer(self.flat, self.samples):
                self._offered[self.samples] = (time.monotonic() - self._t0, self.samples)
                offered = True
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.shutdown.requested:
                log.warning("evaluator did not score the final weights in %.0f s", timeout)
                return
            ready = wait(self.evaluator.waitables(), timeout=min(remaining, 0.25))
            self._poll_evaluator(ready, offer=False)

    def _stop_evaluator(self) -> None:
        if self.evaluator is not None:
            self.evaluator.stop()
            self.evaluator = None

    # -- bookkeeping -------------------------------------------------------------------
    def _milestone(self, accuracy: float, elapsed: float, samples: int) -> None:
        for target in MILESTONES:
            if accuracy >= target and (
                target not in self.milestones or elapsed < self.milestones[target][0]
            ):
                # An evaluator score can arrive after a later epoch-end test: keep the earliest.
                self.milestones[target] = (elapsed, samples)

    def _report_milestones(self) -> None:
        if not self.is_main:
            return
        for target in MILESTONES:
            if target in self.milestones:
                t, n = self.milestones[target]
                self._print(
                    f"{target:g}% test accuracy first reached after {t:.1f} s, {n:,} samples"
                )

    def _save_checkpoint(self, epoch: int, final: tuple[float, float] | None) -> Path | None:
        if not self.is_main:
            return None
        return save_checkpoint(
            {
                "format": CHECKPOINT_FORMAT,
                "version": 1,
                "model": {k: v.detach().clone() for k, v in self.model.state_dict().items()},
                "optimizers": [opt.state_dict() for opt in self.optimizers],
                "config": config_dict(self.cfg),
                "epoch": epoch,
                "samples": self.samples,
                "elapsed": time.monotonic() - self._t0,
                "test_loss": None if final is None else final[0],
                "test_accuracy": None if final is None else final[1],
                "milestones": {str(k): list(v) for k, v in self.milestones.items()},
            },
            self.checkpoint_path,
        )

    def _stop_workers(self) -> None:
        if self.group is not None:
            self.group.stop(timeout=5.0, drain=self._drain)
            self._drain()
            self.group = None

    def request_stop(self) -> None:
        """First Ctrl-C/SIGTERM: raise the stop flag now, so a signalled worker is not restarted."""
        if self.group is not None:
            self.group.stop_event.set()

    def kill_all(self) -> None:
        """Second Ctrl-C: kill every child at once."""
        if self.group is not None:
            self.group.kill_now()
        if self.evaluator is not None:
            self.evaluator.group.kill_now()

    def _print(self, text: str) -> None:
        self.progress.print(text)


class _NoRunDir:
    """The run folder of nodes other than rank 0: they log nothing (rank 0 owns the run)."""

    path = None

    def scalars(self, values: dict[str, float], step: int) -> None:
        pass

    def close(self, final_metrics: dict[str, float] | None = None) -> None:
        pass


def _k(rate: float) -> str:
    return f"{rate / 1000:.1f}k" if rate >= 1000 else f"{rate:.0f}"


def train(cfg: MnistConfig, out: Any = None) -> RunResult:
    """Run training with graceful Ctrl-C/SIGTERM handling; the programmatic entry point.

    ``out`` receives the console lines (default stdout). The caller's torch thread count
    is restored afterwards (the run itself keeps the main process at one thread).
    """
    if cfg.mode == "ddp":
        from hogwild.mnist.ddp import train_ddp

        return train_ddp(cfg, out)
    threads = torch.get_num_threads()
    try:
        trainer = Trainer(cfg, out)
        try:
            with GracefulShutdown(
                on_force=trainer.kill_all, on_request=trainer.request_stop
            ) as shutdown:
                return trainer.run(shutdown)
        finally:
            trainer.close()
    finally:
        torch.set_num_threads(threads)


# ---------------------------------------------------------------------------- CLI


def _nonnegative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def _gamma(text: str) -> float:
    value = positive_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def _percent(text: str) -> float:
    value = positive_float(text)
    if value > 100:
        raise argparse.ArgumentTypeError(f"must be a percentage up to 100, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    d = MnistConfig()
    p = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Hogwild! training on MNIST: N worker processes update one shared-memory convnet\n"
            "in place, without locks. Each epoch, every worker trains on its own shard of a\n"
            "fresh shuffle and exits; then the test set is scored and a checkpoint saved.\n"
            "Ctrl-C or SIGTERM stops the workers, saves a checkpoint and exits (130/143).\n"
            "--mode ddp trains the same model synchronously (DistributedDataParallel) for\n"
            "comparison. Under torchrun, every node runs its own Hogwild! workers on its own\n"
            "shards and the nodes average their parameters every --sync-every seconds."
        ),
        epilog=(
            "examples:\n"
            f"  {PROG}                        # 2 workers, 4 epochs: ~99% test accuracy\n"
            f"  {PROG} --workers 4 --eval-interval 5\n"
            f"  {PROG} --model example --lr 0.01 --momentum 0.5 --lr-decay 1  # PyTorch's\n"
            f"  {PROG} --resume runs/<run>/checkpoint.pt --epochs 6\n"
            f"  {PROG} --mode ddp --workers 2            # synchronous baseline\n"
            "  torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d \\\n"
            "      --rdzv-endpoint HOST:29500 -m hogwild.mnist --workers 2   # on each machine\n"
            "then: tensorboard --logdir runs"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g = p.add_argument_group("training")
    g.add_argument(
        "--batch-size",
        type=positive_int,
        default=d.batch_size,
        metavar="N",
        help="samples per worker step (default %(default)s)",
    )
    g.add_argument(
        "--test-batch-size",
        type=positive_int,
        default=d.test_batch_size,
        metavar="N",
        help="batch size when scoring the test set (default %(default)s)",
    )
    g.add_argument(
        "--epochs",
        type=positive_int,
        default=d.epochs,
        metavar="N",
        help="total epochs, counting those of a resumed checkpoint (default %(default)s)",
    )
    g.add_argument(
        "--optimizer",
        choices=("sgd", "adam"),
        default=d.optimizer,
        help="shared optimizer, one per worker (default %(default)s)",
    )
    g.add_argument(
        "--lr",
        type=positive_float,
        default=d.lr,
        help="learning rate (default %(default)s; try 1e-3 with adam)",
    )
    g.add_argument(
        "--momentum",
        type=unit_float,
        metavar="M",
        default=d.momentum,
        help="SGD momentum (default %(default)s)",
    )
    g.add_argument(
        "--lr-decay",
        type=_gamma,
        default=d.lr_decay,
        metavar="GAMMA",
        help="multiply the learning rate by GAMMA after each epoch; 1 keeps it "
        "constant (default %(default)s)",
    )
    g.add_argument(
        "--model",
        choices=sorted(MODELS),
        default=d.model,
        help="convnet (80k params, reaches 99%%) or example (PyTorch example's "
        "net) (default %(default)s)",
    )
    g.add_argument("--seed", type=int, default=d.seed, help="random seed (default %(default)s)")
    g.add_argument(
        "--train-subset",
        type=positive_int,
        default=None,
        metavar="N",
        help="train on the first N images only (for quick tests)",
    )
    g.add_argument(
        "--max-batches-per-epoch",
        type=positive_int,
        default=None,
        metavar="N",
        help="stop each worker's epoch after N batches (for quick tests)",
    )
    g.add_argument(
        "--target-accuracy",
        type=_percent,
        default=None,
        metavar="PCT",
        help="stop after the first epoch whose test accuracy reaches PCT",
    )
    g.add_argument(
        "--no-channels-last",
        dest="channels_last",
        action="store_false",
        help="use NCHW convolutions instead of the faster channels-last ones",
    )

    g = p.add_argument_group("processes")
    g.add_argument(
        "--mode",
        choices=("hogwild", "ddp"),
        default=d.mode,
        help="hogwild: lock-free shared model; ddp: synchronous DistributedDataParallel "
        "baseline, --workers ranks (default %(default)s)",
    )
    g.add_argument(
        "--workers",
        "--num-processes",
        type=positive_int,
        default=d.workers,
        metavar="N",
        help="Hogwild! worker processes (per node under torchrun), or DDP ranks "
        "(default %(default)s)",
    )
    g.add_argument(
        "--threads-per-worker",
        type=positive_int,
        default=d.threads_per_worker,
        metavar="N",
        help="torch threads in each worker; keep workers x threads <= cores (default %(default)s)",
    )
    g.add_argument(
        "--start-method",
        choices=("fork", "spawn", "forkserver"),
        default=d.start_method,
        help="how workers are started; spawn and forkserver pay a start-up every epoch; "
        "DDP ranks are always spawned (default %(default)s)",
    )
    g.add_argument(
        "--on-worker-failure",
        choices=("restart", "abort"),
        default=d.on_worker_failure,
        help="a dead worker is restarted on its shard, or the run stops; a dead DDP "
        "rank always stops the run (default %(default)s)",
    )
    g.add_argument(
        "--max-restarts",
        type=nonnegative_int,
        default=d.max_restarts,
        metavar="N",
        help="worker restarts allowed in the whole run (default %(default)s)",
    )
    g.add_argument(
        "--eval-interval",
        type=_nonnegative_float,
        default=d.eval_interval,
        metavar="SECONDS",
        help="also score the test set every SECONDS during training in a separate "
        "evaluator process; 0 = off; hogwild mode only (default %(default)s)",
    )
    g.add_argument(
        "--eval-device",
        choices=("auto", "cpu", "cuda"),
        default=d.eval_device,
        help="the evaluator's device; auto = CUDA if present (default %(default)s)",
    )

    g = p.add_argument_group("several machines (under torchrun) and DDP")
    g.add_argument(
        "--sync-every",
        type=positive_float,
        default=d.sync_every,
        metavar="SECONDS",
        help="under torchrun: seconds between parameter averages across nodes "
        "(default %(default)s)",
    )
    g.add_argument(
        "--dist-timeout",
        type=positive_float,
        default=d.dist_timeout,
        metavar="SECONDS",
        help="seconds before a silent node or DDP rank counts as dead (default %(default)s)",
    )

    g = p.add_argument_group("files")
    g.add_argument(
        "--data-dir",
        default=d.data_dir,
        metavar="DIR",
        help="MNIST .gz files; downloaded here if missing (default %(default)s, or $HOGWILD_DATA)",
    )
    g.add_argument(
        "--no-download",
        dest="download",
        action="store_false",
        help="fail instead of downloading missing MNIST files",
    )
    g.add_argument(
        "--logdir",
        default=d.logdir,
        metavar="DIR",
        help="parent of the run folders (default %(default)s)",
    )
    g.add_argument(
        "--run-name", default=None, metavar="NAME", help="run folder suffix (default mnist)"
    )
    g.add_argument(
        "--checkpoint",
        default=None,
        metavar="PATH",
        help="checkpoint file, rewritten each epoch (default <run folder>/checkpoint.pt)",
    )
    g.add_argument(
        "--resume",
        default=None,
        metavar="PATH",
        help="continue from this checkpoint: weights, optimizer state, epoch count",
    )
    g.add_argument(
        "--log-interval",
        type=positive_int,
        default=d.log_interval,
        metavar="N",
        help="batches between a worker's telemetry messages (default %(default)s)",
    )
    return p


def config_from_args(args: argparse.Namespace) -> MnistConfig:
    return MnistConfig(**{k: v for k, v in vars(args).items()})


def _main(args: argparse.Namespace) -> int:
    try:
        return train(config_from_args(args)).exit_code
    except NodeFailure as e:  # while joining the other nodes, before training
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # before or after the graceful-shutdown window
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


def main(argv: list[str] | None = None) -> int:
    """Console entry point (``hogwild-mnist``); returns the exit code."""
    return run_cli(build_parser(), _main, argv)
