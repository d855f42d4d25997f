"""Self-play against older snapshots: some games' seat played by a past policy.

Pure self-play learns to beat the policy of the moment, which can forget how to beat the
policies before it (a strategy and its counter chase each other) and never meets weak
play. With ``--snapshot-games P``, a worker takes a copy of its policy every
:data:`SNAPSHOT_EVERY` rollouts and keeps :data:`SNAPSHOTS_KEPT` of them, a uniform sample
of all it took (reservoir sampling: the first, near-random policies stay as likely as the
last), and at the start of a share ``P`` of its games hands one seat, drawn at random, to
one of them (OpenAI Five played a fifth of its games against past selves). That seat's
rows are played, not learned from: the collector marks them as not acted, so no loss
reads them and they count no steps or episodes.
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
        # a recurrent pool's state per row, zeroed when a game starts
        self.memory = model.initial_state(rows) if model.recurrent else None
        self._rollouts = self.taken = 0

    def keep(self) -> None:
        """After a rollout: every :data:`SNAPSHOT_EVERY`-th, a copy of the policy is taken;
        the pool keeps each of the ``taken`` so far with the same chance."""
        self._rollouts += 1
        if (self._rollouts - 1) % SNAPSHOT_EVERY:
            return
        self.taken += 1
        if len(self.pool) < SNAPSHOTS_KEPT:
            self.pool.append(copy.deepcopy(self.model).requires_grad_(False))
            return
        slot = self.rng.integers(self.taken)
        if slot < SNAPSHOTS_KEPT:
            self.pool[slot].load_state_dict(self.model.state_dict())

    def start(self, games: np.ndarray) -> None:
        """Games ``games`` (indices) just began: draw who plays each one's seats."""
        for g in games:
            rows = slice(g * self.agents, (g + 1) * self.agents)
            self.played_by[rows] = -1
            if self.memory is not None:
                self.memory[0][rows], self.memory[1][rows] = 0.0, 0.0
            if self.pool and self.rng.random() < self.share:
                seat = self.rng.integers(self.agents)
                self.played_by[g * self.agents + seat] = self.rng.integers(len(self.pool))

    def act(self, obs: Tensor, actions: Tensor) -> np.ndarray:
        """``actions`` with the snapshots' rows replaced by their own; which rows those are."""
        theirs = self.played_by >= 0
        for k in np.unique(self.played_by[theirs]):
            rows = torch.from_numpy(np.flatnonzero(self.played_by == k))
            if self.memory is None:
                actions[rows] = self.pool[k].act(obs[rows])
                continue
            h, c = self.memory
            actions[rows], (h[rows], c[rows]) = self.pool[k].act_recurrent(
                obs[rows], (h[rows], c[rows])
            )
        return theirs
