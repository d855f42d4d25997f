"""What the policy sees and does: the env's spaces adapted to the model, or refused in one line.

Observations become one of two things: a flat ``float32`` vector (``Box`` of any
numeric dtype and shape, ``Discrete`` one-hot, ``MultiDiscrete``/``MultiBinary``, and
``Dict``/``Tuple`` of those, flattened by Gymnasium's ``flatten_space`` rules) or an image
(a 2-D/3-D ``uint8`` or boolean ``Box``, kept as bytes for a conv encoder).
Actions become 0-based and 1-D: ``Discrete``, ``MultiDiscrete``, ``MultiBinary``, or a
float ``Box``; :func:`action_spec` describes them for the policy. ``Graph``, ``Sequence``,
``Text``, ``OneOf`` and composite action spaces are refused, naming the space.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple, TypeGuard

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.wrappers import FlattenObservation

from a3c.actions import (
    ActionSpec,
    BoxActions,
    DiscreteActions,
    MultiBinaryActions,
    MultiDiscreteActions,
)
from hogwild.errors import UsageError

__all__ = ["EnvSpaces", "action_spec", "adapt_spaces", "describe_spaces", "policy_takes"]

log = logging.getLogger(__name__)

#: Observation spaces Gymnasium can flatten into a fixed-length vector.
_FLAT = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


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
    """Numeric ``Box`` observations of any shape or dtype as flat ``float32`` vectors."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        assert isinstance(space, spaces.Box)
        self.observation_space = spaces.Box(
            space.low.reshape(-1).astype(np.float32),
            space.high.reshape(-1).astype(np.float32),
            (space.low.size,),
            np.float32,
        )

    def observation(self, observation: Any) -> np.ndarray:
        return np.asarray(observation, dtype=np.float32).reshape(-1)


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


class ByteImage(gym.ObservationWrapper):
    """2-D images as one-channel ``[1, H, W]``; boolean grids as ``uint8`` 0/255."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        assert is_image(space)
        self._shape = space.shape if len(space.shape) == 3 else (1, *space.shape)
        self._bool = space.dtype == np.bool_
        self.observation_space = spaces.Box(0, 255, self._shape, np.uint8)

    def observation(self, observation: Any) -> np.ndarray:
        obs = np.asarray(observation).reshape(self._shape)
        return obs.astype(np.uint8) * 255 if self._bool else obs.astype(np.uint8, copy=False)


class FlatMultiDiscrete(gym.ActionWrapper):
    """``MultiDiscrete`` of any shape and start as a 1-D, 0-based ``MultiDiscrete``."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.action_space
        assert isinstance(space, spaces.MultiDiscrete)
        self._shape, self._start = space.nvec.shape, space.start
        self.action_space = spaces.MultiDiscrete(space.nvec.reshape(-1))

    def action(self, action: Any) -> Any:
        return np.asarray(action).reshape(self._shape) + self._start


class FlatActions(gym.ActionWrapper):
    """Actions of any shape (``MultiBinary``, ``Box``) taken as a flat vector of ``space``."""

    def __init__(self, env: gym.Env, space: spaces.Space) -> None:
        super().__init__(env)
        shape = env.action_space.shape
        assert shape is not None  # a MultiBinary or Box
        self._shape, self._dtype = shape, env.action_space.dtype
        self.action_space = space

    def action(self, action: Any) -> Any:
        return np.asarray(action).reshape(self._shape).astype(self._dtype, copy=False)


def adapt_spaces(env: gym.Env, env_id: str) -> gym.Env:
    """Wrap ``env`` so that the policy gets what the module docstring promises, or refuse it."""
    env = _adapt_actions(env, env_id)
    obs_space = env.observation_space
    if is_image(obs_space):
        fits = obs_space.dtype == np.uint8 and len(obs_space.shape) == 3
        return env if fits else ByteImage(env)
    if isinstance(obs_space, spaces.Discrete):
        return OneHotObservation(env)
    if isinstance(obs_space, spaces.Box) and _numeric(obs_space.dtype) and obs_space.shape:
        flat = len(obs_space.shape) == 1 and obs_space.dtype == np.float32
        return env if flat else Float32Observation(env)
    if _flattenable(obs_space) and not isinstance(obs_space, spaces.Box):
        return Float32Observation(FlattenObservation(env))
    raise UsageError(
        f"environment {env_id!r} has observation space {obs_space}, which is not supported; "
        "supported: Box (numeric), Discrete, MultiDiscrete, MultiBinary, images, and "
        "Dict/Tuple of these"
    )


def policy_takes(env: gym.Env) -> bool:
    """Whether :func:`adapt_spaces` takes ``env``'s spaces (as they are or adapted) rather
    than refusing them: a preset's wrapper that would make them so has nothing to do."""
    try:
        adapt_spaces(env, "")
    except UsageError:
        return False
    return True


def _adapt_actions(env: gym.Env, env_id: str) -> gym.Env:
    space = env.action_space
    if isinstance(space, spaces.Discrete):
        return env if space.start == 0 else ZeroBasedActions(env)
    if isinstance(space, spaces.MultiDiscrete):
        flat = space.nvec.ndim == 1 and not np.any(space.start)
        return env if flat else FlatMultiDiscrete(env)
    if isinstance(space, spaces.MultiBinary):
        return env if len(space.shape) == 1 else FlatActions(env, spaces.MultiBinary(space.n))
    if isinstance(space, spaces.Box) and np.issubdtype(space.dtype, np.floating):
        if len(space.shape) == 1 and space.dtype == np.float32:
            return env
        low, high = (b.reshape(-1).astype(np.float32) for b in (space.low, space.high))
        return FlatActions(env, spaces.Box(low, high, low.shape, np.float32))
    raise UsageError(
        f"environment {env_id!r} has action space {space}, which is not supported; "
        "supported: Discrete, MultiDiscrete, MultiBinary, and float Box"
    )


class EnvSpaces(NamedTuple):
    """What the policy is built from: the adapted observation's shape and dtype, the
    action space's description (:func:`action_spec`), whether the observation ends
    in the legal-action mask, the groups of agents with policies of their own, each's
    (observation size, actions) (:class:`a3c.envs.multiagent.AgentViews`), and the board
    ``(H, W, C)`` a masked observation starts with (:class:`a3c.envs.multiagent.AgentView`)."""

    obs_shape: tuple[int, ...]
    obs_dtype: str
    action: ActionSpec
    action_mask: bool = False
    groups: tuple[tuple[int, int], ...] = ()
    grid: tuple[int, ...] = ()

    @property
    def kind(self) -> str:
        """What the observations are, as a one-line error names them: ``images``, ``a
        board`` (a game's, in front of its mask) or ``vectors``."""
        return "images" if len(self.obs_shape) == 3 else "a board" if self.grid else "vectors"


def describe_spaces(env: gym.Env) -> EnvSpaces:
    """The :class:`EnvSpaces` of an env that went through :func:`adapt_spaces`."""
    obs = env.observation_space
    assert obs.shape is not None  # adapt_spaces refuses spaces without one
    return EnvSpaces(tuple(obs.shape), np.dtype(obs.dtype).name, action_spec(env.action_space))


def action_spec(space: spaces.Space) -> ActionSpec:
    """The record (:mod:`a3c.actions`) that describes an adapted (0-based, 1-D) action space
    for the policy."""
    if isinstance(space, spaces.Discrete):
        return DiscreteActions(int(space.n))
    if isinstance(space, spaces.MultiDiscrete):
        return MultiDiscreteActions(tuple(int(n) for n in space.nvec.reshape(-1)))
    if isinstance(space, spaces.MultiBinary):
        return MultiBinaryActions(int(np.prod(space.shape)))
    if isinstance(space, spaces.Box):
        low, high = space.low.reshape(-1), space.high.reshape(-1)
        if not (np.isfinite(low).all() and np.isfinite(high).all()):
            log.warning(
                "action space %s has infinite bounds: Gaussian draws go to the env unclipped",
                space,
            )
        return BoxActions(tuple(low.tolist()), tuple(high.tolist()))
    raise UsageError(f"action space {space} is not supported")


def is_image(space: spaces.Space) -> TypeGuard[spaces.Box]:
    """A 2-D/3-D ``Box`` of bytes or booleans: pixels or a MinAtar-style grid."""
    return (
        isinstance(space, spaces.Box)
        and len(space.shape) in (2, 3)
        and (space.dtype == np.uint8 or space.dtype == np.bool_)
    )


def _numeric(dtype: Any) -> bool:
    return np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.integer)


def _flattenable(space: spaces.Space) -> bool:
    if isinstance(space, spaces.Dict):
        return len(space.spaces) > 0 and all(_flattenable(s) for s in space.spaces.values())
    if isinstance(space, spaces.Tuple):
        return len(space.spaces) > 0 and all(_flattenable(s) for s in space.spaces)
    if isinstance(space, spaces.Box):
        return _numeric(space.dtype) and space.shape != ()
    return isinstance(space, _FLAT)
