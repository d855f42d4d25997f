"""Scoring a policy: whole episodes on a fresh environment, greedy or stochastic.

The run's evaluator process scores with :func:`score_greedy`; ``python -m a3c.evaluate``
and :func:`a3c.api.evaluate` play a saved policy with :func:`play_episodes`. A module of
its own below :mod:`a3c.run` and :mod:`a3c.use`, so that training imports nothing of
using a result.

Every episode is capped (``max_steps``, the run's ``--eval-max-steps``), so that an env
without a time limit cannot hold the evaluator in one episode forever; by default the
cap is the env's own ``spec.max_episode_steps``, else :data:`DEFAULT_EVAL_MAX_STEPS`.
An episode the cap cut counts with the return it had; :func:`score_greedy` reports how
many there were (``capped_episodes``) and warns.

Atari's scoring env (:func:`a3c.envs.make_env` with ``scoring=True``) plays whole games
and flags a lost life in ``info["life_lost"]``: a recurrent policy's state is reset
there, as in training, where each life is an episode of its own. Its frame stack is
not reset (it holds at most three frames from before the loss).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch

from a3c.envs import make_env, make_vector_env
from a3c.envs.make import is_multiagent_id, once_per_env
from a3c.envs.multiagent import AgentRows
from a3c.envs.random_player import RANDOM_PLAYER, RandomPlayer
from a3c.policy import ActorCritic, ModelSpec

log = logging.getLogger(__name__)

#: Agent steps after which an evaluation episode is cut when neither the caller nor the
#: env's own time limit says: generous (ALE's 108 000-frame cap is 27 000 agent steps).
DEFAULT_EVAL_MAX_STEPS = 100_000


class Episodes(NamedTuple):
    """What :func:`play_episodes` saw, one entry per episode."""

    returns: np.ndarray  # float64: the (unclipped) reward sums
    lengths: np.ndarray  # int64: agent steps
    capped: np.ndarray  # bool: cut by the step cap, not ended by the env
    seats: tuple[str, ...] = ()  # a turn-based game's: the policy played seats[i % len]
    agents: tuple[str, ...] = ()  # many agents: the game's agents, as agent_returns' columns
    agent_returns: np.ndarray | None = None  # many agents: [games, agents], each its own sum
    illegal: int = 0  # many agents: moves of the policy's the action mask forbade
    against: str = ""  # a zero-sum game's: who played the other seats, if not a policy


def seat_results(played: Episodes, against: str | None = None) -> list[str]:
    """A zero-sum turn-based game's results per seat the policy played: the shares of its
    games won (a positive return), drawn and lost."""
    against = against or played.against or RANDOM_PLAYER
    n, lines = len(played.seats), []
    for i, seat in enumerate(played.seats):
        r = played.returns[i::n]
        if r.size:
            won, drew, lost = (float(x.mean()) for x in (r > 0, r == 0, r < 0))
            lines.append(
                f"as {seat}: won {won:.2f}, drew {drew:.2f}, lost {lost:.2f} "
                f"of {r.size} games against {against}"
            )
    return lines


def agent_results(played: Episodes) -> list[str]:
    """A cooperative game's team return (its agents' sum) and each agent's, as means over
    the games played; nothing for one agent or a zero-sum game (see :func:`seat_results`)."""
    per = played.agent_returns
    if per is None or played.seats or per.shape[1] < 2:
        return []
    each = ", ".join(f"{a} {r:.2f}" for a, r in zip(played.agents, per.mean(0), strict=True))
    return [f"team return {per.sum(1).mean():.2f} ± {per.sum(1).std():.2f}; per agent: {each}"]


def episode_cap(env: gym.Env, max_steps: int | None = None) -> int:
    """``max_steps``, else ``env``'s own time limit, else :data:`DEFAULT_EVAL_MAX_STEPS`."""
    if max_steps is not None:
        return max_steps
    limit = env.spec.max_episode_steps if env.spec is not None else None
    return limit or DEFAULT_EVAL_MAX_STEPS


def play_episodes(
    model: ActorCritic,
    env_id: str,
    episodes: int,
    seed: int,
    *,
    greedy: bool = True,
    device: torch.device | str = "cpu",
    env: gym.Env | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    max_steps: int | None = None,
) -> Episodes:
    """``episodes`` episodes (seeded ``seed``, ``seed + 1``, ...) on ``env``, or on a fresh
    ``make_env(env_id, scoring=True, **env_kwargs)``, each cut at :func:`episode_cap`."""
    own_env = env is None
    if env is None and is_multiagent_id(env_id):
        return play_games(model, env_id, episodes, seed, greedy=greedy, device=device,
                          env_kwargs=env_kwargs, max_steps=max_steps)  # fmt: skip
    if env is None:
        env = make_env(env_id, scoring=True, **(env_kwargs or {}))
    returns = np.zeros(episodes)
    lengths = np.zeros(episodes, dtype=np.int64)
    capped = np.zeros(episodes, dtype=bool)
    try:
        cap = episode_cap(env, max_steps)
        with torch.no_grad():
            for i in range(episodes):
                obs, _ = env.reset(seed=seed + i)
                state = model.initial_state(1, device) if model.recurrent else None
                done = False
                while not done:
                    x = torch.as_tensor(obs, device=device).unsqueeze(0)
                    if state is None:
                        a = model.act(x, greedy)
                    else:
                        a, state = model.act_recurrent(x, state, greedy)
                    action = model.dist.to_env(a.cpu())[0]
                    obs, reward, terminated, truncated, info = env.step(action)
                    returns[i] += float(reward)
                    lengths[i] += 1
                    done = terminated or truncated
                    if not done and lengths[i] >= cap:
                        capped[i] = done = True
                    if state is not None and info.get("life_lost"):
                        state = model.initial_state(1, device)
    finally:
        if own_env:
            env.close()
    return Episodes(returns, lengths, capped)


def play_games(
    model: ActorCritic,
    env_id: str,
    games: int,
    seed: int,
    *,
    greedy: bool = True,
    device: torch.device | str = "cpu",
    env_kwargs: Mapping[str, Any] | None = None,
    max_steps: int | None = None,
    opponent: ActorCritic | None = None,
) -> Episodes:
    """``games`` games of a PettingZoo env, one after another (the first seeded ``seed``).

    A zero-sum turn-based game (:func:`zero_sum`) is played by seats: the policy plays
    seat ``i % agents`` in game ``i`` and the return is its seat's, so a policy that wins
    every game scores the win's reward; the other seats are played by ``opponent``, which
    samples its moves (so that games differ), or without one by a random player (uniform
    among the legal moves where the game masks them, else among all). Any other game is
    played by the policy in every seat, and its return is its agents' mean. A recurrent
    policy keeps a state per agent, zeroed at the start of each agent's episode."""
    envs = make_vector_env(env_id, 1, seed, **(env_kwargs or {}))
    assert isinstance(envs, AgentRows)
    n = envs.num_envs
    seated = envs.games[0].turns and zero_sum(env_id, env_kwargs)
    randomly = RandomPlayer(envs, seed)
    cap = max_steps or DEFAULT_EVAL_MAX_STEPS
    returns = np.zeros(games)
    lengths = np.zeros(games, dtype=np.int64)
    capped = np.zeros(games, dtype=bool)
    per_agent = np.zeros((games, n))
    illegal = 0
    others = opponent if seated else None
    try:
        obs, _ = envs.reset(seed=seed)
        state, theirs = _zero_state(model, n, device), _zero_state(others, n, device)
        got, game = np.zeros(n), 0
        with torch.no_grad():
            while game < games:
                x = torch.as_tensor(obs, device=device)
                a, state = _act(model, x, state, greedy)
                actions = model.dist.to_env(a.cpu())
                mine = np.arange(n) == game % n if seated else np.ones(n, dtype=bool)
                if others is not None:
                    b, theirs = _act(others, x, theirs, greedy=False)
                    actions[~mine] = others.dist.to_env(b.cpu())[~mine]
                elif seated:
                    randomly.fill(actions, obs, np.flatnonzero(~mine))
                obs, reward, terminated, truncated, info = envs.step(actions)
                done = torch.as_tensor(terminated | truncated, device=device)
                state, theirs = _restart(state, done), _restart(theirs, done)
                illegal += int(info["illegal"][mine].sum())
                got += reward
                lengths[game] += 1
                if not info["team"] and lengths[game] < cap:
                    continue
                capped[game] = not info["team"]
                returns[game] = got[game % n] if seated else got.mean()
                per_agent[game] = got
                got[:] = 0
                game += 1
                if capped[game - 1] and game < games:
                    obs, _ = envs.reset()
                    state, theirs = _zero_state(model, n, device), _zero_state(others, n, device)
    finally:
        envs.close()
    seats = tuple(envs.agents) if seated else ()
    against = randomly.name if seated and opponent is None else ""
    return Episodes(
        returns, lengths, capped, seats, tuple(envs.agents), per_agent, illegal, against
    )


State = tuple[torch.Tensor, torch.Tensor]


def _zero_state(model: ActorCritic | None, rows: int, device: torch.device | str) -> State | None:
    return model.initial_state(rows, device) if model is not None and model.recurrent else None


def _act(
    model: ActorCritic, x: torch.Tensor, state: State | None, greedy: bool
) -> tuple[torch.Tensor, State | None]:
    """``model``'s actions on ``x``, and its state after them (a recurrent model's)."""
    if state is None:
        return model.act(x, greedy), None
    return model.act_recurrent(x, state, greedy)


def _restart(state: State | None, done: torch.Tensor) -> State | None:
    """``state`` zeroed in the rows whose agent's episode ended (``done``)."""
    if state is None or not bool(done.any()):
        return state
    keep = (~done).unsqueeze(1).to(state[0].dtype)
    return state[0] * keep, state[1] * keep


#: Random games :func:`zero_sum` plays, and the steps it gives them at most.
PROBE_GAMES, PROBE_STEPS = 8, 2_000


@once_per_env
def zero_sum(env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> bool:
    """Whether ``env_id`` is a turn-based PettingZoo game in which one seat wins what the
    others lose, so that one policy in every seat scores 0 and only seats can be scored:
    in :data:`PROBE_GAMES` games of random play, each game's rewards sum to 0, and some
    reward came (or the game masks its moves: a board game whose random games all drew).
    A cooperative or general-sum game (``simple_spread``'s turn-based ``env``) is a team's;
    once per env and options."""
    envs = make_vector_env(env_id, 1, 0, **(env_kwargs or {}))
    assert isinstance(envs, AgentRows)
    try:
        if not envs.games[0].turns:
            return False
        player = RandomPlayer(envs, 0)
        rows = np.arange(envs.num_envs)
        obs, _ = envs.reset(seed=0)
        got, rewarded, games = np.zeros(envs.num_envs), False, 0
        for _ in range(PROBE_STEPS):
            actions = np.stack([player.space.sample() for _ in rows])
            player.fill(actions, obs, rows)
            obs, reward, _, _, info = envs.step(actions)
            got += reward
            rewarded = rewarded or bool(np.any(reward != 0))
            if abs(got.sum()) > 1e-6 * max(1.0, float(np.abs(got).sum())):
                return False
            if info["team"]:
                got[:], games = 0, games + 1
                if games == PROBE_GAMES:
                    break
        return rewarded or envs.view.masked
    finally:
        envs.close()


def build_model(spec: dict) -> ActorCritic:
    """Module-level, so a spawned evaluator can rebuild the model from a plain dict."""
    return ModelSpec.from_dict(spec).build()


def score_greedy(
    model: ActorCritic,
    device: torch.device,
    step: int,
    *,
    env_id: str,
    env_kwargs: Mapping[str, Any],
    episodes: int,
    seed: int,
    max_steps: int | None = None,
    earlier: ActorCritic | None = None,
) -> dict[str, float]:
    """The evaluator's score: mean and spread of greedy returns on fixed seeds, and how
    many episodes the step cap cut (their returns count as they stood). A zero-sum game's
    return is the policy's against a random player, seat by seat; its share of games won
    comes too, over all seats (``win_rate``) and per seat, and with ``earlier`` (a policy
    scored before) the share won against it (``win_rate_vs_previous``), each seat in turn."""
    played = play_episodes(
        model,
        env_id,
        episodes,
        seed,
        greedy=True,
        device=device,
        env_kwargs=env_kwargs,
        max_steps=max_steps,
    )
    capped = int(played.capped.sum())
    if capped:
        log.warning(
            "evaluation at step %d: %d of %d episodes cut at %d agent steps "
            "(--eval-max-steps; partial returns are counted)",
            step,
            capped,
            episodes,
            int(played.lengths[played.capped].max()),
        )
    metrics = {
        "mean_return": float(played.returns.mean()),
        "std_return": float(played.returns.std()),
        "capped_episodes": float(capped),
    }
    if played.seats:
        metrics["win_rate"] = float((played.returns > 0).mean())
        n = len(played.seats)
        for i, seat in enumerate(played.seats):
            if played.returns[i::n].size:
                metrics[f"win_rate_{seat}"] = float((played.returns[i::n] > 0).mean())
        if earlier is not None:
            torch.manual_seed(seed)  # the earlier policy samples: the same draws each time
            against = play_games(
                model,
                env_id,
                episodes,
                seed,
                device=device,
                env_kwargs=env_kwargs,
                max_steps=max_steps,
                opponent=earlier,
            )
            metrics["win_rate_vs_previous"] = float((against.returns > 0).mean())
    return metrics


class EvalScore:
    """The run's evaluator's scoring function (:func:`score_greedy` with the run's
    settings); in a zero-sum game it keeps the policy it scored, to play the next one
    against it: a win rate above one half there says the policy still improves, where
    the win rate against a random player has long reached 1."""

    def __init__(
        self,
        env_id: str,
        env_kwargs: Mapping[str, Any],
        episodes: int,
        seed: int,
        max_steps: int | None = None,
    ) -> None:
        self.env_id, self.env_kwargs = env_id, dict(env_kwargs)
        self.episodes, self.seed, self.max_steps = episodes, seed, max_steps
        self.previous: ActorCritic | None = None

    def __call__(self, model: torch.nn.Module, device: torch.device, step: int) -> dict[str, float]:
        assert isinstance(model, ActorCritic)  # build_model's
        metrics = score_greedy(model, device, step, env_id=self.env_id,
                               env_kwargs=self.env_kwargs, episodes=self.episodes,
                               seed=self.seed, max_steps=self.max_steps,
                               earlier=self.previous)  # fmt: skip
        if "win_rate" in metrics:
            self.previous = copy.deepcopy(model)
        return metrics


def self_play(env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> bool:
    """Whether a run on ``env_id`` is one policy in every seat of a zero-sum game
    (:func:`zero_sum`): its training returns then sum to 0, and its progress shows in
    the evaluator's games against a random player instead."""
    return is_multiagent_id(env_id) and zero_sum(env_id, env_kwargs)
