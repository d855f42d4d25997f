"""A loss's figures: named by the fields of a record, so no figure travels by position.

A loss returns a :class:`Figures` record of detached 0-dim tensors; the learner sums them
into the telemetry slots of the same names, and the telemetry logs each one it does not
know otherwise as ``losses/<name>``: a new figure is one new field, filled in the loss.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch import Tensor

__all__ = ["Figures"]


@dataclass(frozen=True)
class Figures:
    """The base of every loss's figures record (its fields are the figures)."""

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    def stacked(self) -> Tensor:
        """The figures as one tensor, in the order of :meth:`names`."""
        return torch.stack([getattr(self, name) for name in self.names()])
