"""A hand-made rollout, its GAE targets worked out one scalar at a time, and the tiny
seeded model they are scored with: shared by the A3C and PPO loss tests, and by the
model and flat-buffer tests that need a small ActorCritic."""

from __future__ import annotations

import numpy as np
import torch
from policy_helpers import mlp

from a3c.learning.rollout import Rollout
from a3c.policy import ActorCritic

GAMMA = 0.9


def _rollout() -> Rollout:
    """T=3 steps of K=2 envs.

    env 0: truncated at t=1 (bootstrapped from its final observation), then a new episode
    bootstrapped from ``next_obs``. env 1: terminated at t=0 (no bootstrap), then a new
    episode truncated at the rollout's last step (from its final observation, not
    ``next_obs``).
    """
    g = torch.Generator().manual_seed(1)
    obs = torch.randn(3, 2, 2, generator=g)
    truncated = torch.tensor([[False, False], [True, False], [False, True]])
    terminated = torch.tensor([[False, True], [False, False], [False, False]])
    return Rollout(
        obs=obs,
        actions=torch.tensor([[0, 1], [1, 1], [0, 0]]),
        rewards=torch.tensor([[1.0, -2.0], [0.5, 3.0], [2.5, -1.0]]),
        terminated=terminated,
        dones=terminated | truncated,
        next_obs=torch.randn(2, 2, generator=g),
        truncated=truncated,
        # row-major order of truncated: (t=1, env 0), then (t=2, env 1)
        final_obs=torch.tensor([[2.0, -1.0], [-1.5, 0.5]]),
    )


def _hand_targets(model: ActorCritic, r: Rollout, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """GAE advantages and value targets, one scalar at a time, from the model's values."""
    with torch.no_grad():
        v = model.value(r.obs.reshape(6, 2)).view(3, 2).double().numpy()
        boot = model.value(r.next_obs).double().numpy()
        final = model.value(r.final_obs).double().numpy()
    rew = r.rewards.double().numpy()
    # What comes after each step: the next step's state, the rollout's next_obs, a final
    # observation (truncation) or nothing (termination).
    after = {
        (0, 0): v[1, 0],
        (1, 0): final[0],
        (2, 0): boot[0],
        (0, 1): 0.0,
        (1, 1): v[2, 1],
        (2, 1): final[1],
    }
    episode_goes_on = {(0, 0): True, (1, 0): False, (0, 1): False, (1, 1): True}
    adv = np.zeros((3, 2))
    for k in range(2):
        for t in (2, 1, 0):
            delta = rew[t, k] + GAMMA * after[t, k] - v[t, k]
            carry = adv[t + 1, k] if t < 2 and episode_goes_on[t, k] else 0.0
            adv[t, k] = delta + GAMMA * lam * carry
    return adv, adv + v


def _model(separate: bool = False, normalize_obs: bool = False) -> ActorCritic:
    torch.manual_seed(0)
    return mlp(2, 2, hidden=(4,), separate=separate, normalize_obs=normalize_obs)
