"""Files a run writes: written atomically, unusable places refused before the run starts.

Files go to a temporary name in the same folder and are renamed into place only once
complete, so a crash, a full disk or a removed folder never leaves a broken file where a
good one was. Where a run will write is checked before it starts (:func:`check_writable`),
so an unusable path is one line and exit code 2, not a traceback after the first epoch.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

from hogwild.errors import UsageError


def os_reason(e: OSError) -> str:
    """``No such file or directory`` rather than ``[Errno 2] No such file or directory: '/x'``."""
    return e.strerror or str(e) or type(e).__name__


def make_dirs(folder: str | Path, what: str) -> list[Path]:
    """Create ``folder`` and its missing parents; return those created, outermost first.

    The caller removes them again (:func:`remove_created`) if what it meant to write there
    fails, so a refused run leaves no empty folders behind. Any problem is a UsageError
    that names ``what`` (e.g. ``run folder``) and the path at fault.
    """
    folder = Path(folder)
    missing: list[Path] = []
    probe = folder
    try:
        while not probe.exists() and probe != probe.parent:
            if probe.is_symlink():  # a dangling link: mkdir would fail with a confusing error
                raise UsageError(f"cannot create the {what} {folder}: {probe} is a broken link")
            missing.append(probe)
            probe = probe.parent
        is_dir = probe.is_dir()
    except OSError as e:  # e.g. no permission to look inside a parent
        raise UsageError(f"cannot create the {what} {folder}: {os_reason(e)}") from None
    if not is_dir:
        raise UsageError(f"cannot create the {what} {folder}: {probe} is a file, not a folder")
    created: list[Path] = []
    for path in reversed(missing):
        try:
            path.mkdir()
        except FileExistsError:  # made meanwhile by someone else: fine, and not ours to remove
            continue
        except OSError as e:
            remove_created(created)
            at = "" if path == folder else f"making {path}: "
            raise UsageError(f"cannot create the {what} {folder}: {at}{os_reason(e)}") from None
        created.append(path)
    return created


def remove_created(created: list[Path]) -> None:
    """Undo :func:`make_dirs`: the outermost folder it created goes, with anything in it."""
    if created:
        shutil.rmtree(created[0], ignore_errors=True)


def check_writable(folder: str | Path, what: str) -> None:
    """Refuse, as a UsageError, a folder in which no file can be created; leave no trace.

    The folder (and missing parents) is created, a temporary file written and removed,
    and the folders this made are removed again: the run creates them for real later.
    """
    created = make_dirs(folder, what)
    try:
        fd, tmp = tempfile.mkstemp(prefix=".write-test.", dir=folder)
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise UsageError(f"cannot write in the {what} {folder}: {os_reason(e)}") from None
    finally:
        remove_created(created)


def check_file_writable(path: str | Path, what: str) -> None:
    """Refuse a file path the run could not write (a folder, or in an unusable folder)."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"the {what} {path} is a folder; give a file path")
    check_writable(path.parent, f"{what}'s folder")


def write_atomic(path: str | Path, write: Callable[[IO[bytes]], object]) -> Path:
    """Call ``write`` on a temporary file next to ``path``, sync it, rename it to ``path``.

    Either ``path`` holds the complete new content afterwards, or (on any error, which is
    raised) it is as it was and no temporary file is left. ``os.replace`` is atomic on
    POSIX and Windows.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path
