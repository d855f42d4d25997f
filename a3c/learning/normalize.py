"""Running statistics shared by all workers: observation mean/std and return scale.

Each worker folds its own samples into its own row of a shared table (count, mean,
M2 per feature): nobody else writes that row, so no lock is needed and no update is
lost. Anyone can read the statistics of all rows together, merged with the
parallel-variance formula of Chan et al. (as SB3's ``RunningMeanStd``), which keeps
its precision when a feature has a large offset, unlike ``E[x^2] - mean^2``.

The table lives outside the model's flat parameter vector, so the shared optimizer
never touches it (no weight decay, no rewrite over a concurrent update).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

__all__ = [
    "RETURN_CLIP",
    "ReturnScaler",
    "RunningMeanStd",
    "mean_std_of",
    "mean_var_of",
    "merge_rows",
]

#: Scaled rewards are clipped to +-RETURN_CLIP (as VecNormalize and NormalizeReward).
RETURN_CLIP = 10.0
EPS = 1e-8


class RunningMeanStd:
    """Mean and variance of a stream of ``[B, dim]`` samples, one row per writer.

    One more row, the last, holds what other nodes saw (under ``torchrun``): the main
    process sets it each sync round from the others' local statistics
    (:meth:`local`, :meth:`set_remote`), so every node merges every sample exactly once.
    ``per_column``: each column counts its own samples, so a batch may fill some columns
    alone (``add(..., columns=...)``: a group of agents' rows fill its own block).
    """

    def __init__(self, writers: int, dim: int, per_column: bool = False) -> None:
        self.dim = dim
        self.counts = dim if per_column else 1
        # row: [count (1 or dim), mean (dim), M2 (dim)]; rows[-1]: the other nodes'
        self.rows = torch.zeros(writers + 1, self.counts + 2 * dim, dtype=torch.float64)

    def share_memory(self) -> RunningMeanStd:
        self.rows.share_memory_()
        return self

    def add(
        self,
        writer: int,
        x: torch.Tensor | np.ndarray,
        columns: torch.Tensor | np.ndarray | Sequence[int] | None = None,
    ) -> None:
        """Fold a batch ``[B, dim]`` into ``writer``'s row (Chan's pairwise merge); with
        ``columns`` (per-column counts only), a batch ``[B, len(columns)]`` of those."""
        if isinstance(x, torch.Tensor):
            x = x.detach().numpy()
        cols: slice | np.ndarray = slice(None)
        width = self.dim
        if columns is not None:
            if self.counts == 1:
                raise ValueError("columns need per-column counts (per_column=True)")
            cols = np.asarray(columns, dtype=np.int64)
            width = len(cols)
        x = np.asarray(x, dtype=np.float64).reshape(-1, width)
        n_b = x.shape[0]
        if n_b == 0:
            return
        mean_b = x.mean(0)
        m2_b = ((x - mean_b) ** 2).sum(0)
        row, c, d = self.rows.numpy()[writer], self.counts, self.dim
        count, mean, m2 = row[:c], row[c : c + d], row[c + d :]
        here = cols if c > 1 else slice(None)
        n_a = count[here]
        n = n_a + n_b
        delta = mean_b - mean[cols]
        mean[cols] += delta * (n_b / n)
        m2[cols] += m2_b + delta * delta * (n_a * n_b / n)
        count[here] = n

    def merged(self) -> torch.Tensor:
        """All rows as one ``[count, mean, M2]`` row (the exact statistics of every sample)."""
        # A read may catch a writer between its mean and its count: off by one batch
        # for an instant, like any Hogwild! read; never accumulated into the rows.
        return torch.from_numpy(_merge(self.rows.numpy().copy(), self.counts))

    def local(self) -> torch.Tensor:
        """This node's own statistics (every row but the other nodes')."""
        return torch.from_numpy(_merge(self.rows.numpy()[:-1].copy(), self.counts))

    def set_remote(self, rows: list[torch.Tensor]) -> None:
        """The other nodes' :meth:`local` rows, merged into the last row."""
        self.rows[-1] = merge_rows(torch.stack(rows), self.counts) if rows else 0.0

    def mean_var(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean, variance)`` in float64; ``(0, 1)`` before any sample."""
        return mean_var_of(self.merged(), self.dim)

    def mean_std(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean, sqrt(variance + eps))``: what observations are normalised with."""
        return mean_std_of(self.merged(), self.dim)

    def load(self, merged: torch.Tensor, remote: bool = False) -> None:
        """Start from saved statistics (a resumed run): they become row 0, the rest empty;
        ``remote``: the other nodes' row instead (a node that does not own them). Per-column
        counts also take one count for every column (a checkpoint from before them)."""
        merged = torch.as_tensor(merged, dtype=torch.float64)
        width = self.rows.shape[1]
        if self.counts > 1 and merged.shape == (1 + 2 * self.dim,):
            merged = torch.cat((merged[:1].expand(self.counts), merged[1:]))
        if merged.shape != (width,):
            raise ValueError(f"statistics have shape {tuple(merged.shape)}, expected ({width},)")
        self.rows.zero_()
        self.rows[-1 if remote else 0].copy_(merged)

    def state(self) -> torch.Tensor:
        """What a checkpoint keeps: the merged row."""
        return self.merged()


def mean_var_of(
    merged: torch.Tensor | np.ndarray, dim: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mean, variance)`` of one merged ``[count, mean, M2]`` row of ``dim`` features
    (none: one count); ``(0, 1)`` where no sample came."""
    m = torch.as_tensor(merged, dtype=torch.float64)
    d = (m.numel() - 1) // 2 if dim is None else dim
    c = m.numel() - 2 * d
    n = m[:c]
    seen = n > 0
    mean = torch.where(seen, m[c : c + d], 0.0)
    return mean, torch.where(seen, m[c + d :] / torch.where(seen, n, 1.0), 1.0)


def mean_std_of(
    merged: torch.Tensor | np.ndarray, dim: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mean, sqrt(variance + eps))`` of a merged row (a saved ``state()``, say)."""
    mean, var = mean_var_of(merged, dim)
    return mean, (var + EPS).sqrt()


def merge_rows(rows: torch.Tensor, counts: int = 1) -> torch.Tensor:
    """Rows ``[count (counts), mean, M2]`` of disjoint samples as one row (Chan et al.'s
    formula)."""
    return torch.from_numpy(_merge(rows.detach().to(torch.float64).numpy().copy(), counts))


def _merge(rows: np.ndarray, c: int) -> np.ndarray:
    # numpy, not torch: a handful of ops on a few dozen numbers, where torch's per-op
    # overhead cost each worker ~9% of its env steps/s (CartPole, 2 workers).
    d = (rows.shape[1] - c) // 2
    counts = rows[:, :c]
    total = counts.sum(0)
    out = np.zeros(rows.shape[1])
    if not total.any():
        return out
    mean = (counts * rows[:, c : c + d]).sum(0) / np.where(total > 0, total, 1.0)
    out[:c] = total
    out[c : c + d] = mean
    out[c + d :] = (rows[:, c + d :] + counts * (rows[:, c : c + d] - mean) ** 2).sum(0)
    return out


class ReturnScaler:
    """Reward scaling by the running std of the discounted return (VecNormalize's ``norm_reward``).

    Each worker keeps, per env, ``R = gamma * R + r`` (reset at episode ends) and adds
    those ``R`` to the shared statistics; rewards are divided by their std, never
    shifted, so the sign of the reward and the meaning of termination are kept.
    """

    def __init__(self, stats: RunningMeanStd, writer: int, num_envs: int, gamma: float) -> None:
        self.stats = stats
        self.writer = writer
        self.gamma = gamma
        self.running = np.zeros(num_envs)
        self._seen: list[np.ndarray] = []

    def observe(self, reward: np.ndarray, done: np.ndarray) -> None:
        """One vector step's raw rewards (call in step order)."""
        running = self.running
        running *= self.gamma
        running += reward
        self._seen.append(running.copy())
        running[done] = 0.0

    def flush(self) -> None:
        """Fold the returns seen since the last flush into the shared statistics."""
        if self._seen:
            self.stats.add(self.writer, np.stack(self._seen).reshape(-1, 1))
            self._seen.clear()

    def scale(self) -> float:
        """The factor rewards are multiplied by: ``1 / sqrt(var(R) + eps)``."""
        _, var = self.stats.mean_var()
        return float(1.0 / np.sqrt(float(var[0]) + EPS))

    def apply(self, rewards: torch.Tensor) -> None:
        """Scale a rollout's ``rewards`` in place (clipped to +-``RETURN_CLIP``) by the
        returns shared so far, then share the returns it observed."""
        rewards.mul_(self.scale()).clamp_(-RETURN_CLIP, RETURN_CLIP)
        self.flush()
