"""What a worker reports, declared where it is counted: each :class:`Metric` by name, summed
into a :class:`Tally` (the telemetry message's layout) by that name.

The learner declares its counts and each step's figures, an algorithm its own
(:class:`a3c.learning.algorithm.Algorithm`), a loss its figures as the fields of its
record; :mod:`a3c.run.telemetry` lays the message out from these declarations alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["MAX", "MEAN", "SUM", "Metric", "Tally"]

MEAN, SUM, MAX = "mean per update", "sum", "max"


@dataclass(frozen=True)
class Metric:
    """A figure workers report: summed in messages, logged as ``tag`` (None: not logged)
    either per update (``MEAN``, e.g. a loss) or as the log window's total (``SUM``), or
    kept as the window's largest (``MAX``: :meth:`Tally.peak`), by the algorithms named in
    ``algos`` (None: every one)."""

    name: str
    tag: str | None
    logged: str = MEAN
    algos: tuple[str, ...] | None = None


class Tally:
    """A worker's sums of its figures since its last message, one float64 slot a name."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)
        self.slot = {name: i for i, name in enumerate(self.names)}
        self.array = np.zeros(len(self.names))

    def __getitem__(self, name: str) -> float:
        return float(self.array[self.slot[name]])

    def add(self, name: str, value: float = 1.0) -> None:
        self.array[self.slot[name]] += value

    def peak(self, name: str, value: float) -> None:
        """Keep the largest ``value`` since the last message (a ``MAX`` figure)."""
        i = self.slot[name]
        self.array[i] = max(self.array[i], value)

    def adder(self, names: Sequence[str]) -> Callable[[Sequence[float]], None]:
        """A function that adds its values to ``names``, in their order (one call a step:
        the names are looked up once, here, so a name the tally lacks fails now)."""
        slots = np.array([self.slot[name] for name in names], dtype=np.int64)
        array = self.array

        def add(values: Sequence[float]) -> None:
            array[slots] += values

        return add
