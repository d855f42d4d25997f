"""``--mode ddp``: the synchronous baseline, on the same model, data and logging.

The parent loads MNIST once into shared memory and starts ``--workers`` ranks with
``torch.multiprocessing`` (spawn); the shared tensors travel to them by handle, so no
rank decodes a file. Each rank joins a process group (gloo, or NCCL when every rank has
a GPU) over 127.0.0.1, trains the same :class:`~hogwild.mnist.model.ConvNet` wrapped in
``DistributedDataParallel`` on its ``DistributedSampler`` shard of each epoch, and steps a
standard ``torch.optim`` SGD or Adam: every step waits for everyone's gradients, which is
exactly the cost Hogwild! avoids. Every ``--log-interval`` batches the ranks all-reduce
their telemetry (and a stop flag, so they stop at the same step); rank 0 alone tests
after each epoch, writes TensorBoard (the tags of hogwild mode) and checkpoints, and
sends its console lines to the parent, which prints them.

Ctrl-C or SIGTERM sets a flag that the ranks agree on at their next telemetry round;
rank 0 then saves a checkpoint and everyone leaves the process group. A rank that dies
stops the run (exit 1) instead of being restarted: its peers cannot go on without it.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import torch.multiprocessing as mp
from torch.multiprocessing.spawn import (
    ProcessContext,
    ProcessException,
    ProcessExitedException,
    ProcessRaisedException,
)

from hogwild.console import Progress
from hogwild.distributed import launched_by_torchrun
from hogwild.errors import UsageError
from hogwild.mnist.checkpoints import check_output_paths, load_resume, resume_scaler
from hogwild.mnist.config import PROG, MnistConfig
from hogwild.mnist.data import load_data
from hogwild.mnist.ddp_rank import make_torch_optimizer, rank_main, use_cuda
from hogwild.mnist.model import build_model
from hogwild.mnist.report import MnistResult
from hogwild.precision import check_amp
from hogwild.procs import SharedFlag
from hogwild.shutdown import GracefulShutdown

log = logging.getLogger(__name__)

GRACE_S = 5.0  # after a rank fails: how long the others get to exit before SIGTERM, SIGKILL


def train_ddp(cfg: MnistConfig, out: Any = None) -> MnistResult:
    """Run ``--mode ddp``: spawn the ranks, relay rank 0's console lines, stop them cleanly."""
    progress = Progress(stream=out or sys.stdout)
    if launched_by_torchrun():
        raise UsageError("--mode ddp starts its own ranks: run it without torchrun")
    if cfg.eval_interval > 0:
        raise UsageError(
            "--eval-interval is for --mode hogwild (in ddp mode rank 0 tests after each epoch)"
        )
    check_amp(
        cfg.amp,
        "cuda" if use_cuda(cfg.workers) else "cpu",
        why_cpu="ddp mode trains on the CPU without a GPU for every rank",
    )
    check_output_paths(cfg)  # rank 0 writes them: fail here, in one line, before it starts
    state = _resume_state(cfg) if cfg.resume else None
    if state is not None and state["epoch"] >= cfg.epochs:
        progress.print(
            f"{cfg.resume} already holds {state['epoch']} epochs (--epochs {cfg.epochs}): "
            "nothing to train"
        )
        return MnistResult(0, None, None, state["epoch"], state["samples"])
    data = load_data(cfg.data_dir, cfg.download, cfg.train_subset)

    ctx = mp.get_context("spawn")
    stop = SharedFlag(ctx)
    messages = ctx.SimpleQueue()
    args = (cfg, data, _free_port(), state, stop, messages, os.getpid())
    result: MnistResult | None = None
    exit_code = 0
    with GracefulShutdown(on_request=stop.set) as shutdown:
        context = mp.start_processes(
            rank_main, args=args, nprocs=cfg.workers, join=False, start_method="spawn"
        )
        shutdown.on_force = lambda: _kill(context)
        try:
            finished = False
            while not finished:
                try:
                    finished = context.join(timeout=0.1, grace_period=GRACE_S)
                finally:
                    result = _relay(messages, progress) or result
        except ProcessException as e:
            progress.close()
            if isinstance(e, ProcessRaisedException):
                log.error("%s", e.msg.strip())
            print(f"{PROG}: error: {_describe(e)}", file=sys.stderr, flush=True)
            exit_code = 1
        finally:
            _reap(context)
            progress.close()
    if result is None:
        result = MnistResult(exit_code, None, None, 0, 0)
    if exit_code:
        result.exit_code = exit_code
    if shutdown.requested:
        result.exit_code = shutdown.exit_code
    return result


def _resume_state(cfg: MnistConfig) -> dict[str, Any]:
    """The checkpoint's weights and optimizer state, checked here (one line, exit 2) so that
    the ranks only load what is known to fit."""
    assert cfg.resume is not None, "_resume_state is for --resume"
    ck = load_resume(cfg)
    model = build_model(cfg.model)
    optimizer = make_torch_optimizer(cfg, model.parameters())
    try:
        model.load_state_dict(ck["model"])
        optimizer.load_state_dict(ck["optimizers"][0])
    except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as e:
        reason = " ".join(str(e).split())[:300] or type(e).__name__
        raise UsageError(f"{cfg.resume}: does not fit this model ({reason})") from None
    run_dir = Path(cfg.resume).parent
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "epoch": int(ck["epoch"]),
        "samples": int(ck.get("samples", 0)),
        "elapsed": float(ck.get("elapsed", 0.0)),
        "milestones": {float(k): tuple(v) for k, v in ck.get("milestones", {}).items()},
        "scaler": resume_scaler(ck, cfg),
        # keep logging into the run being resumed
        "run_dir": run_dir if (run_dir / "config.json").is_file() else None,
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _relay(messages: Any, progress: Progress) -> MnistResult | None:
    """Print what rank 0 sent; return its final result if it came."""
    result = None
    while not messages.empty():
        kind, payload = messages.get()
        if kind == "print":
            progress.print(payload)
        elif kind == "progress":
            progress.update(payload)
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
