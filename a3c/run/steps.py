"""The run's env-step count across workers and nodes, which schedules and budgets follow."""

from __future__ import annotations

import torch


class StepCount:
    """Env steps of the whole run: this node's workers' and, under ``torchrun``, the other
    nodes' as of the last sync round. ``total`` never goes backwards (a linear schedule
    follows it); ``published`` is the shared copy the workers read for their schedules."""

    def __init__(self, workers: int, start: int = 0) -> None:
        self.start = start  # steps of earlier sessions (a resumed run)
        # Each worker's own count; a worker that dies keeps steps it never reported here.
        self.per_worker = torch.zeros(workers, dtype=torch.int64)
        self.per_worker[0] = start
        self.per_worker.share_memory_()
        self.published = torch.zeros((), dtype=torch.int64).share_memory_()
        self.total = start
        self._local = 0  # this node's steps of this session, as counted so far
        self._round_local = 0  # ... as sent in the sync round in flight

    def count(self, reported: int) -> int:
        """Fold this node's new steps into the total: ``reported`` by telemetry, or the
        workers' own counters where they are ahead."""
        local = max(reported, int(self.per_worker.sum())) - self.start
        self.total += local - self._local
        self._local = local
        return self.total

    def start_round(self, reported: int) -> int:
        """This node's steps of this session, to send in a sync round."""
        self.count(reported)
        self._round_local = self._local
        return self._round_local

    def end_round(self, all_nodes: int, reported: int) -> None:
        """Every node's steps as of the round, plus this node's since it sent its own count
        (not since the last tick: the count would dip at every round)."""
        self.count(reported)
        counted = self.start + all_nodes + self._local - self._round_local
        # Never backwards: another node's count can only have grown since the last round,
        # but a float sum is not worth trusting with that.
        self.total = max(self.total, counted)
        self.publish()

    def publish(self) -> None:
        self.published.fill_(self.total)
