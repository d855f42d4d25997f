"""Self-play against older snapshots: some games' seat played by a past policy.

Pure self-play learns to beat the policy of the moment, which can forget how to beat the
policies before it (a strategy and its counter chase each other). With ``--snapshot-games
P``, a worker keeps the last :data:`SNAPSHOTS_KEPT` copies of its policy, one taken every
:data:`SNAPSHOT_EVERY` rollouts, and at the start of a share ``P`` of its games hands one
seat, drawn at random, to one of them (OpenAI Five's 80/20 mix of the latest policy and
past ones is ``P = 0.2``). That seat's rows are played, not learned from: the collector
marks them as not acted, so no loss reads them and they count no steps or episodes.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import Tensor

from a3c.policy import ActorCritic

__all__ = ["SNAPSHOTS_KEPT", "SNAPSHOT_EVERY", "Snapshots"]

SNAPSHOTS_KEPT = 8
SNAPSHOT_EVERY = 20


class Snapshots:
    """A worker's pool of past policies and which rows they play (``-1``: the policy)."""

    def __init__(
        self, model: ActorCritic, share: float, agents: int, rows: int, seed: int | None
    ) -> None:
        self.model, self.share, self.agents = model, share, agents
        self.pool: list[ActorCritic] = []
        self.rng = np.random.default_rng(seed)
        self.played_by = np.full(rows, -1)
        self._rollouts = 0

    def keep(self) -> None:
        """After a rollout: every :data:`SNAPSHOT_EVERY`-th, a copy of the policy joins the
        pool (the oldest leaves a full one)."""
        if self._rollouts % SNAPSHOT_EVERY == 0:
            if len(self.pool) < SNAPSHOTS_KEPT:
                self.pool.append(copy.deepcopy(self.model).requires_grad_(False))
            else:
                self.pool.append(self.pool.pop(0))
                self.pool[-1].load_state_dict(self.model.state_dict())
        self._rollouts += 1

    def start(self, games: np.ndarray) -> None:
        """Games ``games`` (indices) just began: draw who plays each one's seats."""
        for g in games:
            rows = slice(g * self.agents, (g + 1) * self.agents)
            self.played_by[rows] = -1
            if self.pool and self.rng.random() < self.share:
                seat = self.rng.integers(self.agents)
                self.played_by[g * self.agents + seat] = self.rng.integers(len(self.pool))

    def act(self, obs: Tensor, actions: Tensor) -> np.ndarray:
        """``actions`` with the snapshots' rows replaced by their own; which rows those are."""
        theirs = self.played_by >= 0
        for k in np.unique(self.played_by[theirs]):
            rows = torch.from_numpy(np.flatnonzero(self.played_by == k))
            actions[rows] = self.pool[k].act(obs[rows])
        return theirs
