"""``--strategy ddp``: the synchronous baseline, on the same model, data and logging.

The parent starts ``--workers`` ranks with ``torch.multiprocessing``: forked on the CPU
(``--start-method``), spawned with a GPU per rank (CUDA does not survive fork), the task
(model, datasets, objective, metrics) then travelling by pickle and shared tensors by
handle. Each rank joins a process group (gloo, or NCCL when every rank has a GPU) over
127.0.0.1, trains the model wrapped in ``DistributedDataParallel`` on its
``DistributedSampler`` shard of each epoch and steps ``torch.optim`` twins of the shared
optimizers (sparse tables: SGD, Adagrad, SparseAdam on the ranks' gathered rows): every
step waits for everyone's gradients, which is exactly the cost Hogwild! avoids. Rank 0
alone scores, logs and checkpoints, and sends its console lines to the parent.

Ctrl-C or SIGTERM sets a flag the ranks agree on at their next telemetry round; rank 0
then saves a checkpoint and everyone leaves. A rank that dies stops the run (exit 1):
its peers cannot go on without it.
"""

from __future__ import annotations

import importlib
import io
import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.multiprocessing as mp
from torch import nn
from torch.multiprocessing.spawn import (
    ProcessContext,
    ProcessException,
    ProcessExitedException,
    ProcessRaisedException,
)

from hogwild.console import Progress
from hogwild.distributed import launched_by_torchrun
from hogwild.errors import UsageError
from hogwild.precision import check_amp
from hogwild.procs import SharedFlag, resolve_start_method
from hogwild.sharing import sparse_parameters
from hogwild.shutdown import GracefulShutdown
from hogwild.supervised.callbacks import Callback
from hogwild.supervised.checkpoints import load_resume, resume_scaler, resumed_run_dir
from hogwild.supervised.config import FitConfig
from hogwild.supervised.ddp_rank import rank_main
from hogwild.supervised.devices import ddp_on_cuda
from hogwild.supervised.optimizers import torch_optimizers
from hogwild.supervised.position import resume_position
from hogwild.supervised.report import App, FitResult
from hogwild.supervised.task import Task, one_line

log = logging.getLogger(__name__)

GRACE_S = 5.0  # after a rank fails: how long the others get to exit before SIGTERM, SIGKILL


def train_ddp(
    cfg: FitConfig,
    task: Task,
    app: App,
    callbacks: Sequence[Callback] = (),
    out: Any = None,
) -> FitResult:
    """Spawn the ranks, relay rank 0's console lines, stop them cleanly."""
    progress = Progress(stream=out or sys.stdout)
    if ddp_on_cuda(cfg) and sparse_parameters(task.model):
        raise UsageError(
            "sparse embedding gradients cannot be all-reduced by NCCL: run ddp with "
            "--device cpu, or use the hogwild strategy"
        )
    state = _resume_state(cfg, task, app, progress.print) if cfg.resume else None
    if state is not None and state["epoch"] >= cfg.epochs:
        progress.print(
            f"{cfg.resume} already holds {state['epoch']} epochs (--epochs {cfg.epochs}): "
            "nothing to train"
        )
        return FitResult(0, None, None, state["epoch"], state["samples"], model=task.model)

    # Spawned ranks cost a Python start and a torch import each (~4 s on a busy 2-core box).
    method = "spawn" if ddp_on_cuda(cfg) else cfg.start_method
    if method == "fork":
        torch.set_num_threads(1)  # GNU OpenMP does not survive fork (see HogwildFit)
        # DDP's constructor imports torch._dynamo (2-5 s here): once in this process, then
        # inherited by every rank of every later run, instead of once per rank per run.
        importlib.import_module("torch._dynamo")
    ctx = mp.get_context(method)
    stop = SharedFlag(ctx)
    messages = ctx.SimpleQueue()
    args = (cfg, task, app, list(callbacks), _free_port(), state, stop, messages, os.getpid())
    result: FitResult | None = None
    exit_code = 0
    with GracefulShutdown(on_request=stop.set) as shutdown:
        context = mp.start_processes(
            rank_main, args=args, nprocs=cfg.workers, join=False, start_method=method
        )
        shutdown.on_force = lambda: _kill(context)
        try:
            finished = False
            while not finished:
                try:
                    finished = context.join(timeout=0.1, grace_period=GRACE_S)
                finally:
                    result = _relay(messages, progress, task.model) or result
        except ProcessException as e:
            progress.close()
            if isinstance(e, ProcessRaisedException):
                log.error("%s", e.msg.strip())
            print(f"{app.prog}: error: {_describe(e)}", file=sys.stderr, flush=True)
            exit_code = 1
        finally:
            _reap(context)
            progress.close()
    if result is None:
        result = FitResult(exit_code, None, None, 0, 0)
    result.model = task.model
    if exit_code:
        result.exit_code = exit_code
    if shutdown.requested:
        result.exit_code = shutdown.exit_code
    return result


def check_ddp(cfg: FitConfig) -> None:
    """What ddp refuses before anything is read (:func:`~hogwild.supervised.api.preflight`)."""
    if launched_by_torchrun():
        raise UsageError("--strategy ddp starts its own ranks: run it without torchrun")
    cfg.start_method = resolve_start_method(cfg.start_method)
    if cfg.eval_interval > 0:
        raise UsageError("--eval-interval is for the hogwild strategy (ddp scores each epoch)")
    check_amp(
        cfg.amp,
        "cuda" if ddp_on_cuda(cfg) else "cpu",
        why_cpu="ddp trains on the CPU without a GPU for every rank",
    )


def _resume_state(
    cfg: FitConfig, task: Task, app: App, say: Callable[[str], None]
) -> dict[str, Any]:
    """The checkpoint's weights, optimizer states and position inside its epoch, checked
    here (one line, exit 2) so that the ranks only load what is known to fit."""
    ck = load_resume(cfg, app)
    optimizers = torch_optimizers(cfg, task.model)
    try:
        task.model.load_state_dict(ck["model"])
        saved = ck["optimizers"]["torch"]
        if len(saved) != len(optimizers):
            raise ValueError(f"{len(saved)} optimizer states for {len(optimizers)} optimizers")
        for opt, sd in zip(optimizers, saved, strict=True):
            opt.load_state_dict(sd)
    except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as e:
        raise UsageError(f"{cfg.resume}: does not fit this model ({one_line(e)})") from None
    return {
        "model": task.model.state_dict(),
        "optimizers": [opt.state_dict() for opt in optimizers],
        "epoch": int(ck["epoch"]),
        "samples": int(ck.get("samples", 0)),
        "elapsed": float(ck.get("elapsed", 0.0)),
        "milestones": {float(k): tuple(v) for k, v in ck.get("milestones", {}).items()},
        "history": list(ck.get("history", [])),
        "metrics": dict(ck.get("metrics", {})),
        "best": ck.get("best"),
        "scaler": resume_scaler(ck, cfg),
        "run_dir": resumed_run_dir(cfg),
        "position": resume_position(ck, cfg, len(task.train), say),  # type: ignore[arg-type]
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _relay(messages: Any, progress: Progress, model: nn.Module) -> FitResult | None:
    """Print what rank 0 sent; its trained weights go into ``model`` (the caller's, as in
    hogwild); return its final result if it came."""
    result = None
    while not messages.empty():
        kind, payload = messages.get()
        if kind == "print":
            progress.print(payload)
        elif kind == "progress":
            progress.update(payload)
        elif kind == "weights":
            model.load_state_dict(torch.load(io.BytesIO(payload), weights_only=True))
        elif kind == "result":
            result = payload
    return result


def _describe(e: ProcessException) -> str:
    if isinstance(e, ProcessExitedException):
        if e.signal_name:
            return f"DDP rank {e.error_index} was killed by {e.signal_name}; the run stops"
        return f"DDP rank {e.error_index} exited with code {e.exit_code}; the run stops"
    lines = [line for line in str(e).strip().splitlines() if line.strip()]
    return f"DDP rank {e.error_index} failed ({lines[-1].strip()[:300] if lines else 'error'})"


def _kill(context: ProcessContext) -> None:
    for p in context.processes:
        if p.is_alive():
            p.kill()


def _reap(context: ProcessContext) -> None:
    """No rank outlives the parent's run: SIGTERM (a stop request), then SIGKILL."""
    for step in (lambda p: p.terminate(), lambda p: p.kill()):
        alive = [p for p in context.processes if p.is_alive()]
        for p in alive:
            step(p)
        deadline = time.monotonic() + GRACE_S
        for p in alive:
            p.join(max(0.0, deadline - time.monotonic()))
    for p in context.processes:
        p.join(0)
