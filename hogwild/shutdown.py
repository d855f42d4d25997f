"""Ctrl-C and SIGTERM: the first asks for a clean stop, a second Ctrl-C forces one."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any


class GracefulShutdown:
    """Context manager that turns SIGINT/SIGTERM into a flag the main loop checks.

    The main loop then stops the workers, writes its final checkpoint and exits with
    ``exit_code`` (128 + signal number: 130 for Ctrl-C, 143 for SIGTERM). A second
    SIGINT calls ``on_force`` (kill the children) and exits at once. ``on_request`` runs
    at the first signal, inside the handler: use it to raise the workers' stop flag at
    once, so that a worker which got the same signal (a launcher may signal the whole
    process group) is not mistaken for a failure and restarted.
    """

    def __init__(
        self,
        on_force: Callable[[], None] | None = None,
        on_request: Callable[[], None] | None = None,
    ) -> None:
        self.on_force = on_force
        self.on_request = on_request
        self.signum: int | None = None
        self._previous: dict[int, Callable[[int, FrameType | None], Any] | int | None] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def exit_code(self) -> int:
        return 128 + self.signum if self.signum is not None else 0

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            print("\nsecond interrupt: exiting now", file=sys.stderr, flush=True)
            if self.on_force is not None:
                self.on_force()
            os._exit(130)
        if self.signum is None:
            self.signum = signum
            name = "interrupt" if signum == signal.SIGINT else signal.Signals(signum).name
            if self.on_request is not None:
                self.on_request()
            print(
                f"\n{name}: stopping workers and saving a checkpoint "
                "(Ctrl-C again to exit at once)",
                file=sys.stderr,
                flush=True,
            )

    def take_over(self, earlier: GracefulShutdown) -> None:
        """Act on the signal an earlier handler caught (it has said so on stderr already)."""
        if earlier.signum is not None and self.signum is None:
            self.signum = earlier.signum
            if self.on_request is not None:
                self.on_request()

    def __enter__(self) -> GracefulShutdown:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
