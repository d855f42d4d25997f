"""A3C's update: from one rollout to the actor-critic loss and one step, in one tested place.

:func:`a3c_loss` runs one forward pass with autograd over the whole rollout (and its
bootstrap rows), takes the GAE targets without gradient, and returns the loss and the
figures worth logging; :class:`A3CSteps` makes one lock-free step of it (a rollout of fewer
than ``MIN_BATCH`` samples waits for the next ones'), and :data:`A3C` declares the
algorithm to the run.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from a3c.learning.algorithm import Algorithm, Choice, Learning
from a3c.learning.figures import Figures
from a3c.learning.returns import forward_with_targets, mean_over, value_fit
from a3c.learning.rollout import Rollout
from a3c.learning.settings import UpdateSettings
from a3c.policy import ActorCritic

__all__ = [
    "A3C",
    "MIN_BATCH",
    "A3CFigures",
    "A3CSteps",
    "a3c_loss",
    "normalized",
    "value_errors",
]

#: A3C steps on the mean gradient of at least this many samples (the A3C paper's 5 steps):
#: clipped alone to --max-grad-norm, every one-sample gradient took one size, V rose to
#: r / (1 - gamma) and CartPole's policy collapsed (mean 9.4 where random play gets 22).
MIN_BATCH = 5


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
    keep = None if r.acted is None else r.acted.reshape(n)
    adv, v, ret = adv.reshape(n), v.reshape(n), ret.reshape(n)
    if s.normalize_advantage and n > 1:
        adv = normalized(adv, keep)
    log_p, entropy = model.dist.log_prob_entropy(pi, r.actions.flatten(0, 1))
    policy_loss = -mean_over(log_p * adv, keep)
    value_loss = mean_over(value_errors(v, ret, s.value_loss), keep)
    entropy_mean = mean_over(entropy, keep)
    loss = policy_loss + s.value_coef * value_loss - s.entropy_coef * entropy_mean
    with torch.no_grad():
        fit = value_fit(v, ret, keep)
    figures = A3CFigures(
        policy_loss=policy_loss.detach(),
        value_loss=value_loss.detach(),
        entropy=entropy_mean.detach(),
        explained_variance=fit.explained_variance,
        flat_values=fit.flat_values,
    )
    return loss, figures


def normalized(adv: Tensor, keep: Tensor | None) -> Tensor:
    """Advantages to mean 0 and std 1, over the ``keep`` entries where given."""
    sel = adv if keep is None else adv[keep]
    if sel.numel() < 2:
        return adv
    return (adv - sel.mean()) / (sel.std() + 1e-8)


def value_errors(v: Tensor, ret: Tensor, kind: str) -> Tensor:
    """Each sample's value loss: squared error, or Huber's (``kind == "huber"``)."""
    if kind == "huber":
        return F.smooth_l1_loss(v, ret, reduction="none")
    return (ret - v).pow(2)


class A3CSteps:
    """One lock-free step a rollout with exactly its gradient; rollouts of fewer than
    ``MIN_BATCH`` samples step together, on their mean gradient, clipped as one."""

    def __init__(self, learner: Learning) -> None:
        self.learner = learner
        self.rollouts_per_step = -(-MIN_BATCH // learner.settings.rollout_samples)
        self.pending = 0  # rollouts whose gradients are in the learner's grad
        self.pending_figures = torch.zeros(len(A3CFigures.names()), device=learner.local.device)

    def __call__(self, rollout: Rollout, update: UpdateSettings, lr: float) -> bool | None:
        learner = self.learner
        with learner.precision.autocast(), learner.dead.watch():
            loss, figures = a3c_loss(learner.model, rollout, update)
        values = figures.stacked()
        held = self.rollouts_per_step > 1
        if held:
            summed, values = self._accumulated(loss, values)
            if summed is None:
                return None
            loss = summed
        return learner.step(loss, lr, values.tolist(), held)

    def _accumulated(self, loss: Tensor, figures: Tensor) -> tuple[Tensor | None, Tensor]:
        """A rollout smaller than ``MIN_BATCH``: its gradient (a share of the mean) is
        added to the learner's grad; the last of ``rollouts_per_step`` comes back as
        ``(loss, mean figures)`` to step with, the others as ``(None, figures)``."""
        loss = loss / self.rollouts_per_step
        if self.pending == 0:
            self.learner.grad.zero_()
            self.pending_figures.zero_()
        self.pending += 1
        self.pending_figures += figures
        if self.pending < self.rollouts_per_step:
            loss.backward()
            return None, figures
        self.pending = 0
        return loss, self.pending_figures / self.rollouts_per_step


A3C = Algorithm(
    name="a3c",
    summary="one gradient step per rollout (the A3C paper)",
    figures=A3CFigures,
    steps=A3CSteps,
    normalize_advantage=False,  # the paper's
    normalized_over="rollout",
    tuning_space={
        "n_steps": Choice((5, 8, 16, 32)),
        "envs_per_worker": Choice((1, 4, 8, 16)),
    },
)
