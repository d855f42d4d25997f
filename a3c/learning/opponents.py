"""Self-play against other players: some games' seat played by a past policy or at random.

Pure self-play learns to beat the policy of the moment, which can forget how to beat the
policies before it (a strategy and its counter chase each other) and never meets weak
play. With ``--snapshot-games P``, a worker takes a copy of its policy every
:data:`SNAPSHOT_EVERY` rollouts and keeps :data:`SNAPSHOTS_KEPT` of them, a uniform sample
of all it took (reservoir sampling: the first, near-random policies stay as likely as the
last), and at the start of a share ``P`` of its games hands one seat, drawn at random, to
one of them (OpenAI Five played a fifth of its games against past selves). That seat's
rows are played, not learned from: the collector marks them as not acted, so no loss
reads them and they count no steps or episodes. The pools live in shared memory
(:class:`SnapshotPool`, a row per worker, written by that worker alone): a restarted worker
takes its own back, and a checkpoint keeps them, so a resumed run plays the same opponents.
With ``--random-games P``, a share ``P`` of the games hands one seat to a random (legal)
player instead: the weak play that a policy is scored against and that self-play, its
snapshots included, never shows it.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import Tensor
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from a3c.envs.random_player import RandomPlayer
from a3c.policy import ActorCritic

__all__ = ["SNAPSHOTS_KEPT", "SNAPSHOT_EVERY", "SnapshotPool", "Opponents"]

SNAPSHOTS_KEPT = 8
SNAPSHOT_EVERY = 20
#: Who plays a row (``Opponents.played_by``), where not a snapshot (its index in the pool).
POLICY, RANDOM = -1, -2


class SnapshotPool:
    """Every worker's kept snapshots in shared memory: ``slots[w, k]`` is worker ``w``'s
    ``k``-th, its parameters then its floating-point buffers as one vector; ``counts[w]``
    how many it keeps, has taken and the rollouts it has kept count of."""

    def __init__(self, workers: int, width: int) -> None:
        self.slots = torch.zeros(workers, SNAPSHOTS_KEPT, width)
        self.counts = torch.zeros(workers, 3, dtype=torch.int64)

    @classmethod
    def of(cls, model: ActorCritic, workers: int) -> SnapshotPool:
        """Empty pools for ``workers`` workers' snapshots of ``model``."""
        return cls(workers, sum(t.numel() for t in _tensors(model)))

    def share_memory(self) -> SnapshotPool:
        self.slots.share_memory_()
        self.counts.share_memory_()
        return self

    def state(self) -> dict[str, Tensor]:
        """What a checkpoint keeps (copies)."""
        return {"slots": self.slots.clone(), "counts": self.counts.clone()}

    def load(self, state: dict[str, Tensor]) -> None:
        """Saved pools, worker ``w`` taking saved worker ``w % saved``'s (another worker
        count may resume them); a ``ValueError`` for pools of another model."""
        slots, counts = state["slots"], state["counts"]
        saved = slots.shape[0]
        if slots.shape[1:] != self.slots.shape[1:] or counts.shape != (saved, 3) or not saved:
            raise ValueError(
                f"snapshots of shape {tuple(slots.shape)}, expected (workers, "
                f"{SNAPSHOTS_KEPT}, {self.slots.shape[2]})"
            )
        rows = torch.arange(self.slots.shape[0]) % saved
        self.slots.copy_(slots[rows])
        self.counts.copy_(counts[rows])


def _tensors(net: ActorCritic) -> list[Tensor]:
    """What a slot holds of a policy: its parameters, then its floating-point buffers."""
    return [*net.parameters(), *(b for b in net.buffers() if b.is_floating_point())]


class Opponents:
    """Who plays each of a worker's rows: the policy, one of its past policies (a share
    ``share`` of the games' drawn seats) or ``randomly`` (a share ``random_share``); with
    ``shared``, row ``writer`` of a :class:`SnapshotPool` holds the past policies (taken
    back from there)."""

    def __init__(
        self,
        model: ActorCritic,
        share: float,
        agents: int,
        rows: int,
        seed: int | None,
        shared: SnapshotPool | None = None,
        writer: int = 0,
        randomly: RandomPlayer | None = None,
        random_share: float = 0.0,
    ) -> None:
        self.model, self.share, self.agents = model, share, agents
        self.randomly, self.random_share = randomly, random_share if randomly else 0.0
        self.pool: list[ActorCritic] = []
        self.rng = np.random.default_rng(seed)
        self.played_by = np.full(rows, POLICY)
        # a recurrent pool's state per row, zeroed when a game starts
        self.memory = model.initial_state(rows) if model.recurrent else None
        self._rollouts = self.taken = 0
        self.shared, self.writer = shared, writer
        if shared is not None:
            kept, self.taken, self._rollouts = shared.counts[writer].tolist()
            for slot in shared.slots[writer, :kept]:
                net = copy.deepcopy(model).requires_grad_(False)
                vector_to_parameters(slot.clone(), _tensors(net))  # no views of shared memory
                self.pool.append(net)

    def keep(self) -> None:
        """After a rollout: every :data:`SNAPSHOT_EVERY`-th, a copy of the policy is taken;
        the pool keeps each of the ``taken`` so far with the same chance."""
        if not self.share:
            return
        self._rollouts += 1
        slot = self._take() if (self._rollouts - 1) % SNAPSHOT_EVERY == 0 else None
        if self.shared is not None:
            if slot is not None:
                self.shared.slots[self.writer, slot] = parameters_to_vector(_tensors(self.model))
            counts = (len(self.pool), self.taken, self._rollouts)
            self.shared.counts[self.writer] = torch.tensor(counts)

    def _take(self) -> int | None:
        """Take a snapshot of the policy: the slot it went to, if the pool kept it."""
        self.taken += 1
        if len(self.pool) < SNAPSHOTS_KEPT:
            self.pool.append(copy.deepcopy(self.model).requires_grad_(False))
            return len(self.pool) - 1
        slot = int(self.rng.integers(self.taken))
        if slot >= SNAPSHOTS_KEPT:
            return None
        self.pool[slot].load_state_dict(self.model.state_dict())
        return slot

    def start(self, games: np.ndarray) -> None:
        """Games ``games`` (indices) just began: draw who plays each one's seats."""
        for g in games:
            rows = slice(g * self.agents, (g + 1) * self.agents)
            self.played_by[rows] = POLICY
            if self.memory is not None:
                self.memory[0][rows], self.memory[1][rows] = 0.0, 0.0
            draw = self.rng.random()
            if draw < self.random_share:
                player = RANDOM
            elif self.pool and draw < self.random_share + self.share:
                player = int(self.rng.integers(len(self.pool)))
            else:
                continue
            self.played_by[g * self.agents + self.rng.integers(self.agents)] = player

    def act(self, obs: Tensor, actions: Tensor) -> np.ndarray:
        """``actions`` with the other players' rows replaced by their own; which rows those
        are."""
        theirs = self.played_by != POLICY
        if self.randomly is not None:
            drawn = np.flatnonzero(self.played_by == RANDOM)
            self.randomly.fill(actions.numpy(), obs.numpy(), drawn)
        for k in np.unique(self.played_by[self.played_by >= 0]):
            rows = torch.from_numpy(np.flatnonzero(self.played_by == k))
            if self.memory is None:
                actions[rows] = self.pool[k].act(obs[rows])
                continue
            h, c = self.memory
            actions[rows], (h[rows], c[rows]) = self.pool[k].act_recurrent(
                obs[rows], (h[rows], c[rows])
            )
        return theirs
