"""PettingZoo environments as rows of a vector env: every agent of every game one row, one policy.

Parameter sharing (IPPO/MAPPO's): :class:`AgentRows` runs ``games`` copies of a PettingZoo
env and shows the engine a Gymnasium vector env of ``games x len(possible_agents)`` rows,
each row one agent of one game, so each step is one batched forward pass for all of them.
Both of PettingZoo's APIs are taken: a ``ParallelEnv`` steps every live agent at once; an
``AECEnv`` (turn-based games) steps the agent whose turn it is.

A row whose agent did not act at a step (it is not its turn, it left the game, or has
not joined it) is flagged in ``info["acted"]``: the rollout keeps it as a row the learner
skips (:func:`a3c.learning.returns.gae` folds its reward and episode end into the agent's
last own step), never as a zero-padded transition. A row's episode ends at its agent's own
termination or truncation (a loser's too, on its opponent's winning move); the game resets
when no agent is left, in the same ``step()`` (``SAME_STEP`` autoreset, as
:func:`a3c.envs.make_vector_env`), with the ended rows' last observations in
``info["final_obs"]``.

An observation ``Dict`` with ``"observation"`` and ``"action_mask"`` entries (PettingZoo's
classic games) becomes the observation's flat vector followed by the mask; the policy
reads the mask back (:attr:`a3c.policy.ModelSpec.action_mask`) and never samples a masked
action. A game that hands its mask in each agent's ``info["action_mask"]`` instead
(Shimmy's OpenSpiel games) is seen as if it were in such a ``Dict``, its raw observation
space too.

One policy plays every seat of a turn-based game, and a game may show every seat the same
observation (OpenSpiel's oware and mancala: one board from nobody's side; oware's moves
are the mover's own six pits): a row read as a vector then ends in its seat, one-hot,
before its mask (the agent indication of Terry et al., "Revisiting Parameter Sharing in
Multi-Agent Deep RL", 2020). A board read by a conv net is left as the game lays it out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import VectorEnv
from gymnasium.vector.utils import batch_space

from a3c.envs.spaces import EnvSpaces, action_spec, adapt_spaces
from hogwild.errors import UsageError

__all__ = [
    "GROUPINGS",
    "AgentRows",
    "AgentViews",
    "agent_spaces",
    "is_multiagent",
    "is_multiagent_class",
]

#: The observation ``Dict`` keys of an env whose legal actions change (PettingZoo classic).
OBSERVATION, ACTION_MASK = "observation", "action_mask"
#: The key of an agent's seat (its index in ``possible_agents``) beside its observation,
#: where an exported policy takes one (:attr:`AgentViews.seats`).
SEAT = "seat"


def is_multiagent(env: Any) -> bool:
    """Whether ``env`` is a PettingZoo env (either API), without importing PettingZoo."""
    return is_multiagent_class(type(env))


def is_multiagent_class(cls: type) -> bool:
    """Whether instances of ``cls`` are PettingZoo envs (either API)."""
    return any(
        c.__module__.startswith("pettingzoo.") and c.__name__ in ("ParallelEnv", "AECEnv")
        for c in cls.__mro__
    )


def _mask_space(space: spaces.Space) -> spaces.Box | None:
    """The legal-action mask's space of a PettingZoo classic observation, else None."""
    if not isinstance(space, spaces.Dict) or set(space.spaces) != {OBSERVATION, ACTION_MASK}:
        return None
    mask = space[ACTION_MASK]
    return mask if isinstance(mask, spaces.Box) and len(mask.shape) == 1 else None


class _Shell(gym.Env):
    """An env of spaces alone, for :func:`adapt_spaces` to wrap: its wrappers are then the
    functions that adapt one agent's observations and actions."""

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space) -> None:
        self.observation_space, self.action_space = observation_space, action_space


class AgentView:
    """One agent's spaces as the policy takes them: ``observation(raw)`` and
    ``action(policy's)`` through the same adapters as a single-agent env's."""

    def __init__(self, env_id: str, obs_space: spaces.Space, act_space: spaces.Space) -> None:
        self.raw_observation_space, self.raw_action_space = obs_space, act_space
        mask_space = _mask_space(obs_space)
        self.masked = mask_space is not None
        self.grid: tuple[int, ...] = ()
        inner = obs_space
        if isinstance(obs_space, spaces.Dict) and self.masked:
            inner = obs_space[OBSERVATION]
            if isinstance(inner, spaces.Box) and inner.dtype == np.bool_:
                inner = spaces.Box(0, 1, inner.shape, np.int8)  # go's planes: a board, not an image
        adapted = adapt_spaces(_Shell(inner, act_space), env_id)
        chain: list[gym.Wrapper] = []
        env: gym.Env = adapted
        while isinstance(env, gym.Wrapper):
            chain.append(env)
            env = env.env
        self.adapters = chain  # outermost first, as a3c.use.graph.ActingGraph takes them
        self._obs = [w for w in reversed(chain) if isinstance(w, gym.ObservationWrapper)]
        self._act = [w for w in chain if isinstance(w, gym.ActionWrapper)]
        space = adapted.observation_space
        self.action_space = adapted.action_space
        shape = space.shape or ()
        if mask_space is not None:
            n = mask_space.shape[0]
            if not (isinstance(self.action_space, spaces.Discrete) and self.action_space.n == n):
                raise UsageError(
                    f"environment {env_id!r}: an action mask of {n} entries needs a "
                    f"Discrete({n}) action space, not {act_space}"
                )
            if len(shape) != 1 or space.dtype != np.float32:
                raise UsageError(
                    f"environment {env_id!r}: an action mask goes with vector observations, "
                    f"not {inner}"
                )
            space = spaces.Box(-np.inf, np.inf, (shape[0] + n,), np.float32)
            # a board, (H, W, C) as PettingZoo's classic games lay theirs out or (C, H, W)
            # as OpenSpiel's, flattened in front of the mask: a conv net may read it back
            # (ModelSpec.grid, grid_channels_last)
            board = tuple(int(d) for d in inner.shape or ())
            if len(board) == 3 and math.prod(board) == shape[0]:
                self.grid = board
        assert isinstance(space, spaces.Box)  # adapt_spaces makes every observation one
        self.observation_space = space

    def observation(self, raw: Any) -> np.ndarray:
        obs = raw[OBSERVATION] if self.masked else raw
        for w in self._obs:
            obs = w.observation(obs)
        if self.masked:
            mask = np.asarray(raw[ACTION_MASK], dtype=np.float32)
            return np.concatenate((np.asarray(obs, dtype=np.float32), mask))
        return obs

    def action(self, action: Any) -> Any:
        for w in self._act:
            action = w.action(action)
        return action

    def spaces(self) -> EnvSpaces:
        shape = self.observation_space.shape
        assert shape is not None
        dtype = np.dtype(self.observation_space.dtype).name
        return EnvSpaces(
            tuple(shape), dtype, action_spec(self.action_space), self.masked, grid=self.grid
        )


#: ``--agent-groups``: one policy for every agent, or one per name prefix (``speaker_0`` and
#: ``listener_0``: groups ``speaker`` and ``listener``).
GROUPINGS = ("all", "prefix")


def group_of(agent: str, grouping: str) -> str:
    """The group ``agent`` belongs to: ``all``, or its name without a trailing ``_<n>``."""
    return "all" if grouping == "all" else re.sub(r"_\d+$", "", agent)


class AgentViews:
    """How the policy sees every agent of a game: each group's :class:`AgentView`, and the
    rows its agents fill.

    One group: a row is the group's view of its agent, in a turn-based game of several
    seats read as a vector followed by its seat (``seats`` of them; the module docstring).
    Several groups (``--agent-groups prefix``): each has a policy of its own inside one
    model (:class:`a3c.policy.grouped.GroupedActorCritic`), and every row has one layout
    that model reads: the group's index, then one block of observation per group (a row
    fills its own group's, zeros elsewhere, so no column mixes two groups' meanings), then
    the legal actions of the largest group's ``n`` (a smaller group's missing actions never
    legal). Groups must then act in ``Discrete`` spaces and observe vectors.
    """

    def __init__(
        self,
        env_id: str,
        agents: list[str],
        groups: dict[str, list[str]],
        views: dict[str, AgentView],
        turns: bool,
        info_masks: bool = False,
    ) -> None:
        self.groups, self.views, self.turns = groups, views, turns
        self.info_masks = info_masks  # the masks come in infos (see the module docstring)
        self.agents = agents  # possible_agents, in the order of a game's rows
        self._view = {agent: views[name] for name, agents in groups.items() for agent in agents}
        self._index = {agent: i for i, agents in enumerate(groups.values()) for agent in agents}
        first = next(iter(views.values()))
        self.blocks: tuple[tuple[int, int], ...] = ()  # several groups: see the docstring
        self.seats = 0
        if len(views) == 1:
            self.observation_space, self.action_space = first.observation_space, first.action_space
            self.masked = first.masked
            shape = self.observation_space.shape or ()
            if turns and len(agents) > 1 and len(shape) == 1 and not first.grid:
                self.seats = len(agents)  # see the module docstring
                self._seat = dict(zip(agents, np.eye(self.seats, dtype=np.float32), strict=True))
                mask = int(getattr(first.action_space, "n", 0)) if first.masked else 0
                self._seat_at = shape[0] - mask
                seated = (shape[0] + self.seats,)
                self.observation_space = spaces.Box(-np.inf, np.inf, seated, np.float32)
            return
        dims: list[tuple[int, int]] = []
        for name, view in views.items():
            shape = view.observation_space.shape or ()
            if not isinstance(view.action_space, spaces.Discrete) or len(shape) != 1:
                raise UsageError(
                    f"environment {env_id!r}: group {name!r} acts in {view.action_space} and "
                    f"observes {view.observation_space}; groups with policies of their own "
                    "need Discrete actions and vector observations"
                )
            n = int(view.action_space.n)
            dims.append((shape[0] - (n if view.masked else 0), n))
        self.blocks = tuple(dims)  # (observation size, actions) of each group, in order
        self.n = max(n for _, n in dims)
        self._starts = np.cumsum([1] + [d for d, _ in dims])
        width = int(self._starts[-1]) + self.n
        self.observation_space = spaces.Box(-np.inf, np.inf, (width,), np.float32)
        self.action_space = spaces.Discrete(self.n)
        self.masked = True

    def view(self, agent: str) -> AgentView:
        return self._view[agent]

    def observation(self, agent: str, raw: Any) -> np.ndarray:
        view = self._view[agent]
        obs = view.observation(raw)
        if self.seats:
            at = self._seat_at
            return np.concatenate((obs[:at], self._seat[agent], obs[at:]), dtype=np.float32)
        if not self.blocks:
            return obs
        g = self._index[agent]
        d, n = self.blocks[g]
        row = np.zeros(self.observation_space.shape, dtype=np.float32)
        row[0] = g
        row[self._starts[g] : self._starts[g] + d] = obs[:d]
        row[len(row) - self.n : len(row) - self.n + n] = obs[d:] if view.masked else 1.0
        return row

    def action(self, agent: str, action: Any) -> Any:
        return self._view[agent].action(action)

    def spaces(self) -> EnvSpaces:
        if not self.blocks:
            own = next(iter(self.views.values())).spaces()
            return own._replace(obs_shape=tuple(self.observation_space.shape))
        return EnvSpaces(
            tuple(self.observation_space.shape), "float32", action_spec(self.action_space),
            True, self.blocks,
        )  # fmt: skip


def agent_spaces(env: Any, env_id: str, grouping: str = "all") -> AgentViews:
    """Every agent's view, a policy per group of ``grouping``; a one-line error naming
    two agents of a group whose spaces differ (one policy learns for a group). A game
    whose masks are in its infos is reset once to find them."""
    agents = list(env.possible_agents)
    if not agents:
        raise UsageError(f"environment {env_id!r} has no agents")
    if grouping not in GROUPINGS:
        raise UsageError(f"--agent-groups must be one of {', '.join(GROUPINGS)}, got {grouping!r}")
    groups: dict[str, list[str]] = {}
    for agent in agents:
        groups.setdefault(group_of(agent, grouping), []).append(agent)
    info_masks = _info_masks(env)
    views = {}
    for name, members in groups.items():
        first = members[0]
        for agent in members[1:]:
            if env.observation_space(agent) != env.observation_space(first) or env.action_space(
                agent
            ) != env.action_space(first):
                hint = (
                    "; --agent-groups prefix gives each name prefix a policy of its own"
                    if grouping == "all"
                    else ""
                )
                raise UsageError(
                    f"environment {env_id!r}: agents {first!r} and {agent!r} have different "
                    f"spaces; one policy learns for a group, so all of it must share them{hint}"
                )
        obs_space, act_space = env.observation_space(first), env.action_space(first)
        if info_masks:
            obs_space = _masked_space(obs_space, act_space)
        views[name] = AgentView(env_id, obs_space, act_space)
    return AgentViews(env_id, agents, groups, views, _turn_based(env), info_masks)


def _masked_space(obs_space: spaces.Space, act_space: spaces.Space) -> spaces.Dict:
    """The observation space of a game whose masks are in its infos, as PettingZoo's
    classic games lay theirs out."""
    n = int(getattr(act_space, "n", 0))
    mask = spaces.Box(0, 1, (n,), np.int8)
    return spaces.Dict({OBSERVATION: obs_space, ACTION_MASK: mask})


def _info_masks(env: Any) -> bool:
    """Whether ``env`` hands its legal-action masks in its infos (found by a reset, unless
    a turn-based game is under way)."""
    agents = list(env.possible_agents)
    if any(_mask_space(env.observation_space(a)) is not None for a in agents):
        return False
    if _turn_based(env):
        try:
            under_way = bool(env.agents)
        except AttributeError:  # before a reset (PettingZoo's OrderEnforcingWrapper, Shimmy)
            under_way = False
        if not under_way:
            env.reset(seed=0)
        infos = env.infos
    else:
        _, infos = env.reset(seed=0)
    return any(ACTION_MASK in (infos.get(a) or {}) for a in agents)


def _turn_based(env: Any) -> bool:
    """Whether ``env`` is a PettingZoo ``AECEnv`` (agents take turns)."""
    return any(c.__name__ == "AECEnv" for c in type(env).__mro__)


class _Game:
    """One PettingZoo game behind a common face: who acts, and what each agent got (with
    its mask from its info where ``info_masks``)."""

    def __init__(self, env: Any, info_masks: bool) -> None:
        self.env, self.info_masks = env, info_masks
        self.turns = _turn_based(env)

    def reset(self, seed: int | None) -> dict[str, Any]:
        if self.turns:
            self.env.reset(seed=seed)
            self._skip_dead()
            return {a: self._observe(a) for a in self.env.agents}
        obs, infos = self.env.reset(seed=seed)
        return self._masked(obs, infos)

    def _observe(self, agent: str) -> Any:
        raw = self.env.observe(agent)
        if not self.info_masks:
            return raw
        return {OBSERVATION: raw, ACTION_MASK: self._mask(agent, self.env.infos)}

    def _masked(self, obs: dict[str, Any], infos: dict[str, Any]) -> dict[str, Any]:
        if not self.info_masks:
            return obs
        return {a: {OBSERVATION: o, ACTION_MASK: self._mask(a, infos)} for a, o in obs.items()}

    def _mask(self, agent: str, infos: dict[str, Any]) -> np.ndarray:
        """``agent``'s mask; none in its info (at a game's end): no legal action."""
        mask = (infos.get(agent) or {}).get(ACTION_MASK)
        if mask is None:
            return np.zeros(int(self.env.action_space(agent).n), dtype=np.int8)
        return np.asarray(mask)

    def acting(self) -> list[str]:
        """The agents whose actions the next step takes."""
        if self.turns:
            return [self.env.agent_selection] if self.env.agents else []
        return list(self.env.agents)

    def step(
        self, actions: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, float], dict[str, bool], dict[str, bool]]:
        """``(observations, rewards, terminations, truncations)`` of every agent this step
        touched; the observations of the agents still in the game."""
        if not self.turns:
            obs, rewards, terms, truncs, infos = self.env.step(actions)
            return self._masked(obs, infos), rewards, terms, truncs
        env = self.env
        (agent,) = actions
        env.step(actions[agent])
        rewards = {a: float(r) for a, r in env.rewards.items()}
        terms, truncs = dict(env.terminations), dict(env.truncations)
        finals = {a: self._observe(a) for a in env.agents if terms[a] or truncs[a]}
        self._skip_dead()
        obs = {a: self._observe(a) for a in env.agents}
        return {**finals, **obs}, rewards, terms, truncs

    def _skip_dead(self) -> None:
        """AEC: an agent that is done must be stepped with ``None`` to leave the game."""
        env = self.env
        while env.agents:
            agent = env.agent_selection
            if not (env.terminations[agent] or env.truncations[agent]):
                return
            env.step(None)

    @property
    def agents(self) -> list[str]:
        return list(self.env.agents)

    def close(self) -> None:
        self.env.close()


class AgentRows(VectorEnv):
    """``len(makers)`` PettingZoo games, one row per agent of each (see the module docstring).

    ``makers`` build the games (PettingZoo envs); game ``g`` is first reset with
    ``seed + g``; ``grouping`` (:data:`GROUPINGS`) says which agents share a policy.
    ``max_steps`` cuts every game at that many steps (a truncation) where its own limit
    does not. ``info["acted"]`` (bool ``[rows]``): which rows' actions the step took;
    ``info["illegal"]`` (bool ``[rows]``): which of them the action mask forbade (the
    game's own rules then judge the move); ``info["team"]``: the summed returns of the
    games that ended at this step, and ``info["started"]`` the indices of the games that
    began anew in it.
    """

    def __init__(
        self,
        makers: Sequence[Callable[[], Any]],
        env_id: str,
        seed: int | None = None,
        max_steps: int | None = None,
        grouping: str = "all",
    ) -> None:
        envs = [make() for make in makers]
        try:
            self.view = agent_spaces(envs[0], env_id, grouping)
        except BaseException:
            for env in envs:
                env.close()
            raise
        self.games = [_Game(env, self.view.info_masks) for env in envs]
        self.agents = list(self.games[0].env.possible_agents)
        self._index = {agent: i for i, agent in enumerate(self.agents)}  # rows in a game
        self.num_envs = len(self.games) * len(self.agents)
        self.single_observation_space = self.view.observation_space
        self.single_action_space = self.view.action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
        self.render_mode = None
        self._seed, self._max_steps = seed, max_steps
        space = self.single_observation_space
        self._mask_start = space.shape[0] - int(getattr(self.single_action_space, "n", 0))
        self._obs = np.zeros((self.num_envs, *space.shape), dtype=space.dtype)
        self._steps = np.zeros(len(self.games), dtype=np.int64)
        self._team = np.zeros(len(self.games))

    def _row(self, g: int, agent: str) -> int:
        return g * len(self.agents) + self._index[agent]

    def _start(self, g: int, seed: int | None) -> None:
        rows = slice(g * len(self.agents), (g + 1) * len(self.agents))
        self._obs[rows] = 0
        for agent, raw in self.games[g].reset(seed).items():
            self._obs[self._row(g, agent)] = self.view.observation(agent, raw)
        self._steps[g], self._team[g] = 0, 0.0

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        base = seed if isinstance(seed, int) else self._seed
        for g in range(len(self.games)):
            self._start(g, None if base is None else base + g)
            self._seed = None  # only the first reset restarts the games' RNGs
        return self._obs.copy(), {}

    def step(
        self, actions: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        n = self.num_envs
        rewards = np.zeros(n, dtype=np.float32)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        acted = np.zeros(n, dtype=bool)
        illegal = np.zeros(n, dtype=bool)
        final_obs = np.full(n, None, dtype=object)
        teams: list[float] = []
        started: list[int] = []
        for g, game in enumerate(self.games):
            acting = game.acting()
            rows = {a: self._row(g, a) for a in acting}
            obs, rew, terms, truncs = game.step(
                {a: self.view.action(a, actions[r]) for a, r in rows.items()}
            )
            acted[list(rows.values())] = True
            if self.view.masked:
                for row in rows.values():
                    illegal[row] = self._obs[row, self._mask_start + int(actions[row])] < 0.5
            self._steps[g] += 1
            cut = self._max_steps is not None and self._steps[g] >= self._max_steps
            for agent, r in rew.items():
                row = self._row(g, agent)
                rewards[row] = r
                terminated[row] = bool(terms.get(agent, False))
                truncated[row] = bool(truncs.get(agent, False))
            self._team[g] += sum(rew.values())
            for agent, raw in obs.items():
                self._obs[self._row(g, agent)] = self.view.observation(agent, raw)
            for agent in set(self.agents) - set(game.agents) - set(rew):
                self._obs[self._row(g, agent)] = 0  # not in the game: a row nobody reads
            if cut:  # every agent still in the game is cut off
                for agent in game.agents:
                    row = self._row(g, agent)
                    truncated[row] = not terminated[row]
            first = g * len(self.agents)
            for row in range(first, first + len(self.agents)):
                if terminated[row] or truncated[row]:
                    final_obs[row] = self._obs[row].copy()
            if cut or not game.agents:
                teams.append(float(self._team[g]))
                started.append(g)
                self._start(g, None)
        done = terminated | truncated
        info: dict[str, Any] = {
            "acted": acted,
            "illegal": illegal,
            "final_obs": final_obs,
            "_final_obs": done,
            "team": teams,
            "started": np.array(started, dtype=np.int64),
        }
        return self._obs.copy(), rewards, terminated, truncated, info

    def close_extras(self, **kwargs: Any) -> None:
        for game in getattr(self, "games", ()):
            game.close()
