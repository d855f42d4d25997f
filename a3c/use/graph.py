"""``Policy.predict`` as one torch module, so that an exporter (:mod:`.exporting`) sees it whole.

Raw env observations in, the env's actions out: the observation adapters (one-hot,
``Dict``/``Tuple`` flattening, image bytes), the model with its observation normalisation,
the greedy action or a draw, the clipping or squashing of continuous actions, and the
action adapters, each a batched torch twin of what :mod:`a3c.envs.spaces` does in numpy.
Only ops that ``torch.export``, the ONNX exporter and TorchScript's tracer all take are
used: one-hot is a comparison with ``arange``, a categorical draw is Gumbel-max over
``rand_like`` (ONNX has uniform and normal random ops, no exponential one).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector.utils import batch_space
from gymnasium.wrappers import FlattenObservation
from torch import Tensor, nn

from a3c.envs.multiagent import ACTION_MASK, OBSERVATION, SEAT
from a3c.envs.spaces import (
    ByteImage,
    FlatActions,
    FlatMultiDiscrete,
    Float32Observation,
    OneHotObservation,
    ZeroBasedActions,
)
from a3c.policy import ActorCritic
from a3c.policy.distributions import ActionDistribution, Categorical, DiagGaussian, MultiCategorical
from hogwild.errors import UsageError

Obs = Tensor | dict[str, Any] | tuple[Any, ...]
#: One observation adapter's torch twin: from a tensor (or a dict/tuple of them) to a tensor.
ObsStep = Callable[[Any], Tensor]


class ActingGraph(nn.Module):
    """``forward(obs) -> actions``; an LSTM policy's ``forward(obs, h, c) -> (actions, h, c)``.

    With ``greedy=False`` the actions are drawn (the graph's own random ops) and the
    distribution's parameters follow them: ``logits``, or a Gaussian's ``mean`` and
    ``log_std`` (before clipping or squashing). ``obs`` is a batch of the env's own
    observations: one tensor, or for ``Dict``/``Tuple`` spaces a dict/tuple of them. With
    ``masked`` (a PettingZoo game's ``{"observation", "action_mask"}``), the adapters take
    the observation and the mask follows it into the model (padded with illegal actions to
    the model's, a group's policy's), as :class:`a3c.envs.multiagent.AgentViews` does;
    ``legal``, the mask a group's policy reads where its env gives none. With ``seats``
    (a turn-based game whose rows tell their seat), ``obs`` holds the agent's ``"seat"``
    beside its ``"observation"``: its index among the game's agents.
    """

    low: Tensor  # buffers, registered when actions are clipped or squashed
    high: Tensor

    def __init__(
        self,
        model: ActorCritic,
        adapters: list[gym.Wrapper],
        observation_space: spaces.Space,
        *,
        greedy: bool = True,
        masked: bool = False,
        legal: Tensor | None = None,
        seats: int = 0,
    ) -> None:
        super().__init__()
        self.model = model
        self.greedy = greedy
        self.masked, self.seats = masked, seats
        self.legal: Tensor | None
        self.register_buffer("legal", legal)
        self.observation_space = observation_space
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

    def forward(self, obs: Obs, h: Tensor | None = None, c: Tensor | None = None) -> Any:
        parts: Any = obs  # a dict of the observation, its mask when masked, its seat
        x: Any = parts[OBSERVATION] if self.masked or self.seats else obs
        for step in self.obs_steps:  # a tensor after them, a dict or tuple flattened
            x = step(x)
        if not self.model.spec.image:
            x = x.to(torch.float32)
        if self.seats:
            x = torch.cat((x, _one_hot(parts[SEAT].long(), self.seats)), 1)
        if self.masked:
            mask = parts[ACTION_MASK].to(torch.float32)
            pad = self.model.n_pi - mask.shape[1]
            x = torch.cat((x, mask, x.new_zeros(x.shape[0], pad)) if pad else (x, mask), 1)
        elif self.legal is not None:
            x = torch.cat((x, self.legal.expand(x.shape[0], -1)), 1)
        if self.model.recurrent:
            assert h is not None and c is not None, "an LSTM policy's graph takes (obs, h, c)"
            pi, (h, c) = self.model.pi_recurrent(x, (h, c))
        else:
            pi = self.model.pi(x)
        dist = self.model.dist
        out: list[Tensor | None] = [
            self._to_env(dist.greedy(pi) if self.greedy else _draw(dist, pi))
        ]
        if not self.greedy:
            out += [pi, dist.log_std.expand_as(pi)] if isinstance(dist, DiagGaussian) else [pi]
        if self.model.recurrent:
            out += [h, c]
        return out[0] if len(out) == 1 else tuple(out)

    def _to_env(self, a: Tensor) -> Tensor:
        if self.squash:  # then clipped too: a runtime's fast tanh may pass 1 by an ulp
            a = self.low + (torch.tanh(a) + 1.0) * (0.5 * (self.high - self.low))
        if self.squash or self.clip:
            a = torch.maximum(torch.minimum(a, self.high), self.low)
        for step in self.act_steps:
            a = step(a)
        return a

    # -- the signature the exporters write ------------------------------------------------
    @property
    def obs_names(self) -> list[str]:
        """One name per observation tensor: ``obs``, or ``obs.<key>`` / ``obs.<i>`` paths."""
        return [name for name, _ in _leaves(self.observation_space, "obs")]

    @property
    def input_names(self) -> list[str]:
        return self.obs_names + (["h", "c"] if self.model.recurrent else [])

    @property
    def output_names(self) -> list[str]:
        names = ["actions"]
        if not self.greedy:
            names += (
                ["mean", "log_std"] if isinstance(self.model.dist, DiagGaussian) else ["logits"]
            )
        return names + (["h_next", "c_next"] if self.model.recurrent else [])

    def example_inputs(self, batch: int, seed: int = 0) -> dict[str, Any]:
        """Keyword arguments for ``forward``: ``batch`` sampled observations (and zero states)."""
        space = batch_space(self.observation_space, batch)
        space.seed(seed)
        inputs: dict[str, Any] = {"obs": _as_tensors(space.sample())}
        if self.model.recurrent:
            inputs["h"], inputs["c"] = self.model.initial_state(batch)
        return inputs

    def batch_dims(self, dim: Any) -> dict[str, Any]:
        """``dynamic_shapes`` for :meth:`example_inputs`: ``dim`` as every input's first axis."""
        shapes: dict[str, Any] = {"obs": _tree_map(lambda _: {0: dim}, self.observation_space)}
        if self.model.recurrent:
            shapes["h"] = shapes["c"] = {0: dim}
        return shapes


def _draw(dist: ActionDistribution, pi: Tensor) -> Tensor:
    """A draw from ``dist``, as its ``sample`` but with random ops every exporter knows."""
    if isinstance(dist, Categorical | MultiCategorical):
        logits = dist._block(pi) if isinstance(dist, MultiCategorical) else pi
        u = torch.rand_like(logits).clamp(min=torch.finfo(logits.dtype).tiny)
        return (logits - torch.log(-torch.log(u))).argmax(-1)  # Gumbel-max
    return dist.sample(pi)  # Bernoulli: rand_like; Gaussian: randn_like


def _one_hot(i: Tensor, n: int) -> Tensor:
    return (i.unsqueeze(-1) == torch.arange(n)).to(torch.float32)


def _flatten(space: spaces.Space) -> ObsStep:
    """A batched torch twin of ``gymnasium.spaces.flatten`` for ``space``, as ``float32``."""
    if isinstance(space, spaces.Dict):
        parts = {key: _flatten(s) for key, s in space.spaces.items()}
        return lambda x: torch.cat([f(x[key]) for key, f in parts.items()], 1)
    if isinstance(space, spaces.Tuple):
        items = [_flatten(s) for s in space.spaces]
        return lambda x: torch.cat([f(x[i]) for i, f in enumerate(items)], 1)
    if isinstance(space, spaces.Discrete):
        n, start = int(space.n), int(space.start)
        return lambda x: _one_hot(x.long() - start, n)
    if isinstance(space, spaces.MultiDiscrete):
        sizes = [(int(n), int(s)) for n, s in zip(space.nvec.flat, space.start.flat, strict=True)]

        def one_hots(x: Tensor) -> Tensor:
            x = x.flatten(1).long()
            return torch.cat([_one_hot(x[:, i] - s, n) for i, (n, s) in enumerate(sizes)], 1)

        return one_hots
    return lambda x: x.flatten(1).to(torch.float32)  # Box, MultiBinary


def _obs_step(wrapper: gym.ObservationWrapper) -> ObsStep:
    """A batched torch twin of one observation adapter (its ``observation``)."""
    if isinstance(wrapper, FlattenObservation):
        return _flatten(wrapper.env.observation_space)
    if isinstance(wrapper, OneHotObservation):
        n, start = wrapper._n, wrapper._start
        return lambda x: _one_hot(x.long() - start, n)
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
        shape, offset = wrapper._shape, torch.as_tensor(wrapper._start)
        return lambda a: a.reshape(-1, *shape) + offset
    if isinstance(wrapper, FlatActions):
        flat_shape, dtype = wrapper._shape, torch.from_numpy(np.zeros(0, wrapper._dtype)).dtype
        return lambda a: a.reshape(-1, *flat_shape).to(dtype)
    raise UsageError(f"export: no torch version of the adapter {type(wrapper).__name__}")


def _leaves(space: spaces.Space, name: str) -> list[tuple[str, spaces.Space]]:
    """The tensors an observation of ``space`` is made of, named by their path."""
    if isinstance(space, spaces.Dict):
        return [leaf for k, s in space.spaces.items() for leaf in _leaves(s, f"{name}.{k}")]
    if isinstance(space, spaces.Tuple):
        return [leaf for i, s in enumerate(space.spaces) for leaf in _leaves(s, f"{name}.{i}")]
    return [(name, space)]


def _tree_map(f: Callable[[spaces.Space], Any], space: spaces.Space) -> Any:
    if isinstance(space, spaces.Dict):
        return {k: _tree_map(f, s) for k, s in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_tree_map(f, s) for s in space.spaces)
    return f(space)


def _as_tensors(x: Any) -> Obs:
    if isinstance(x, dict):
        return {k: _as_tensors(v) for k, v in x.items()}
    if isinstance(x, tuple):
        return tuple(_as_tensors(v) for v in x)
    return torch.as_tensor(np.asarray(x))
