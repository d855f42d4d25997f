"""One folder per run under ``runs/``: TensorBoard events, the config, checkpoints.

Folder names start with the date and time, so ``ls runs`` sorts them by age, and carry
the application and its main setting, so they are recognisable in TensorBoard's list.
A folder that cannot be created or written is a one-line :class:`UsageError`.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import math
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch.utils.tensorboard import SummaryWriter

from hogwild.checkpoint import make_dirs, os_reason, remove_created, write_atomic
from hogwild.errors import UsageError


def config_dict(config: Any) -> dict[str, Any]:
    """A JSON-able dict from a dataclass config (paths and tuples become strings/lists)."""
    d = dataclasses.asdict(config) if dataclasses.is_dataclass(config) else dict(config)
    return json.loads(json.dumps(d, default=str))


class RunDir:
    """The run's folder and its one ``SummaryWriter``; only the main process writes here."""

    def __init__(
        self,
        logdir: str | Path,
        name: str,
        config: Any,
        run_name: str | None = None,
        resume_dir: str | Path | None = None,
    ) -> None:
        """Create the folder, ``config.json`` and the writer, or raise a one-line UsageError.

        This runs before any worker starts; if any part fails, the folders it created are
        removed again, so a refused run leaves nothing half-written behind.
        """
        self.config = config_dict(config)
        self._failed = False
        created: list[Path] = []
        if resume_dir is not None:
            self.path = Path(resume_dir)
        else:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", run_name or name).strip("-")
            self.path = _unique(Path(logdir) / f"{stamp}_{slug}")
            created = make_dirs(self.path, "run folder")
        text = json.dumps(self.config, indent=2) + "\n"
        try:
            write_atomic(self.path / "config.json", lambda f: f.write(text.encode()))
            self.writer = SummaryWriter(str(self.path))
            table = "\n".join(f"| {k} | `{v}` |" for k, v in self.config.items())
            self.writer.add_text("config", "| key | value |\n|---|---|\n" + table, 0)
        except OSError as e:
            remove_created(created)
            reason = os_reason(e)
            raise UsageError(f"cannot write in the run folder {self.path}: {reason}") from None

    def scalar(self, tag: str, value: float, step: int) -> None:
        self._write(lambda: self.writer.add_scalar(tag, value, step))

    def scalars(self, values: dict[str, float], step: int) -> None:
        for tag, value in values.items():
            self.scalar(tag, value, step)

    def flush(self) -> None:
        """Get what was logged onto disk now (TensorBoard shows it without waiting)."""
        self._write(self.writer.flush)

    def close(self, final_metrics: dict[str, float] | None = None) -> None:
        """Write the hparams summary (config against final metrics) and close the writer."""
        if final_metrics:
            hparams = {
                k: v for k, v in self.config.items() if isinstance(v, (int, float, str, bool))
            }
            metrics = {f"hparam/{k}": v for k, v in final_metrics.items()}
            self._write(lambda: self.writer.add_hparams(hparams, metrics, run_name="."))
        self._write(self.writer.close, closing=True)

    def _write(self, write: Callable[[], object], closing: bool = False) -> None:
        """Run one writer call; the first that fails (folder removed, disk full) is one
        warning line and TensorBoard logging stops there, while the run goes on."""
        if self._failed and not closing:
            return
        try:
            write()
        except OSError as e:
            if not self._failed:
                self._failed = True
                print(
                    f"warning: TensorBoard events in {self.path} not written from here on "
                    f"({os_reason(e)}); the run goes on",
                    file=sys.stderr,
                    flush=True,
                )


def _quiet_writer_thread(args: threading.ExceptHookArgs) -> None:
    """TensorBoard's writer thread re-raises a failed write, which would print a traceback;
    the same error reaches the main process's next write, where ``RunDir._write`` says it
    in one line. Everything else goes to the hook that was there before."""
    if isinstance(args.exc_value, OSError) and type(args.thread).__module__.startswith(
        "tensorboard."
    ):
        return
    _previous_hook(args)


_previous_hook = threading.excepthook
threading.excepthook = _quiet_writer_thread


def _unique(path: Path) -> Path:
    candidate, i = path, 1
    while candidate.exists():
        i += 1
        candidate = path.with_name(f"{path.name}-{i}")
    return candidate


@dataclasses.dataclass(frozen=True)
class Status:
    """What the console shows of a run: ``line`` off a terminal; on one, a bar of
    ``done``/``total`` (in ``unit``) with ``postfix`` beside it."""

    line: str
    done: int | None = None
    total: int | None = None
    postfix: str = ""
    unit: str = "step"


class Progress:
    """The console: a progress bar on a terminal, a plain line every ``every`` s elsewhere.

    The bar is tqdm's (rate, elapsed, redraws that never tear a line), with log records
    and :meth:`print` lines written above it, never into it. No ETA: a run usually stops
    at its target long before its step budget, so a countdown to the budget misleads.
    Off a terminal (CI, nohup, a pipe) there is no ``\\r``: one status line now and then.
    """

    BAR = "{desc}  {percentage:3.0f}%|{bar:20}| {n_fmt}/{total_fmt} [{elapsed}, {rate_fmt}]"
    COUNT = "{desc}  {n_fmt} [{elapsed}, {rate_fmt}]"  # no total known

    def __init__(self, every: float = 1.0, stream=None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty()
        self.every = every
        self._last = -math.inf
        self._bar = None
        self._swapped: list[tuple[logging.Handler, logging.Handler]] = []

    def update(self, status: Status | str, force: bool = False) -> None:
        if isinstance(status, str):
            status = Status(status)
        if not self.enabled:
            now = time.monotonic()
            if force or now - self._last >= self.every:
                self._last = now
                print(status.line, file=self.stream, flush=True)
            return
        bar = self._bar or self._open(status)
        if status.done is not None and status.done < bar.n:
            bar.reset(status.total)  # a new round (MNIST's next epoch): fresh rate and clock
        elif status.total is not None and bar.total != status.total:
            bar.total = status.total
        if status.done is not None:
            bar.n = status.done
        bar.set_description_str(status.postfix or status.line, refresh=False)
        bar.refresh()

    def _open(self, status: Status):
        from tqdm import tqdm

        width = _columns(self.stream)
        self._bar = tqdm(
            total=status.total,
            initial=status.done or 0,
            desc=status.postfix or status.line,
            unit=status.unit,
            unit_scale=True,
            file=self.stream,
            bar_format=self.BAR if status.total else self.COUNT,
            dynamic_ncols=width > 0,
            ncols=None if width > 0 else 100,  # a pty may report 0 columns
            leave=True,
        )
        # Log records to this stream go above the bar, not into it.
        root = logging.getLogger()
        for handler in list(root.handlers):
            if isinstance(handler, logging.StreamHandler) and handler.stream is self.stream:
                above = _AboveBar(self)
                above.setFormatter(handler.formatter)
                above.setLevel(handler.level)
                root.removeHandler(handler)
                root.addHandler(above)
                self._swapped.append((handler, above))
        return self._bar

    def print(self, text: str) -> None:
        """A permanent line (always shown, terminal or not), above the bar."""
        if self._bar is not None:
            self._bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        root = logging.getLogger()
        for handler, above in self._swapped:
            root.removeHandler(above)
            root.addHandler(handler)
        self._swapped.clear()


class _AboveBar(logging.Handler):
    """Writes log records with :meth:`Progress.print`, above the bar."""

    def __init__(self, progress: Progress) -> None:
        super().__init__()
        self.progress = progress

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.progress.print(self.format(record))
        except Exception:  # noqa: BLE001 (logging's own contract: never raise)
            self.handleError(record)


def _columns(stream) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return 0
