"""Acting: ``T`` steps of ``K`` environments with the worker's local model, as a Rollout.

The collector carries what lives across rollouts: the observation to act on next, an
LSTM policy's state (zeroed for exactly the envs whose episode ended, so a new episode
starts from the zero state), each env's running episode return and length, and with
shared return statistics the reward scaling: it feeds the discounted returns, hands out
the rewards scaled and shares the returns, so no one else touches the scaler.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import VectorEnv
from gymnasium.wrappers import RecordEpisodeStatistics

from a3c.envs import final_observations
from a3c.envs.episodes import episode_scores
from a3c.envs.multiagent import AgentRows
from a3c.learning.normalize import ReturnScaler, RunningMeanStd
from a3c.learning.opponents import Opponents
from a3c.learning.rollout import Rollout
from a3c.policy import ActorCritic

__all__ = ["Collector"]


class Collector:
    """One worker's acting loop. ``collect()`` fills its own buffers (reused each call:
    a rollout is valid until the next call) and queues finished episodes' returns and
    lengths for ``take_episodes()``. With ``record``, the rollout of a feed-forward policy
    on one trunk also keeps its actions' log-probabilities and its values (APPO's
    behaviour): its values come with its actions. Separate nets would pay a value pass
    per step, more than one batched pass after the rollout; an LSTM's is unrolled after.
    With ``return_rms``, rewards come out scaled by the std of the discounted return
    (``gamma``), whose samples go to the row ``writer`` of ``return_rms``."""

    def __init__(
        self,
        envs: VectorEnv,
        model: ActorCritic,
        n_steps: int,
        seed: int | None = None,
        record: bool = False,
        return_rms: RunningMeanStd | None = None,
        writer: int = 0,
        gamma: float = 0.99,
        opponents: Opponents | None = None,
    ) -> None:
        self.envs, self.model = envs, model
        T, K = n_steps, envs.num_envs
        self.scaler = ReturnScaler(return_rms, writer, K, gamma) if return_rms is not None else None
        dist = model.dist
        self.obs = model.empty_obs(T, K)
        self.actions = torch.empty(T, K, *dist.action_shape, dtype=dist.action_dtype)
        self.rewards = torch.empty(T, K)
        self.terminated = torch.empty(T, K, dtype=torch.bool)
        self.dones = torch.empty(T, K, dtype=torch.bool)
        self.truncated = torch.empty(T, K, dtype=torch.bool)
        self.record = record and not model.recurrent and not model.separate
        self.log_p = torch.empty(T, K) if self.record else None
        self.values = torch.empty(T, K) if self.record else None
        self.acted = torch.ones(T, K, dtype=torch.bool) if isinstance(envs, AgentRows) else None
        self.agents = len(envs.agents) if isinstance(envs, AgentRows) else 1  # rows per game
        self.ep_return = np.zeros(K)
        self.ep_length = np.zeros(K, dtype=np.int64)
        self.episodes: list[tuple[float, int, int]] = []  # return, length, agent
        self.teams: list[float] = []  # many agents: ended games' returns, summed over agents
        self.illegal = 0  # many agents: moves the action mask forbade
        obs, _ = envs.reset(seed=seed)
        self.opponents = opponents
        if opponents is not None:
            assert isinstance(envs, AgentRows), "opponents play seats of PettingZoo games"
            opponents.start(np.arange(len(envs.games)))
        self.next_obs = torch.from_numpy(obs)
        self.state = model.initial_state(K) if model.recurrent else None
        # Atari's stack records the real game's score (innermost, before reward clipping
        # and life-loss episodes): report that, not the sum of the rewards learned from.
        self.real_scores = _records_episodes(envs)

    @torch.no_grad()
    def collect(self) -> Rollout:
        model, dist, envs = self.model, self.model.dist, self.envs
        obs, state = self.next_obs, self.state
        state0 = state
        final_obs: list[np.ndarray] = []
        log_p, values = self.log_p, self.values  # tensors when self.record
        for t in range(self.obs.shape[0]):
            self.obs[t] = obs
            if log_p is not None and values is not None:
                actions, log_p[t], values[t] = model.act_scored(obs)
            elif state is None:
                actions = model.act(obs)
            else:
                actions, state = model.act_recurrent(obs, state)
            theirs = None if self.opponents is None else self.opponents.act(obs, actions)
            self.actions[t] = actions
            obs_np, reward, terminated, truncated, info = envs.step(dist.to_env(actions))
            self.rewards[t] = torch.from_numpy(reward)
            self.terminated[t] = torch.from_numpy(terminated)
            cut = truncated & ~terminated
            self.truncated[t] = torch.from_numpy(cut)
            done = terminated | truncated
            self.dones[t] = torch.from_numpy(done)
            self.ep_return += reward
            if self.acted is not None:
                acted = info["acted"] if theirs is None else info["acted"] & ~theirs
                self.acted[t] = torch.from_numpy(acted)
                self.ep_length += acted
                self.teams.extend(info["team"])
                self.illegal += int(info["illegal"][acted].sum())
            else:
                self.ep_length += 1
            if self.scaler is not None:
                self.scaler.observe(reward, done)
            if self.real_scores:
                self.episodes.extend((r, n, 0) for _, r, n in episode_scores(info))
            if done.any():
                if state is not None:  # a new episode starts from the zero state
                    keep = torch.from_numpy(~done).unsqueeze(1).to(state[0].dtype)
                    state = (state[0] * keep, state[1] * keep)
                if not self.real_scores:
                    ours = done if theirs is None else done & ~theirs
                    for i in np.flatnonzero(ours):
                        ret, length = float(self.ep_return[i]), int(self.ep_length[i])
                        self.episodes.append((ret, length, int(i % self.agents)))
                self.ep_return[done] = 0
                self.ep_length[done] = 0
                final_obs.extend(final_observations(info, cut)[1])
            if self.opponents is not None:
                self.opponents.start(info["started"])
            obs = torch.from_numpy(obs_np)
        self.next_obs, self.state = obs, state
        if self.scaler is not None:
            self.scaler.apply(self.rewards)
        finals = (
            torch.from_numpy(np.stack(final_obs)) if final_obs else obs.new_empty(0, *obs.shape[1:])
        )
        return Rollout(
            self.obs,
            self.actions,
            self.rewards,
            self.terminated,
            self.dones,
            obs,
            self.truncated,
            finals,
            state0,
            self.log_p,
            self.values,
            acted=self.acted,
        )

    def take_episodes(self) -> list[tuple[float, int, int]]:
        """The (return, length, agent) of the episodes finished since the last call; the
        agent's index among its game's (many agents), else 0."""
        out, self.episodes = self.episodes, []
        return out

    def take_games(self) -> tuple[list[float], int]:
        """Many agents: the summed returns of the games ended since the last call, and the
        illegal moves made since."""
        out, self.teams, illegal, self.illegal = self.teams, [], self.illegal, 0
        return out, illegal


def _records_episodes(envs: VectorEnv) -> bool:
    env = getattr(envs, "envs", [None])[0]
    while isinstance(env, gym.Wrapper):
        if isinstance(env, RecordEpisodeStatistics):
            return True
        env = env.env
    return False
