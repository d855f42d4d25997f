"""A user's own module: env factories and wrappers named ``user_envs:NAME`` in the tests
(the tests folder is on ``sys.path``; subprocesses get it through ``PYTHONPATH``)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

NOT_CALLABLE = 42


class Positions(gym.ObservationWrapper):
    """CartPole without its velocities: a policy that sees 2 numbers instead of 4."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        box = env.observation_space
        self.observation_space = spaces.Box(box.low[::2], box.high[::2], dtype=np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[::2].astype(np.float32)


class Tagged(gym.Wrapper):
    """Records the order in which wrappers were applied (``env.tags``)."""

    label = ""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.tags = [*getattr(env, "tags", []), self.label]


class TagA(Tagged):
    label = "a"


class TagB(Tagged):
    label = "b"


def not_an_env(env: gym.Env) -> str:
    return "oops"


def short_cartpole(length: int = 50) -> gym.Env:
    """An env factory: CartPole cut at ``length`` steps."""
    return gym.make("CartPole-v1", max_episode_steps=length)


def minigrid_image(env: gym.Env) -> gym.Env:
    """What MiniGrid's and SB3's examples do: the agent's 7x7 view as the observation."""
    from minigrid.wrappers import ImgObsWrapper

    return ImgObsWrapper(env)
