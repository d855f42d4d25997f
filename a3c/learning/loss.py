"""A3C's update: from one rollout to the actor-critic loss, in one tested place.

:func:`a3c_loss` runs one forward pass with autograd over the whole rollout (and its
bootstrap rows), takes the GAE targets without gradient, and returns the loss and the
figures worth logging.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from a3c.learning.returns import FIT_STATS, forward_with_targets, value_fit
from a3c.learning.rollout import Rollout
from a3c.policy import ActorCritic

__all__ = ["LOSS_STATS", "LossSettings", "a3c_loss"]

#: The figures :func:`a3c_loss` reports, in order.
LOSS_STATS = ("policy_loss", "value_loss", "entropy", *FIT_STATS)


@dataclass(frozen=True)
class LossSettings:
    gamma: float = 0.99
    gae_lambda: float = 1.0
    value_coef: float = 0.5
    entropy_coef: float = 0.0
    normalize_advantage: bool = False
    value_loss: str = "mse"  # or "huber" (smooth L1, delta 1: SB3's DQN / rl_games' clip)


def a3c_loss(model: ActorCritic, r: Rollout, s: LossSettings) -> tuple[Tensor, Tensor]:
    """``(loss, figures)``: the scalar to backpropagate and ``LOSS_STATS`` (detached)."""
    T, K = r.rewards.shape
    n = T * K
    pi, v, adv, ret = forward_with_targets(model, r, s.gamma, s.gae_lambda)
    if s.normalize_advantage and n > 1:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    log_p, entropy = model.dist.log_prob_entropy(pi, r.actions.flatten(0, 1))
    policy_loss = -(log_p * adv.reshape(n)).mean()
    huber = s.value_loss == "huber"
    value_loss = F.smooth_l1_loss(v, ret) if huber else (ret - v).pow(2).mean()
    entropy_mean = entropy.mean()
    loss = policy_loss + s.value_coef * value_loss - s.entropy_coef * entropy_mean
    with torch.no_grad():
        losses = torch.stack((policy_loss, value_loss, entropy_mean))
        figures = torch.cat((losses, value_fit(v, ret)))
    return loss, figures
