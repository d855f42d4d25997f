"""The console: one status line now and then, or a progress bar on a terminal.

Kept apart from the run folder (:mod:`hogwild.rundir`): the DDP baseline and the run loop
show progress without owning a folder, and tests drive the console alone.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import math
import os
import sys
import time
from typing import TextIO


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

    def __init__(self, every: float = 1.0, stream: TextIO | None = None) -> None:
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


def _columns(stream: TextIO) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return 0
