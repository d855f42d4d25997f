"""A scripted stand-in for an ale-py game, so that the Atari wrappers are tested without ROMs.

The wrappers read only ``env.unwrapped.ale.lives()`` and ``get_action_meanings()`` of a
real game; this one answers both and plays a script the test chooses.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import gymnasium as gym
import numpy as np

LIVES = 3  # a new game's lives


class FakeAle:
    """The part of ale-py's emulator interface the wrappers use: the lives left."""

    def __init__(self) -> None:
        self.n_lives = 0

    def lives(self) -> int:
        return self.n_lives


class ScriptedGame(gym.Env):
    """3 lives; each ``deadly`` action loses one; 0 lives: game over.

    A step scores ``rewards[action]``, else ``reward``. The game keeps the actions it was
    given (``actions``) and counts its resets (``resets``), for the tests to check.
    """

    observation_space = gym.spaces.Box(0, 255, (1,), np.uint8)
    action_space = gym.spaces.Discrete(3)

    def __init__(
        self,
        deadly: Collection[int] = (2,),
        reward: float = 1.0,
        rewards: Mapping[int, float] | None = None,
    ) -> None:
        self.ale = FakeAle()
        self.deadly = set(deadly)
        self.reward = reward
        self.rewards = dict(rewards or {})
        self.actions: list[int] = []
        self.resets = 0

    def get_action_meanings(self) -> list[str]:
        return ["NOOP", "FIRE", "RIGHT"]

    def reset(self, *, seed=None, options=None):  # noqa: ANN001, ANN201
        super().reset(seed=seed)
        self.ale.n_lives = LIVES
        self.resets += 1
        return np.zeros(1, np.uint8), {}

    def step(self, action):  # noqa: ANN001, ANN201
        action = int(action)
        self.actions.append(action)
        if action in self.deadly:
            self.ale.n_lives -= 1
        reward = self.rewards.get(action, self.reward)
        return np.zeros(1, np.uint8), reward, self.ale.n_lives == 0, False, {}
