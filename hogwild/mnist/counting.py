"""Samples trained, counted across workers and nodes (the x axis of every MNIST curve)."""

from __future__ import annotations


class SampleCount:
    """The run's samples (every node's, as of the last sync round, plus this node's since),
    the current epoch's, and this node's not yet sent to the others."""

    def __init__(self, start: int = 0) -> None:
        self.total = start
        self.epoch = 0
        self._unsent = 0  # this node's samples since the last round began
        self._in_round = 0  # ... as sent in the round in flight

    def add(self, n: int) -> None:
        """``n`` samples a worker of this node reported."""
        self.total += n
        self.epoch += n
        self._unsent += n

    def new_epoch(self) -> None:
        self.epoch = 0

    def start_round(self) -> int:
        """This node's samples since the last round, to send in this one."""
        self._in_round, self._unsent = self._unsent, 0
        return self._in_round

    def end_round(self, all_nodes: int) -> None:
        """Add what the other nodes trained (the round's sum less this node's part)."""
        others = all_nodes - self._in_round
        self._in_round = 0
        self.total += others
        self.epoch += others
