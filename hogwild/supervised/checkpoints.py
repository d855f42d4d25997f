"""The trainer's checkpoint: one layout for both strategies, what ``--resume`` accepts,
where a run may write, and :func:`load`, the trained model back from a file."""

from __future__ import annotations

import math
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from torch import nn

from hogwild.checkpoint import load_checkpoint
from hogwild.distributed import launched_by_torchrun
from hogwild.errors import UsageError
from hogwild.files import check_file_writable, check_writable, os_reason, write_atomic
from hogwild.refs import resolve
from hogwild.rundir import config_dict
from hogwild.supervised.config import FitConfig
from hogwild.supervised.position import EpochPosition
from hogwild.supervised.report import App
from hogwild.supervised.task import build_model, one_line

BEST = "best.pt"
REQUIRED = ("format", "model", "optimizers", "epoch", "config")


def read(path: str | Path, app: App) -> dict[str, Any]:
    """A checkpoint of ``app``'s, or a one-line :class:`UsageError`."""
    try:
        ck = load_checkpoint(path, required=REQUIRED)
    except UsageError:
        raise
    except Exception as e:  # the weights-only unpickler can raise anything on garbage
        raise UsageError(f"{path}: not a readable checkpoint ({one_line(e, 200)})") from None
    if ck["format"] != app.checkpoint_format or not isinstance(ck["config"], dict):
        raise UsageError(f"{path}: not a {app.prog} checkpoint (format {ck['format']!r})")
    return ck


def load_resume(cfg: FitConfig, app: App) -> dict[str, Any]:
    """The ``--resume`` checkpoint, checked against this run's strategy and optimizer."""
    assert cfg.resume is not None, "load_resume is for --resume"
    ck = read(cfg.resume, app)
    saved = ck["config"]
    for key in ("strategy", "optimizer"):
        if saved.get(key) != getattr(cfg, key):
            flag = "--" + key
            raise UsageError(
                f"{cfg.resume} was trained with {flag} {saved.get(key)}, not "
                f"{getattr(cfg, key)}; pass {flag} {saved.get(key)}"
            )
    return ck


def resume_scaler(ck: dict[str, Any], cfg: FitConfig) -> dict[str, Any] | None:
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


def resumed_run_dir(cfg: FitConfig) -> Path | None:
    """The run folder a ``--resume checkpoint.pt`` logs on into (a best.pt starts anew)."""
    if cfg.resume and Path(cfg.resume).name != BEST:
        folder = Path(cfg.resume).parent
        if (folder / "config.json").is_file():
            return folder
    return None


def check_output_paths(cfg: FitConfig) -> None:
    """Refuse an unusable run folder or ``--checkpoint`` path now, in one line, before the
    data is read and any worker or rank starts. Only the process that writes checks."""
    if launched_by_torchrun() and os.environ.get("RANK") != "0":
        return
    run_dir = resumed_run_dir(cfg)
    if run_dir is not None:
        check_writable(run_dir, "run folder being resumed")
    else:
        check_writable(cfg.logdir, "--logdir folder")
    if cfg.checkpoint is not None:
        check_file_writable(cfg.checkpoint, "--checkpoint file")


def keep_best(saved: Path | None, prog: str) -> Path | None:
    """``best.pt`` beside the checkpoint just written, as a copy of it (atomic); nothing
    when that write failed (its warning said so) or, with a warning, when the copy does."""
    if saved is None:
        return None
    best = saved.parent / BEST
    try:
        with open(saved, "rb") as src:
            return write_atomic(best, lambda f: shutil.copyfileobj(src, f))
    except OSError as e:
        print(f"{prog}: warning: {best} not written ({os_reason(e)})", file=sys.stderr, flush=True)
        return None


def checkpoint(
    app: App,
    cfg: FitConfig,
    model: nn.Module,
    optimizers: dict[str, Any],
    book: dict[str, Any],
    *,
    epoch: int,
    samples: int,
    elapsed: float,
    scaler: dict[str, Any] | None = None,
    position: EpochPosition | None = None,
) -> dict[str, Any]:
    """Both strategies write this layout; ``config.strategy`` says which may resume it.
    ``book``: :meth:`EpochBook.state`; its last scores are also top-level keys
    (``val_loss``, ``val_accuracy``). ``position``: where a run cut inside an epoch was."""
    return {
        "format": app.checkpoint_format,
        "version": 1,
        "model": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
        "optimizers": optimizers,
        "config": config_dict(cfg),
        "epoch": epoch,
        "samples": samples,
        "elapsed": elapsed,
        **book,
        **{f"{book['split']}_{k}": v for k, v in book["metrics"].items()},
        "scaler": scaler,
        "position": None if position is None else position.state(),
    }


def load(path: str | Path, model: nn.Module | Any = None, app: App | None = None) -> nn.Module:
    """The model a checkpoint holds, in eval mode.

    ``model``: a module (or a callable returning one) of the checkpoint's architecture,
    into which the weights are loaded; by default the run's own ``--model`` reference is
    imported and called, which needs the run to have been made with one.
    """
    app = app or App()
    ck = read(path, app)
    if model is None:
        ref = ck["config"].get("model")
        if not isinstance(ref, str) or ":" not in ref:
            raise UsageError(
                f"{path}: its run was given a model object, not a module:function: pass "
                "load(path, model=...) with a module of the same architecture"
            )
        model = resolve(ref, "model")
    module = build_model(model, "the model factory")
    try:
        module.load_state_dict(ck["model"])
    except (RuntimeError, KeyError, ValueError) as e:
        raise UsageError(f"{path}: does not fit this model ({one_line(e)})") from None
    return module.eval()
