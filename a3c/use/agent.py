"""A trained policy to use from Python: ``Policy.load(path).predict(obs)``, as SB3's ``predict``.

Observations and actions are the env's own (what ``policy.make_env()`` gives and takes):
the adapters a run puts between env and model (one-hot ``Discrete``, flattened ``Dict``,
0-based actions, ...) are applied inside, and so are the run's observation
normalisation (the model's buffers) and the clipping or squashing of continuous actions.
``export`` writes the same as one graph for onnxruntime or torch alone (:mod:`.graph`).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.wrappers import FlattenObservation
from torch import Tensor

from a3c.envs import is_multiagent_id, make_env
from a3c.envs.make import agent_view
from a3c.envs.multiagent import OBSERVATION, SEAT, AgentView, AgentViews
from a3c.envs.spaces import (
    ByteImage,
    FlatActions,
    FlatMultiDiscrete,
    Float32Observation,
    OneHotObservation,
    ZeroBasedActions,
)
from a3c.policy import ActorCritic
from a3c.policy.distributions import DiagGaussian
from a3c.policy.grouped import GroupedActorCritic
from a3c.use.exporting import export_format, signature, write_policy
from a3c.use.graph import ActingGraph
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
#: A recurrent PettingZoo policy's state: each agent's, by name.
AgentStates = dict[str, State]


class Policy:
    """A saved policy: ``predict`` actions for the env's own observations."""

    def __init__(self, model: ActorCritic, env_id: str, env_kwargs: dict[str, Any]) -> None:
        self.model = model.eval()
        self.env_id, self.env_kwargs = env_id, dict(env_kwargs)
        self.agents: AgentViews | None = None  # a PettingZoo env's: every agent's view
        self.observation_space: spaces.Space
        self.action_space: spaces.Space
        if is_multiagent_id(env_id):
            self.agents = views = agent_view(env_id, **self.env_kwargs)
            group = next(iter(views.views.values()))
            self.observation_space = group.raw_observation_space
            self.action_space = group.raw_action_space
            if views.blocks:  # groups with policies of their own: each group's spaces
                raws = {name: (v.raw_observation_space, v.raw_action_space)
                        for name, v in views.views.items()}  # fmt: skip
                self.observation_space = spaces.Dict({k: o for k, (o, _) in raws.items()})
                self.action_space = spaces.Dict({k: a for k, (_, a) in raws.items()})
            self._adapters: list[gym.Wrapper] = []
            return
        env = make_env(env_id, scoring=True, **self.env_kwargs)
        try:
            self._adapters, inner = _adapters_of(env)
            self.observation_space = inner.observation_space
            self.action_space = inner.action_space
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
        if self.agents is not None:
            raise UsageError(f"{self.env_id} is a PettingZoo env: make it with its own factory")
        env = make_env(self.env_id, scoring=True, **{**self.env_kwargs, **kwargs})
        return _adapters_of(env)[1]

    def initial_state(self, batch: int = 1) -> State | None:
        """A recurrent policy's zero state for ``batch`` envs (None if not recurrent)."""
        return self.model.initial_state(batch) if self.recurrent else None

    def predict(
        self,
        observation: Any,
        state: Any = None,
        episode_start: Any = None,
        deterministic: bool = True,
    ) -> tuple[Any, Any]:
        """``(action, state)`` for one observation or a batch (told apart by shape, as in
        SB3). ``state``: a recurrent policy's state from the last call (None: a fresh
        one); ``episode_start``: per env, True where an episode began (resets its state;
        ``a3c.evaluate`` also resets it on Atari's ``info["life_lost"]``, as training did).
        Stochastic draws (``deterministic=False``) use torch's global generator.
        A PettingZoo env's policy takes ``{agent: observation}`` and gives
        ``{agent: action}``, every agent from the one policy; a recurrent one keeps a state
        per agent (``{agent: (h, c)}``, an agent not in it starting fresh), and
        ``episode_start`` (one bool, or ``{agent: bool}``) resets the agents it names."""
        if self.agents is not None:
            return self._predict_agents(observation, state, episode_start, bool(deterministic))
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

    def _predict_agents(
        self, observations: Any, state: Any, episode_start: Any, greedy: bool
    ) -> tuple[dict[str, Any], AgentStates | None]:
        view = self.agents
        assert view is not None
        if not isinstance(observations, dict) or not observations:
            raise UsageError(
                f"the policy of {self.env_id} takes a dict of agents' observations, "
                "as its env's step() returns them"
            )
        unknown = set(observations) - set(view.agents)
        if unknown:
            raise UsageError(f"{self.env_id} has no agent {sorted(unknown)[0]!r}")
        x = torch.as_tensor(np.stack([view.observation(a, o) for a, o in observations.items()]))
        states: AgentStates | None = None
        with torch.no_grad():
            if self.recurrent:
                states, fresh = self._agent_states(state, episode_start, observations)
                zero = self.model.initial_state(1)
                held = [states[a] if a in states and a not in fresh else zero for a in observations]
                h, c = (torch.cat([s[i] for s in held]) for i in (0, 1))
                a, (h, c) = self.model.act_recurrent(x, (h, c), greedy)
                for i, agent in enumerate(observations):
                    states[agent] = (h[i : i + 1], c[i : i + 1])
            else:
                a = self.model.act(x, greedy)
        actions = zip(observations, self.model.dist.to_env(a), strict=True)
        return {agent: view.action(agent, act) for agent, act in actions}, states

    def _agent_states(
        self, state: Any, episode_start: Any, agents: Any
    ) -> tuple[AgentStates, set[str]]:
        """A copy of a recurrent PettingZoo policy's ``state``, and the agents to restart."""
        if state is not None and not isinstance(state, dict):
            raise UsageError(
                f"the state of {self.env_id}'s policy is a dict of each agent's state, as "
                "predict returned it (or None: every agent starts fresh)"
            )
        fresh: set[str] = set()
        if isinstance(episode_start, dict):
            fresh = {agent for agent, start in episode_start.items() if start}
        elif episode_start is not None and bool(episode_start):
            fresh = set(agents)
        return dict(state or {}), fresh

    def export(
        self,
        path: str | Path,
        format: str | None = None,
        *,
        deterministic: bool = True,
        group: str | None = None,
    ) -> Path:
        """Write the policy for another runtime: ``.onnx`` (onnxruntime, without torch or
        this package), ``.pt2`` (``torch.export.load``) or ``.pt`` (TorchScript, which torch
        2.13 deprecates); ``format`` (``onnx``, ``pt2``, ``torchscript``) overrides the suffix.

        The file maps a batch of the env's own observations (``obs``: one tensor, or one per
        part of a ``Dict``/``Tuple``) to what ``predict(deterministic=True)`` gives, with the
        adapters, normalisation and clipping inside; an LSTM policy maps ``(obs, h, c)`` to
        ``(actions, h_next, c_next)`` from zero ``[B, state_size]`` states. With
        ``deterministic=False`` the actions are drawn and the distribution's parameters
        follow them (``logits``, or ``mean`` and ``log_std``). A PettingZoo env's policy maps
        one agent's observation a row, any agents (one policy acts for all); with a policy
        per group (``--agent-groups prefix``), ``group`` names the one to write. ``policy.json``
        in the file names the spaces, inputs and outputs. Bad input: one-line UsageError."""
        fmt = export_format(path, format)
        graph = self._graph(deterministic, group)
        model = graph.model
        about = {
            "env_id": self.env_id,
            "observation_space": str(self.observation_space),
            "action_space": str(self.action_space),
            "state_size": model.spec.lstm,
            "deterministic": bool(deterministic),
        }
        if self.agents is not None:
            rows = "every agent's observation one row of obs; one policy for all"
            if self.agents.seats:
                rows += f"; obs.seat: the agent's index in {self.agents.agents}"
            about["agents"] = rows
            if self.agents.blocks:
                assert group is not None  # _graph has checked it
                about["group"] = group
                about["agents"] = f"{group}'s agents, one a row: {self.agents.groups[group]}"
                about["observation_space"] = str(self.agents.views[group].raw_observation_space)
                about["action_space"] = str(self.agents.views[group].raw_action_space)
        if isinstance(model.dist, DiagGaussian):  # for users who draw from mean and log_std
            about["action_bounds"] = {
                "low": model.dist.low.tolist(),
                "high": model.dist.high.tolist(),
                "squash": model.dist.squash,
            }
        return write_policy(graph, path, fmt, about)

    def export_signature(
        self, deterministic: bool = True, group: str | None = None
    ) -> dict[str, list[dict[str, Any]]]:
        """The inputs and outputs of an exported file: ``{"inputs": [{"name", "shape",
        "dtype"}, ...], "outputs": [...]}``, the batch axis named ``"batch"``."""
        return signature(self._graph(deterministic, group))

    def _graph(self, deterministic: bool, group: str | None = None) -> ActingGraph:
        model = copy.deepcopy(self.model)
        views = self.agents
        if views is None:
            if group is not None:
                raise UsageError(f"{self.env_id} has one agent: no group to choose")
            return ActingGraph(model, self._adapters, self.observation_space, greedy=deterministic)
        names = list(views.views)
        if not views.blocks:
            if group is not None and group not in names:
                raise UsageError(
                    f"every agent of {self.env_id} shares one policy: no group {group!r}"
                )
            view = views.views[names[0]]
            return ActingGraph(model, view.adapters, _with_seat(view, views.seats),
                               greedy=deterministic, masked=view.masked,
                               seats=views.seats)  # fmt: skip
        if group not in names:
            raise UsageError(
                f"{self.env_id} has a policy per group ({', '.join(names)}): export one at a "
                "time (group=NAME; a3c.export --group NAME)"
            )
        g, view = names.index(group), views.views[group]
        assert isinstance(model, GroupedActorCritic)
        own = model.policies[g]
        legal = None
        if not view.masked:  # its actions, not the larger groups'
            legal = (torch.arange(own.n_pi) < views.blocks[g][1]).to(torch.float32)
        return ActingGraph(own, view.adapters, view.raw_observation_space, greedy=deterministic,
                           masked=view.masked, legal=legal)  # fmt: skip

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


def _with_seat(view: AgentView, seats: int) -> spaces.Space:
    """What an exported policy takes for one agent: its raw observation, in a dict beside
    its seat (``"seat"``: its index among the game's agents) where its rows tell it."""
    raw = view.raw_observation_space
    if not seats:
        return raw
    parts: dict[str, spaces.Space] = {OBSERVATION: raw}
    if view.masked:  # {"observation", "action_mask"} already
        assert isinstance(raw, spaces.Dict)
        parts = dict(raw.spaces)
    return spaces.Dict({**parts, SEAT: spaces.Discrete(seats)})


def _adapters_of(env: gym.Env) -> tuple[list[gym.Wrapper], gym.Env]:
    """The adapter wrappers on top of ``env`` (outermost first) and the env beneath them."""
    chain: list[gym.Wrapper] = []
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
    """A batch (array, or dict/tuple of batches, nested) as a list of single observations."""
    if isinstance(batch, dict):
        parts = {k: _rows(v) for k, v in batch.items()}
        n = len(next(iter(parts.values())))
        return [{k: v[i] for k, v in parts.items()} for i in range(n)]
    if isinstance(batch, tuple):
        items = [_rows(v) for v in batch]
        return [tuple(v[i] for v in items) for i in range(len(items[0]))]
    return list(np.asarray(batch))
