"""The app's checkpoint format: one layout for both modes, what ``--resume`` accepts, and
where a run may write."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from torch import nn

from hogwild.checkpoint import load_checkpoint, save_checkpoint_or_warn
from hogwild.distributed import launched_by_torchrun
from hogwild.errors import UsageError
from hogwild.files import check_file_writable, check_writable
from hogwild.mnist.config import PROG, MnistConfig
from hogwild.mnist.report import EpochScore
from hogwild.rundir import config_dict

CHECKPOINT_FORMAT = "hogwild-mnist"


def load_resume(cfg: MnistConfig) -> dict[str, Any]:
    """The ``--resume`` checkpoint, checked against this run's mode, model and optimizer."""
    path = cfg.resume
    assert path is not None, "load_resume is for --resume"
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


def resume_scaler(ck: dict[str, Any], cfg: MnistConfig) -> dict[str, Any] | None:
    """The checkpoint's ``GradScaler`` state for an ``--amp fp16`` resume, or None (another
    ``--amp``, or a checkpoint without one: older, or not fp16); malformed is one line."""
    state = ck.get("scaler")
    if cfg.amp != "fp16" or state is None:
        return None
    scale = state.get("scale") if isinstance(state, dict) else None
    tracker = state.get("_growth_tracker") if isinstance(state, dict) else None
    if (
        not isinstance(scale, float)
        or not math.isfinite(scale)
        or scale <= 0
        or not isinstance(tracker, int)
        or not {"growth_factor", "backoff_factor", "growth_interval"} <= state.keys()
    ):
        raise UsageError(f"{cfg.resume}: its GradScaler state is damaged ({state!r:.100})")
    return state


def check_output_paths(cfg: MnistConfig) -> None:
    """Refuse an unusable run folder or ``--checkpoint`` path now, as one line (exit 2).

    Called before the data is read (or downloaded) and before any worker or DDP rank
    starts, and leaving no trace, so a refused run never leaves a half-made run folder
    behind. Only the process that will write them checks (rank 0 under torchrun).
    """
    if launched_by_torchrun() and os.environ.get("RANK") != "0":
        return
    run_dir = Path(cfg.resume).parent if cfg.resume else None
    if run_dir is not None and (run_dir / "config.json").is_file():
        check_writable(run_dir, "run folder being resumed")  # the run logs on into it
    else:
        check_writable(cfg.logdir, "--logdir folder")
    if cfg.checkpoint is not None:
        check_file_writable(cfg.checkpoint, "--checkpoint file")


def run_checkpoint(
    cfg: MnistConfig,
    model: nn.Module,
    optimizers: list[dict[str, Any]],
    *,
    epoch: int,
    samples: int,
    elapsed: float,
    final: EpochScore | None,
    milestones: dict[float, tuple[float, int]],
    scaler: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Both modes write this layout (``optimizers``: hogwild mode's one state per worker, or
    DDP's one ``torch.optim`` state); ``config.mode`` says which mode may resume it.
    ``scaler``: fp16's ``GradScaler`` state (ddp mode), so a resume keeps its loss scale."""
    return {
        "format": CHECKPOINT_FORMAT,
        "version": 1,
        "model": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
        "optimizers": optimizers,
        "config": config_dict(cfg),
        "epoch": epoch,
        "samples": samples,
        "elapsed": elapsed,
        "test_loss": None if final is None else final.loss,
        "test_accuracy": None if final is None else final.accuracy,
        "milestones": {str(k): list(v) for k, v in milestones.items()},
        "scaler": scaler,
    }


def save_run_checkpoint(path: Path, cfg: MnistConfig, *args: Any, **kw: Any) -> Path | None:
    """Write :func:`run_checkpoint` at ``path``. A failed write is one warning line on
    stderr and None: the run goes on (the next epoch's write may succeed) and the previous
    checkpoint stays intact."""
    return save_checkpoint_or_warn(run_checkpoint(cfg, *args, **kw), path, PROG)
