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

from a3c.learning.figures import Figures
from a3c.learning.returns import forward_with_targets, value_fit
from a3c.learning.rollout import Rollout
from a3c.learning.settings import UpdateSettings
from a3c.policy import ActorCritic

__all__ = ["A3CFigures", "a3c_loss"]


@dataclass(frozen=True)
class A3CFigures(Figures):
    """What an A3C step reports (detached): its loss's parts, and the values' fit."""

    policy_loss: Tensor
    value_loss: Tensor
    entropy: Tensor
    explained_variance: Tensor
    flat_values: Tensor


def a3c_loss(model: ActorCritic, r: Rollout, s: UpdateSettings) -> tuple[Tensor, A3CFigures]:
    """``(loss, figures)``: the scalar to backpropagate and what it is made of."""
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
        fit = value_fit(v, ret)
    figures = A3CFigures(
        policy_loss=policy_loss.detach(),
        value_loss=value_loss.detach(),
        entropy=entropy_mean.detach(),
        explained_variance=fit.explained_variance,
        flat_values=fit.flat_values,
    )
    return loss, figures
