"""The share of a conv net's first-layer units that no input of a learning batch made
positive: such a ReLU unit gets no gradient and never comes back, and when all of them
die the net gives every frame the same output (a "dead start")."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import Tensor, nn

__all__ = ["DeadUnits"]


class DeadUnits:
    """Watches ``layer`` (a conv layer followed by a ReLU) while a learning pass runs;
    :attr:`share` is the last watched batch's share of output channels never positive."""

    def __init__(self, layer: nn.Module | None) -> None:
        self.layer = layer
        self.share = 0.0

    @contextlib.contextmanager
    def watch(self) -> Iterator[None]:
        """Reads the layer's output during the passes inside; a no-op without a layer."""
        if self.layer is None:
            yield
            return
        handle = self.layer.register_forward_hook(self._read)
        try:
            yield
        finally:
            handle.remove()

    def _read(self, module: nn.Module, inputs: tuple[Tensor, ...], out: Tensor) -> None:
        with torch.no_grad():
            alive = (out > 0).flatten(2).any(2).any(0)  # [B, C, H, W] -> per channel
            self.share = 1.0 - float(alive.float().mean())
