"""What the policy sees and does: the env's spaces adapted to the model, or refused in one line."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from hogwild.errors import UsageError

__all__ = ["adapt_spaces"]


class OneHotObservation(gym.ObservationWrapper):
    """``Discrete(n, start)`` observations as ``float32`` one-hot vectors of length ``n``."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        assert isinstance(space, spaces.Discrete)
        self._n = int(space.n)
        self._start = int(space.start)
        self.observation_space = spaces.Box(0.0, 1.0, (self._n,), np.float32)

    def observation(self, observation: Any) -> np.ndarray:
        out = np.zeros(self._n, dtype=np.float32)
        out[int(observation) - self._start] = 1.0
        return out


class Float32Observation(gym.ObservationWrapper):
    """1-D ``Box`` observations of another numeric dtype cast to ``float32`` for the model."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        assert isinstance(space, spaces.Box)
        self.observation_space = spaces.Box(
            space.low.astype(np.float32), space.high.astype(np.float32), space.shape, np.float32
        )

    def observation(self, observation: Any) -> np.ndarray:
        return np.asarray(observation, dtype=np.float32)


class ZeroBasedActions(gym.ActionWrapper):
    """``Discrete(n, start=s)`` actions as ``Discrete(n)``: the model picks 0..n-1."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.action_space
        assert isinstance(space, spaces.Discrete)
        self._start = space.start
        self.action_space = spaces.Discrete(int(space.n))

    def action(self, action: Any) -> Any:
        return self._start + action


def adapt_spaces(env: gym.Env, env_id: str) -> gym.Env:
    """Reject spaces the MLP cannot use; wrap the rest into float32 vectors / 0-based actions."""
    act_space = env.action_space
    if not isinstance(act_space, spaces.Discrete):
        raise UsageError(
            f"environment {env_id!r} has action space {act_space}; "
            "only Discrete action spaces are supported"
        )
    if act_space.start != 0:
        env = ZeroBasedActions(env)

    obs_space = env.observation_space
    if isinstance(obs_space, spaces.Discrete):
        return OneHotObservation(env)
    if (
        isinstance(obs_space, spaces.Box)
        and len(obs_space.shape) == 1
        and obs_space.shape[0] > 0
        and (
            np.issubdtype(obs_space.dtype, np.floating)
            or np.issubdtype(obs_space.dtype, np.integer)
        )
    ):
        return env if obs_space.dtype == np.float32 else Float32Observation(env)
    raise UsageError(
        f"environment {env_id!r} has observation space {obs_space}; only 1-D Box "
        "(float or integer) and Discrete observation spaces are supported (no images, "
        "Dict or Tuple)"
    )
