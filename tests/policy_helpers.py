"""Building policies in tests without an environment."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from a3c.actions import DiscreteActions
from a3c.policy import ActorCritic, ModelSpec


def mlp(obs_dim: int, n_actions: int, **kw: Any) -> ActorCritic:
    """An MLP actor-critic over ``obs_dim`` floats picking one of ``n_actions``."""
    return ModelSpec((obs_dim,), DiscreteActions(n_actions), **kw).build()


class SpaceEnv(gym.Env):
    """A one-step env with any spaces; it remembers the last action it was given."""

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space) -> None:
        self.observation_space = observation_space
        self.action_space = action_space
        self.last_action: Any = None

    def reset(self, *, seed=None, options=None):  # noqa: ANN001, ANN201
        super().reset(seed=seed)
        self.observation_space.seed(seed)
        return self.observation_space.sample(), {}

    def step(self, action):  # noqa: ANN001, ANN201
        self.last_action = action
        return self.observation_space.sample(), 0.0, True, False, {}


def register_space_env(env_id: str, obs: spaces.Space, act: spaces.Space) -> None:
    if env_id not in gym.registry:
        gym.register(
            id=env_id, entry_point=SpaceEnv, kwargs={"observation_space": obs, "action_space": act}
        )


class MatchDigits(gym.Env):
    """Name two digits in {0, 1, 2} shown one-hot: ``MultiDiscrete([3, 3])`` actions.

    Reward per step: the fraction of digits named right. 10 steps an episode, so a random
    policy gets 3.3 and a perfect one 10.
    """

    observation_space = spaces.Box(0.0, 1.0, (6,), np.float32)
    action_space = spaces.MultiDiscrete([3, 3])

    def reset(self, *, seed=None, options=None):  # noqa: ANN001, ANN201
        super().reset(seed=seed)
        self._t = 0
        return self._show(), {}

    def _show(self) -> np.ndarray:
        self._digits = self.np_random.integers(3, size=2)
        obs = np.zeros(6, np.float32)
        obs[self._digits + (0, 3)] = 1.0
        return obs

    def step(self, action):  # noqa: ANN001, ANN201
        reward = float(np.mean(np.asarray(action) == self._digits))
        self._t += 1
        return self._show(), reward, False, self._t >= 10, {}


class CopyBits(gym.Env):
    """Copy two bits from a ``Dict`` observation (bits, a distractor) with ``MultiBinary(2)``.

    Reward per step: the fraction of bits copied right; 10 steps (random 5, perfect 10).
    """

    observation_space = spaces.Dict(
        {"bits": spaces.MultiBinary(2), "noise": spaces.Box(-1.0, 1.0, (2,), np.float32)}
    )
    action_space = spaces.MultiBinary(2)

    def reset(self, *, seed=None, options=None):  # noqa: ANN001, ANN201
        super().reset(seed=seed)
        self._t = 0
        return self._show(), {}

    def _show(self) -> dict:
        self._bits = self.np_random.integers(2, size=2).astype(np.int8)
        noise = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return {"bits": self._bits, "noise": noise}

    def step(self, action):  # noqa: ANN001, ANN201
        reward = float(np.mean(np.asarray(action) == self._bits))
        self._t += 1
        return self._show(), reward, False, self._t >= 10, {}


for _id, _cls in (("MatchDigits-v0", MatchDigits), ("CopyBits-v0", CopyBits)):
    if _id not in gym.registry:
        gym.register(id=_id, entry_point=_cls)


class NoVelocity(gym.ObservationWrapper):
    """CartPole with the velocities removed (cart position and pole angle only): the
    policy must remember the last observations to know where things are going."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        high = env.observation_space.high[[0, 2]]
        self.observation_space = spaces.Box(-high, high, (2,), np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[[0, 2]]


def cartpole_no_velocity(**kwargs: Any) -> gym.Env:
    return NoVelocity(gym.make("CartPole-v1", **kwargs))


if "CartPoleNoVel-v1" not in gym.registry:
    gym.register(id="CartPoleNoVel-v1", entry_point=cartpole_no_velocity)
