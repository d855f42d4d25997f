"""MinAtar games (``MinAtar/Breakout-v1`` ...): 10x10 Atari-like grids, for A3C.

The ``minatar`` package (1.0.15) registers its Gymnasium envs only when
``minatar.gym.register_envs()`` is called; :func:`register_minatar_envs` does that the
first time a ``MinAtar/...`` id is asked for. A missing package is a one-line
:class:`~hogwild.errors.UsageError` naming the ``minatar`` extra.

Ids: ``MinAtar/{Asterix,Breakout,Freeway,Seaquest,SpaceInvaders}-v0`` (all 6 actions)
and ``-v1`` (each game's minimal action set: Breakout 3, ...). Both use MinAtar's sticky
actions (probability 0.1, ``sticky_action_prob=`` to ``gym.make``) and difficulty
ramping. No time limit is registered (Freeway ends itself after 2500 steps; the others
end at game over).

Observations: MinAtar gives ``bool`` grids ``(10, 10, C)`` (channel-last, one channel
per object kind: Breakout 4, Asterix 4, Freeway 7, SpaceInvaders 6, Seaquest 10).
:class:`MinAtarImage` turns them into ``uint8`` ``(C, 10, 10)`` images with values 0 and
255, the same convention as the Atari frames, so one conv encoder (which divides by
255) serves both and sees exactly MinAtar's 0/1 inputs.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from hogwild.errors import UsageError

__all__ = ["MinAtarImage", "is_minatar_id", "register_minatar_envs", "wrap_minatar"]

INSTALL_HINT = (
    'pip install "hogwild-a3c[minatar]" (or, from a checkout, pip install -e ".[minatar]")'
)


def is_minatar_id(env_id: str) -> bool:
    """Whether ``env_id`` (possibly ``module:``-prefixed) names a MinAtar game."""
    return isinstance(env_id, str) and env_id.rpartition(":")[2].startswith("MinAtar/")


def register_minatar_envs(env_id: str | None = None) -> None:
    """Register MinAtar's games with Gymnasium once (importing ``minatar`` only now).

    ``minatar`` imports matplotlib and seaborn at import time (for its display), so the
    first call takes about a second. ``env_id`` only goes into the error message.
    """
    if "MinAtar/Breakout-v1" in gym.registry:
        return  # registering again would only print "Overriding environment" warnings
    try:
        import minatar.gym
    except ImportError as e:
        what = "MinAtar games need" if env_id is None else f"environment {env_id!r} needs"
        raise UsageError(f"{what} the minatar extra: {INSTALL_HINT} ({e})") from e
    minatar.gym.register_envs()


class MinAtarImage(gym.ObservationWrapper):
    """``bool (10, 10, C)`` grids as ``uint8 (C, 10, 10)`` images of 0 and 255."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        if not (isinstance(space, spaces.Box) and len(space.shape) == 3):
            raise ValueError(f"expected a (H, W, C) Box observation space, got {space}")
        h, w, c = space.shape
        self.observation_space = spaces.Box(0, 255, (c, h, w), np.uint8)

    def observation(self, observation: Any) -> np.ndarray:
        grid = np.asarray(observation, dtype=bool).transpose(2, 0, 1)
        return np.ascontiguousarray(grid, dtype=np.uint8) * np.uint8(255)


def wrap_minatar(env: gym.Env) -> gym.Env:
    """The wrappers a fresh MinAtar env gets: just :class:`MinAtarImage`."""
    return MinAtarImage(env)
