"""The random player a policy of a turn-based game is scored against (and may meet in
training, ``--random-games``)."""

from __future__ import annotations

import copy

import numpy as np

from a3c.envs.multiagent import AgentRows

__all__ = ["RANDOM_PLAYER", "UNIFORM_PLAYER", "RandomPlayer"]

#: Who plays the other seats of a zero-sum turn-based game when no opponent policy is
#: given: a game that masks its moves gets a random legal player, any other a uniform one.
RANDOM_PLAYER = "a random legal player"
UNIFORM_PLAYER = "a uniformly random player"


class RandomPlayer:
    """Moves drawn uniformly: among the legal ones where the game masks them (the mask is
    the last entries of a masked row), else from the whole action space."""

    def __init__(self, envs: AgentRows, seed: int) -> None:
        self.masked = envs.view.masked
        self.space = copy.deepcopy(envs.single_action_space)
        self.space.seed(seed)
        self.rng = np.random.default_rng(seed)
        self.n = int(getattr(self.space, "n", 0))
        self.name = RANDOM_PLAYER if self.masked else UNIFORM_PLAYER

    def fill(self, actions: np.ndarray, obs: np.ndarray, rows: np.ndarray) -> None:
        """Draw the moves of ``rows`` into ``actions``."""
        for row in rows:
            if self.masked:
                legal = np.flatnonzero(obs[row, -self.n :] > 0.5)
                actions[row] = self.rng.choice(legal) if legal.size else 0
            else:
                actions[row] = self.space.sample()
