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

import logging
from collections.abc import Mapping
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch

from a3c.envs import make_env, make_vector_env
from a3c.envs.make import is_multiagent_id
from a3c.envs.multiagent import AgentRows
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


#: Who plays the other seats of a turn-based game when no opponent policy is given.
RANDOM_PLAYER = "a random legal player"


def seat_results(played: Episodes, against: str = RANDOM_PLAYER) -> list[str]:
    """A turn-based game's results per seat the policy played: the shares of its games won
    (a positive return), drawn and lost."""
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
    the games played; nothing for one agent or a turn-based game (see :func:`seat_results`)."""
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
    """``games`` games of a PettingZoo env, one after another (the first seeded ``seed``):
    each game's return is its agents' mean. In a turn-based game the policy plays one seat
    (seat ``i % agents`` in game ``i``) and the return is its seat's, so a policy that wins
    every game scores the win's reward; the other seats are played by ``opponent``, which
    samples its moves (so that games differ), or without one by a random legal player."""
    envs = make_vector_env(env_id, 1, seed, **(env_kwargs or {}))
    assert isinstance(envs, AgentRows)
    rng = np.random.default_rng(seed)
    n, turns = envs.num_envs, envs.games[0].turns
    cap = max_steps or DEFAULT_EVAL_MAX_STEPS
    returns = np.zeros(games)
    lengths = np.zeros(games, dtype=np.int64)
    capped = np.zeros(games, dtype=bool)
    per_agent = np.zeros((games, n))
    illegal = 0
    try:
        obs, _ = envs.reset(seed=seed)
        got, game = np.zeros(n), 0
        with torch.no_grad():
            while game < games:
                x = torch.as_tensor(obs, device=device)
                actions = model.dist.to_env(model.act(x, greedy).cpu())
                mine = np.arange(n) == game % n if turns else np.ones(n, dtype=bool)
                if turns and opponent is not None:
                    theirs = opponent.dist.to_env(opponent.act(x, greedy=False).cpu())
                    actions[~mine] = theirs[~mine]
                elif turns:  # the other seats play uniformly among their legal moves
                    for row in np.flatnonzero(~mine):
                        legal = np.flatnonzero(obs[row, -model.n_pi :] > 0.5)
                        actions[row] = rng.choice(legal) if legal.size else 0
                obs, reward, _, _, info = envs.step(actions)
                illegal += int(info["illegal"][mine].sum())
                got += reward
                lengths[game] += 1
                if not info["team"] and lengths[game] < cap:
                    continue
                capped[game] = not info["team"]
                returns[game] = got[game % n] if turns else got.mean()
                per_agent[game] = got
                got[:] = 0
                game += 1
                if capped[game - 1] and game < games:
                    obs, _ = envs.reset()
    finally:
        envs.close()
    seats = tuple(envs.agents) if turns else ()
    return Episodes(returns, lengths, capped, seats, tuple(envs.agents), per_agent, illegal)


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
) -> dict[str, float]:
    """The evaluator's score: mean and spread of greedy returns on fixed seeds, and how
    many episodes the step cap cut (their returns count as they stood)."""
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
    return {
        "mean_return": float(played.returns.mean()),
        "std_return": float(played.returns.std()),
        "capped_episodes": float(capped),
    }
