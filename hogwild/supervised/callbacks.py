"""Callbacks: code of the user's own, called in the main process after each epoch.

A callback is any object with ``on_epoch_end(epoch, metrics)`` (``epoch`` counts from 1,
``metrics`` the validation scores by name) that returns True to stop the run after this
epoch, as Keras's and Lightning's ``EarlyStopping`` do.
"""

from __future__ import annotations

from typing import Protocol

from hogwild.supervised.report import Monitor


class Callback(Protocol):
    def on_epoch_end(self, epoch: int, metrics: dict[str, float]) -> bool | None: ...


class EarlyStopping:
    """Stop after ``patience`` epochs without a better ``monitor`` score (``--early-stop``)."""

    def __init__(self, monitor: str = "loss", patience: int = 3, mode: str = "auto") -> None:
        self.watch = Monitor(monitor, mode)
        self.patience = patience
        self.waited = 0

    def on_epoch_end(self, epoch: int, metrics: dict[str, float]) -> bool:
        if self.watch.update(metrics, epoch):
            self.waited = 0
        else:
            self.waited += 1
        return self.waited >= self.patience
