"""A trained policy to use from Python: ``Policy.load(path).predict(obs)``, as SB3's ``predict``.

Observations and actions are the env's own (what ``policy.make_env()`` gives and takes):
the adapters a run puts between env and model (one-hot ``Discrete``, flattened ``Dict``,
0-based actions, ...) are applied inside, and so are the run's observation
normalisation (the model's buffers) and the clipping or squashing of continuous actions.
``export`` writes a TorchScript file that needs only torch to act greedily.
"""

from __future__ import annotations

import copy
import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
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
from a3c.policy import ActorCritic
from a3c.use.saved import load_policy
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
        one); ``episode_start``: per env, True where an episode began (resets its state;
        ``a3c.evaluate`` also resets it on Atari's ``info["life_lost"]``, as training did).
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
        """Write a TorchScript file that acts greedily with torch alone (no a3c installed):
        ``module(obs) -> actions``, or for an LSTM policy ``module(obs, h, c) -> (actions,
        h, c)`` (zero ``[B, state_size]`` tensors to start). ``obs`` is a batch of the env's
        own observations as one tensor (ints for ``Discrete``); adapters, normalisation and
        clipping are inside. ``policy.json`` in the file's extra files names the spaces and
        ``state_size``. ``Dict``/``Tuple``/``Multi*`` observations are not one tensor, so
        they are refused (UsageError): use ``predict``."""
        flattened = [w for w in self._adapters if isinstance(w, FlattenObservation)]
        if flattened:
            raise UsageError(
                f"export: observations of {self.env_id} ({self.observation_space}) are "
                "flattened into one vector inside, which one input tensor cannot carry; "
                "export supports Box and Discrete observations, use predict for others"
            )
        model = copy.deepcopy(self.model).requires_grad_(False)
        module = _Greedy(model, self._adapters)
        example = torch.as_tensor(np.stack([self.observation_space.sample() for _ in range(2)]))
        inputs = (example, *model.initial_state(2)) if self.recurrent else example
        with warnings.catch_warnings():  # torch 2.13 calls TorchScript deprecated; it still
            warnings.simplefilter("ignore", DeprecationWarning)  # is what runs without us
            traced = torch.jit.trace(module, inputs, check_trace=False)
        meta = {
            "env_id": self.env_id,
            "observation_space": str(self.observation_space),
            "action_space": str(self.action_space),
            "state_size": model.spec.lstm,
        }
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        traced.save(str(path), _extra_files={"policy.json": json.dumps(meta)})
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
    """What ``predict(deterministic=True)`` does, in torch ops only so that it traces: the
    observation adapters, the model (normalisation in its buffers), the distribution's
    ``to_env`` (squash or clip) and the action adapters."""

    def __init__(self, model: ActorCritic, adapters: list[gym.Wrapper]) -> None:
        super().__init__()
        self.model = model
        inner_first = reversed(adapters)
        self.obs_steps = [
            _obs_step(w) for w in inner_first if isinstance(w, gym.ObservationWrapper)
        ]
        self.act_steps = [_act_step(w) for w in adapters if isinstance(w, gym.ActionWrapper)]
        dist = model.dist
        self.squash = bool(getattr(dist, "squash", False))
        self.clip = bool(getattr(dist, "_clip", False))
        if self.squash or self.clip:
            self.register_buffer("low", torch.as_tensor(dist.low))
            self.register_buffer("high", torch.as_tensor(dist.high))

    def forward(self, obs: Tensor, *state: Tensor) -> Any:
        for step in self.obs_steps:
            obs = step(obs)
        if not self.model.spec.image:
            obs = obs.to(torch.float32)
        if state:
            a, (h, c) = self.model.act_recurrent(obs, (state[0], state[1]), True)
            return self._to_env(a), h, c
        return self._to_env(self.model.act(obs, True))

    def _to_env(self, a: Tensor) -> Tensor:
        if self.squash:
            a = self.low + (torch.tanh(a) + 1.0) * (0.5 * (self.high - self.low))
        elif self.clip:
            a = torch.maximum(torch.minimum(a, self.high), self.low)
        for step in self.act_steps:
            a = step(a)
        return a


def _obs_step(wrapper: gym.ObservationWrapper) -> Callable[[Tensor], Tensor]:
    """A batched torch twin of one observation adapter (its ``observation``)."""
    if isinstance(wrapper, OneHotObservation):
        n, start = wrapper._n, wrapper._start
        return lambda x: F.one_hot(x.long() - start, n).to(torch.float32)
    if isinstance(wrapper, Float32Observation):
        return lambda x: x.flatten(1).to(torch.float32)
    if isinstance(wrapper, ByteImage):
        shape, bools = wrapper._shape, wrapper._bool
        return lambda x: (x.to(torch.uint8) * (255 if bools else 1)).reshape(-1, *shape)
    raise UsageError(f"export: no torch version of the adapter {type(wrapper).__name__}")


def _act_step(wrapper: gym.ActionWrapper) -> Callable[[Tensor], Tensor]:
    """A batched torch twin of one action adapter (its ``action``)."""
    if isinstance(wrapper, ZeroBasedActions):
        start = int(wrapper._start)
        return lambda a: a + start
    if isinstance(wrapper, FlatMultiDiscrete):
        shape, start = wrapper._shape, torch.as_tensor(wrapper._start)
        return lambda a: a.reshape(-1, *shape) + start
    if isinstance(wrapper, FlatActions):
        shape, dtype = wrapper._shape, torch.from_numpy(np.zeros(0, wrapper._dtype)).dtype
        return lambda a: a.reshape(-1, *shape).to(dtype)
    raise UsageError(f"export: no torch version of the adapter {type(wrapper).__name__}")


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
