"""The app's checkpoint format: one layout for both modes, and what ``--resume`` accepts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from hogwild.checkpoint import load_checkpoint, save_checkpoint
from hogwild.errors import UsageError
from hogwild.mnist.config import PROG, MnistConfig
from hogwild.rundir import config_dict

CHECKPOINT_FORMAT = "hogwild-mnist"


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


def save_run_checkpoint(
    path: Path,
    cfg: MnistConfig,
    model: nn.Module,
    optimizers: list[dict[str, Any]],
    *,
    epoch: int,
    samples: int,
    elapsed: float,
    final: tuple[float, float] | None,
    milestones: dict[float, tuple[float, int]],
) -> Path:
    """Both modes write this layout (``optimizers``: hogwild mode's one state per worker, or
    DDP's one ``torch.optim`` state); ``config.mode`` says which mode may resume it."""
    return save_checkpoint(
        {
            "format": CHECKPOINT_FORMAT,
            "version": 1,
            "model": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
            "optimizers": optimizers,
            "config": config_dict(cfg),
            "epoch": epoch,
            "samples": samples,
            "elapsed": elapsed,
            "test_loss": None if final is None else final[0],
            "test_accuracy": None if final is None else final[1],
            "milestones": {str(k): list(v) for k, v in milestones.items()},
        },
        path,
    )
