"""A trained policy to use from Python: ``Policy.load(path).predict(obs)``, as SB3's ``predict``.

Observations and actions are the env's own (what ``policy.make_env()`` gives and takes):
the adapters a run puts between env and model (one-hot ``Discrete``, flattened ``Dict``,
0-based actions, ...) are applied inside, and so are the run's observation
normalisation (the model's buffers) and the clipping or squashing of continuous actions.
``export`` writes a TorchScript file that needs only torch to act greedily.
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.wrappers import FlattenObservation
from torch import Tensor, nn

from a3c.envs import make_env
from a3c.envs.spaces import (
    ByteImage,
    FlatActions,
    FlatMultiDiscrete,
    Float32Observation,
    OneHotObservation,
    ZeroBasedActions,
)
from a3c.evaluate import load_policy
from a3c.policy import ActorCritic
from hogwild.errors import UsageError

#: The wrappers :func:`a3c.envs.spaces.adapt_spaces` puts between an env and the model.
ADAPTERS = (
    ByteImage,
    FlatActions,
    FlatMultiDiscrete,
    FlattenObservation,
    Float32Observation,
    OneHotObservation,
    ZeroBasedActions,
)

State = tuple[Tensor, Tensor]


class Policy:
    """A saved policy: ``predict`` actions for the env's own observations."""

    def __init__(self, model: ActorCritic, env_id: str, env_kwargs: dict[str, Any]) -> None:
        self.model = model.eval()
        self.env_id, self.env_kwargs = env_id, dict(env_kwargs)
        env = make_env(env_id, scoring=True, **self.env_kwargs)
        try:
            self._adapters, inner = _adapters_of(env)
            self.observation_space: spaces.Space = inner.observation_space
            self.action_space: spaces.Space = inner.action_space
        finally:
            env.close()

    @classmethod
    def load(cls, path: str | Path, env: str | None = None) -> Policy:
        """The policy of a checkpoint (``checkpoint.pt`` or ``best.pt``) of ``a3c.train``;
        ``env`` plays it on another env whose spaces fit. Bad files: one-line UsageError."""
        saved = load_policy(path, env)
        return cls(saved.model, saved.env_id, saved.env_kwargs)

    @property
    def recurrent(self) -> bool:
        return self.model.recurrent

    def make_env(self, **kwargs: Any) -> gym.Env:
        """The env the policy acts in, as the run scored it (whole games, real rewards),
        with its own spaces; ``kwargs`` go to ``gymnasium.make`` (e.g. ``render_mode``)."""
        env = make_env(self.env_id, scoring=True, **{**self.env_kwargs, **kwargs})
        return _adapters_of(env)[1]

    def initial_state(self, batch: int = 1) -> State | None:
        """A recurrent policy's zero state for ``batch`` envs (None if not recurrent)."""
        return self.model.initial_state(batch) if self.recurrent else None

    def predict(
        self,
        observation: Any,
        state: State | None = None,
        episode_start: Any = None,
        deterministic: bool = True,
    ) -> tuple[Any, State | None]:
        """``(action, state)`` for one observation or a batch (told apart by shape, as in
        SB3). ``state``: a recurrent policy's state from the last call (None: a fresh
        one); ``episode_start``: per env, True where an episode began (resets its state).
        Stochastic draws (``deterministic=False``) use torch's global generator."""
        batched = _is_batch(self.observation_space, observation)
        rows = _rows(observation) if batched else [observation]
        x = torch.as_tensor(np.stack([self._adapt_obs(o) for o in rows]))
        greedy = bool(deterministic)
        with torch.no_grad():
            if self.recurrent:
                if state is None:
                    state = self.model.initial_state(len(rows))
                if episode_start is not None:
                    keep = ~torch.as_tensor(np.asarray(episode_start, bool).reshape(-1, 1))
                    state = (state[0] * keep, state[1] * keep)
                a, state = self.model.act_recurrent(x, state, greedy)
            else:
                a = self.model.act(x, greedy)
        actions = [self._env_action(row) for row in self.model.dist.to_env(a)]
        return (np.stack(actions) if batched else actions[0]), state

    def export(self, path: str | Path) -> Path:
        """A TorchScript file mapping a batch of observations (``[B, *obs_shape]``) to
        greedy actions ``[B, ...]``, normalisation and clipping inside; loads with
        ``torch.jit.load`` alone. Observations must need no adapter (a ``Box``: vectors or
        ``uint8`` images) and the policy must be feed-forward, else a UsageError."""
        if self.recurrent:
            raise UsageError("export: a recurrent (LSTM) policy cannot be exported yet")
        obs_adapters = [w for w in self._adapters if isinstance(w, gym.ObservationWrapper)]
        if obs_adapters or not isinstance(self.observation_space, spaces.Box):
            raise UsageError(
                f"export: observations of {self.env_id} ({self.observation_space}) need an "
                "adapter (one-hot, flattening) that TorchScript does not carry; use predict"
            )
        if any(
            isinstance(w, gym.ActionWrapper)
            for w in self._adapters
            if not isinstance(w, ZeroBasedActions)
        ):
            raise UsageError(
                f"export: actions of {self.env_id} ({self.action_space}) need reshaping that "
                "the exported module does not do; use predict"
            )
        module = _Greedy(copy.deepcopy(self.model).requires_grad_(False), self.action_space)
        example = torch.as_tensor(np.stack([self.observation_space.sample()] * 2))
        with warnings.catch_warnings():  # torch 2.13 calls TorchScript deprecated; it still
            warnings.simplefilter("ignore", DeprecationWarning)  # is what runs without us
            traced = torch.jit.trace(module, example, check_trace=False)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        traced.save(str(path))
        return path

    # -- the adapters ---------------------------------------------------------------------
    def _adapt_obs(self, obs: Any) -> np.ndarray:
        for wrapper in reversed(self._adapters):  # innermost first
            if isinstance(wrapper, gym.ObservationWrapper):
                obs = wrapper.observation(obs)
        obs = np.asarray(obs)
        if obs.shape != self.model.spec.obs_shape:
            raise UsageError(
                f"an observation of shape {obs.shape} does not fit {self.observation_space}"
            )
        return obs

    def _env_action(self, action: np.ndarray) -> Any:
        for wrapper in self._adapters:  # outermost first
            if isinstance(wrapper, gym.ActionWrapper):
                action = wrapper.action(action)
        return action


def load(path: str | Path, env: str | None = None) -> Policy:
    """:meth:`Policy.load`."""
    return Policy.load(path, env)


class _Greedy(nn.Module):
    """Observations -> greedy actions as the env takes them, in torch ops only."""

    def __init__(self, model: ActorCritic, action_space: spaces.Space) -> None:
        super().__init__()
        self.model = model
        dist = model.dist
        self.squash = bool(getattr(dist, "squash", False))
        low, high = getattr(dist, "low", None), getattr(dist, "high", None)
        self.register_buffer("low", torch.as_tensor(low if low is not None else [0.0]))
        self.register_buffer("high", torch.as_tensor(high if high is not None else [0.0]))
        self.clip = low is not None and bool(getattr(dist, "_clip", False))
        self.start = int(action_space.start) if isinstance(action_space, spaces.Discrete) else 0

    def forward(self, obs: Tensor) -> Tensor:
        a = self.model.dist.greedy(self.model.pi(obs))
        if self.squash:
            return self.low + (torch.tanh(a) + 1.0) * (0.5 * (self.high - self.low))
        if self.clip:
            return torch.maximum(torch.minimum(a, self.high), self.low)
        return a + self.start if self.start else a


def _adapters_of(env: gym.Env) -> tuple[list[gym.Wrapper], gym.Env]:
    """The adapter wrappers on top of ``env`` (outermost first) and the env beneath them."""
    chain = []
    while isinstance(env, ADAPTERS):
        chain.append(env)
        env = env.env
    return chain, env


def _is_batch(space: spaces.Space, obs: Any) -> bool:
    """One observation of ``space``, or a batch of them (a leading axis)?"""
    if isinstance(space, spaces.Dict):
        if not isinstance(obs, dict) or not obs:
            raise UsageError(f"expected a dict of observations for {space}")
        key = next(iter(space.spaces))
        return _is_batch(space.spaces[key], obs[key])
    if isinstance(space, spaces.Tuple):
        return _is_batch(space.spaces[0], obs[0])
    shape = np.shape(obs)
    if shape == tuple(space.shape or ()):
        return False
    if shape[1:] == tuple(space.shape or ()):
        return True
    raise UsageError(f"an observation of shape {shape} does not fit {space}")


def _rows(batch: Any) -> list[Any]:
    """A batch (array, or dict/tuple of arrays) as a list of single observations."""
    if isinstance(batch, dict):
        n = len(next(iter(batch.values())))
        return [{k: v[i] for k, v in batch.items()} for i in range(n)]
    if isinstance(batch, tuple):
        n = len(batch[0])
        return [tuple(part[i] for part in batch) for i in range(n)]
    return list(np.asarray(batch))
