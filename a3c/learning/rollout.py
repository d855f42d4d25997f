"""The :class:`Rollout`: what a worker collected and learns from, in one record.

``T`` steps of ``K`` environments, with the observation after the last step (to bootstrap
from) and the final observations of episodes cut off by a time limit (to bootstrap a
truncation from ``V(final_obs)`` instead of the next episode's first state). With many
agents, ``acted`` says which rows were an agent's own step: the others (not its turn, or
it left the game) are learned from by no loss.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

__all__ = ["Rollout"]


@dataclass
class Rollout:
    obs: Tensor  # [T, K, *obs_shape]
    actions: Tensor  # [T, K, *action_shape]: as sampled (before clipping for the env)
    rewards: Tensor  # [T, K] float, as learned from (scaled)
    terminated: Tensor  # [T, K] bool
    dones: Tensor  # [T, K] bool: terminated or truncated
    next_obs: Tensor  # [K, *obs_shape]: where the next rollout starts
    truncated: Tensor  # [T, K] bool: truncated and not terminated
    final_obs: Tensor  # [M, *obs_shape]: last observations of the M truncated episodes,
    #                     in the row-major order of ``truncated``'s True entries
    state: tuple[Tensor, Tensor] | None = None  # an LSTM's (h, c) [K, size] at the start
    # What the acting policy said, when recorded while acting (APPO's behaviour):
    log_p: Tensor | None = None  # [T, K] log-probabilities of the actions taken
    values: Tensor | None = None  # [T, K]
    # Its GAE targets, when the actor computed them (a decoupled learner gets no final_obs):
    advantages: Tensor | None = None  # [T, K]
    returns: Tensor | None = None  # [T, K]
    # Multi-agent rows (a3c.envs.multiagent): whose actions the env took; None: every row's.
    acted: Tensor | None = None  # [T, K] bool
