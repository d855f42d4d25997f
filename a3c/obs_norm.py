"""Running observation statistics for ``--normalize-obs``, gathered by all workers lock-free.

Each worker adds its rollouts' count, sum and sum of squares to its own row of a shared
table (exact: nobody else writes that row), reads the total over all rows, and writes
the resulting mean and standard deviation into the model's ``obs_mean``/``obs_std``
parameters in the shared vector, from where every worker's next sync picks them up.
"""

from __future__ import annotations

import torch
from torch import nn

from hogwild.flat import offset_of


class ObsStats:
    def __init__(self, workers: int, obs_dim: int) -> None:
        self.obs_dim = obs_dim
        self.rows = torch.zeros(workers, 1 + 2 * obs_dim, dtype=torch.float64)

    def share_memory(self) -> ObsStats:
        self.rows.share_memory_()
        return self

    def add(self, worker: int, obs: torch.Tensor) -> None:
        d = self.obs_dim
        x = obs.to(torch.float64)
        row = self.rows[worker]
        row[0] += x.shape[0]
        row[1 : 1 + d] += x.sum(0)
        row[1 + d :] += (x * x).sum(0)

    def total(self) -> torch.Tensor:
        return self.rows.sum(0)

    def load(self, total: torch.Tensor) -> None:
        """Start from saved totals (a resumed run), in this process's shared table."""
        self.rows.zero_()
        self.rows[0].copy_(total)

    def mean_std(self) -> tuple[torch.Tensor, torch.Tensor]:
        t = self.total()
        d, n = self.obs_dim, max(float(t[0]), 1.0)
        mean = t[1 : 1 + d] / n
        var = (t[1 + d :] / n - mean * mean).clamp_(min=0.0)
        return mean.float(), (var + 1e-8).sqrt_().float()

    def publish(self, model: nn.Module, flat: torch.Tensor, shared: torch.Tensor) -> None:
        """Write mean and std into ``shared`` where ``model``'s own live in ``flat``."""
        mean, std = self.mean_std()
        d = self.obs_dim
        m, s = offset_of(model.obs_mean, flat), offset_of(model.obs_std, flat)
        shared[m : m + d] = mean
        shared[s : s + d] = std
