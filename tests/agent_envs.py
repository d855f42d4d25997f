"""PettingZoo envs of a user's own, named ``agent_envs:NAME`` in the tests."""

from __future__ import annotations

import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv, ParallelEnv


class Leavers(ParallelEnv):
    """Three agents that leave one by one: ``agent_i`` terminates at step ``i + 2``, and the
    game ends when the last has left. Action 1 earns 1 each step, action 0 nothing."""

    metadata = {"name": "leavers_v0"}

    def __init__(self) -> None:
        self.possible_agents = ["agent_0", "agent_1", "agent_2"]
        self.agents: list[str] = []
        self.t = 0

    def observation_space(self, agent):
        return spaces.Box(0.0, 10.0, (2,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(2)

    def _obs(self, agent):
        return np.array([self.t, self.possible_agents.index(agent)], dtype=np.float32)

    def reset(self, seed=None, options=None):
        self.agents, self.t = list(self.possible_agents), 0
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        rewards = {a: float(actions[a]) for a in self.agents}
        terms = {a: self.t >= self.possible_agents.index(a) + 2 for a in self.agents}
        obs = {a: self._obs(a) for a in self.agents}
        infos = {a: {} for a in self.agents}
        truncs = dict.fromkeys(self.agents, False)
        self.agents = [a for a in self.agents if not terms[a]]
        return obs, rewards, terms, truncs, infos


def leavers() -> Leavers:
    return Leavers()


class MaskedLeavers(Leavers):
    """Leavers whose infos hold each agent's mask: action 1 is legal on even steps only."""

    def _infos(self):
        return {a: {"action_mask": np.array([1, 1 - self.t % 2], np.int8)} for a in self.agents}

    def reset(self, seed=None, options=None):
        obs, _ = super().reset(seed, options)
        return obs, self._infos()

    def step(self, actions):
        obs, rewards, terms, truncs, _ = super().step(actions)
        return obs, rewards, terms, truncs, self._infos()


class Chatty(Leavers):
    """Agents that observe text: a space no policy here takes."""

    def observation_space(self, agent):
        return spaces.Text(8)


def chatty() -> Chatty:
    return Chatty()


class Pairs(ParallelEnv):
    """Two agents of different spaces, four steps a game: ``speaker_0`` sees one of 3
    targets (one-hot) and ``listener_0`` one of 5; each earns 1 a step for naming its own.
    One policy cannot take both (``--agent-groups prefix`` gives each its own)."""

    metadata = {"name": "pairs_v0"}
    SIZES = {"speaker_0": 3, "listener_0": 5}

    def __init__(self) -> None:
        self.possible_agents = list(self.SIZES)
        self.agents: list[str] = []
        self.rng = np.random.default_rng()
        self.t = 0

    def observation_space(self, agent):
        return spaces.Box(0.0, 1.0, (self.SIZES[agent],), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(self.SIZES[agent])

    def _draw(self):
        self.targets = {a: int(self.rng.integers(n)) for a, n in self.SIZES.items()}
        return {a: np.eye(n, dtype=np.float32)[self.targets[a]] for a, n in self.SIZES.items()}

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.agents, self.t = list(self.possible_agents), 0
        return self._draw(), {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        rewards = {a: float(actions[a] == self.targets[a]) for a in self.agents}
        done = dict.fromkeys(self.agents, self.t >= 4)
        obs, infos = self._draw(), {a: {} for a in self.agents}
        truncs = dict.fromkeys(self.agents, False)
        if self.t >= 4:
            self.agents = []
        return obs, rewards, done, truncs, infos


def pairs() -> Pairs:
    return Pairs()


def _begin(game: AECEnv) -> None:
    """A turn-based game's start: every agent in, none done, the first to move."""
    game.agents = list(game.possible_agents)
    game.agent_selection = game.agents[0]
    game.rewards = dict.fromkeys(game.agents, 0.0)
    game._cumulative_rewards = dict.fromkeys(game.agents, 0.0)
    game.terminations = dict.fromkeys(game.agents, False)
    game.truncations = dict.fromkeys(game.agents, False)


class ThreeInARow(AECEnv):
    """Two players take turns to fill a cell of a ``size`` x ``size`` board (no default:
    a class that needs arguments, as Shimmy's OpenSpiel games are); three in a row wins.
    As OpenSpiel's games: planes first (own, other's), the legal cells in each agent's
    ``info["action_mask"]``, and a move on a filled cell an error, not a lost game."""

    metadata = {"name": "three_in_a_row_v0"}

    def __init__(self, size: int) -> None:
        self.size = size
        self.possible_agents = ["player_0", "player_1"]  # agents: none before a reset (Shimmy)
        self._board_space = spaces.Box(0.0, 1.0, (2, size, size), np.float32)
        self._cells = spaces.Discrete(size * size)

    def observation_space(self, agent):
        return self._board_space

    def action_space(self, agent):
        return self._cells

    def observe(self, agent):
        me = 1 + self.possible_agents.index(agent)
        return np.stack([self.board == me, self.board == 3 - me]).astype(np.float32)

    def reset(self, seed=None, options=None):
        self.board = np.zeros((self.size, self.size), dtype=np.int64)
        _begin(self)
        self._set_masks()

    def _set_masks(self):
        free = (self.board.reshape(-1) == 0).astype(np.int8)
        self.infos = {
            a: {"action_mask": free if a == self.agent_selection else free * 0} for a in self.agents
        }

    def _won(self, me: int) -> bool:
        mine = self.board == me
        lines = [mine[i : i + 3, j] for i in range(self.size - 2) for j in range(self.size)]
        lines += [mine[i, j : j + 3] for i in range(self.size) for j in range(self.size - 2)]
        for i in range(self.size - 2):
            for j in range(self.size - 2):
                lines += [mine[range(i, i + 3), range(j, j + 3)]]
                lines += [mine[range(i, i + 3), range(j + 2, j - 1, -1)]]
        return any(line.all() for line in lines)

    def step(self, action):
        agent = self.agent_selection
        if self.terminations[agent]:
            self._was_dead_step(action)
            return
        cell = divmod(int(action), self.size)
        if self.board[cell]:
            raise ValueError(f"cell {cell} is taken")
        me = 1 + self.possible_agents.index(agent)
        self.board[cell] = me
        other = self.possible_agents[2 - me]
        self.rewards = dict.fromkeys(self.agents, 0.0)
        won = self._won(me)
        if won:
            self.rewards.update({agent: 1.0, other: -1.0})
        if won or self.board.all():
            self.terminations = dict.fromkeys(self.agents, True)
        self.agent_selection = other
        self._cumulative_rewards = dict(self.rewards)
        self._set_masks()


def three_in_a_row(size: int) -> ThreeInARow:
    """A factory that needs its argument: a game a3c cannot tell from a Gymnasium env."""
    return ThreeInARow(size)


class Doors(AECEnv):
    """Each of two players opens one of two doors, in turn, and both see the same
    observation throughout: player_0 scores a point with door 0, player_1 takes one from it
    with door 1 (zero-sum). One policy plays both seats well only if it is told its seat:
    told none, whichever door it opens, one seat loses half its games to a random player."""

    metadata = {"name": "doors_v0"}

    def __init__(self) -> None:
        self.possible_agents = ["player_0", "player_1"]
        self._space = spaces.Box(0.0, 1.0, (2,), np.float32)

    def observation_space(self, agent):
        return self._space

    def action_space(self, agent):
        return spaces.Discrete(2)

    def observe(self, agent):
        return np.ones(2, dtype=np.float32)

    def reset(self, seed=None, options=None):
        _begin(self)
        self.infos = {a: {} for a in self.agents}
        self._first = 0

    def step(self, action):
        agent = self.agent_selection
        if self.terminations[agent]:
            self._was_dead_step(action)
            return
        if agent == "player_0":
            self._first = int(action)
            self.agent_selection = "player_1"
            return
        score = float(self._first == 0) - float(int(action) == 1)
        self.rewards = {"player_0": score, "player_1": -score}
        self._cumulative_rewards = dict(self.rewards)
        self.terminations = dict.fromkeys(self.agents, True)
        self.agent_selection = "player_0"
