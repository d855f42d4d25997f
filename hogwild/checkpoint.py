"""Checkpoints: written atomically (:func:`hogwild.files.write_atomic`), read as data
(``weights_only``), a damaged or foreign file refused in one line."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from hogwild.errors import UsageError
from hogwild.files import os_reason, write_atomic


def save_checkpoint(obj: dict[str, Any], path: str | Path) -> Path:
    """Write ``obj`` to ``path`` so that a crash mid-write never leaves a broken file there."""
    return write_atomic(path, lambda f: torch.save(obj, f))


def save_checkpoint_or_warn(
    obj: dict[str, Any], path: str | Path, prog: str, say: Callable[[str], None] | None = None
) -> Path | None:
    """A mid-run checkpoint: a failed write is one warning line and ``None``, not the end.

    Hours of training are worth more than one checkpoint: a full disk may be freed before
    the next write, and the atomic write has left the previous checkpoint intact, which the
    line says (or that none is there, e.g. when the folder was removed). ``say`` prints
    the line (default: stderr), so that a live progress line can be cleared first.
    """
    try:
        return save_checkpoint(obj, path)
    except OSError as e:
        path = Path(path)
        reason = os_reason(e)
        for folder in path.parents:  # "File exists" would not say which file is in the way
            if folder.exists():
                if not folder.is_dir():
                    reason = f"{folder} is a file, not a folder"
                break
        kept = (
            "the previous one there is intact"
            if path.is_file()
            else "no earlier checkpoint is there"
        )
        line = f"{prog}: warning: checkpoint {path} not written ({reason}); {kept}"
        if say is None:
            print(line, file=sys.stderr, flush=True)
        else:
            say(line)
        return None


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
    if missing and isinstance(obj.get("format"), str):  # another app's (hogwild-mnist)
        raise UsageError(
            f"{path}: a {obj['format']} checkpoint, not one this command reads "
            f"(it lacks {', '.join(missing)})"
        )
    if missing:
        raise UsageError(f"{path}: checkpoint lacks {', '.join(missing)}")
    return obj
