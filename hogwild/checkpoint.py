"""Checkpoints: written atomically, read as data (``weights_only=True``), never code."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from hogwild.errors import UsageError


def save_checkpoint(obj: dict[str, Any], path: str | Path) -> Path:
    """Write ``obj`` to ``path`` so that a crash mid-write never leaves a broken file there.

    The data goes to a temporary file in the same folder, is flushed to disk, and only
    then renamed over ``path`` (``os.replace`` is atomic on POSIX and Windows).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def load_checkpoint(path: str | Path, required: tuple[str, ...] = ()) -> dict[str, Any]:
    """Load a checkpoint as plain data; any problem becomes a one-line :class:`UsageError`."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"checkpoint not found: {path}")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch.load raises many kinds (IndexError for some text files)
        reason = " ".join(str(e).split()) or type(e).__name__
        if reason.startswith("Weights only load failed"):
            reason = "corrupt, or not written by torch.save, or holds code rather than data"
        raise UsageError(f"{path}: not a readable checkpoint ({reason[:200]})") from None
    if not isinstance(obj, dict):
        raise UsageError(f"{path}: not a checkpoint of this project (a {type(obj).__name__})")
    missing = [k for k in required if k not in obj]
    if missing:
        raise UsageError(f"{path}: checkpoint lacks {', '.join(missing)}")
    return obj
