"""Asynchronous PPO's update: several clipped steps from one rollout, each on fresh shared weights.

A worker collects a rollout as for A3C, then :func:`behaviour` records what the policy
that acted said (log-probabilities and values, from the same weights, in one pass
without autograd) and the GAE targets, once (:func:`refresh_targets` recomputes the
targets before each later epoch, if asked). Each of ``epochs x minibatches`` steps then
copies the shared parameters (other workers have moved them meanwhile), scores its
minibatch with :func:`ppo_loss` and makes one lock-free step. The ratio against the
behaviour log-probabilities corrects for both this worker's earlier steps and the lag
other workers introduce, and the clip bounds how far either can push the policy.
:class:`APPOSteps` takes those steps, and :data:`APPO` declares the algorithm to the run.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from a3c.learning.algorithm import Algorithm, Choice, Learning, Range
from a3c.learning.figures import Figures
from a3c.learning.loss import normalized, value_errors
from a3c.learning.metrics import SUM, Metric
from a3c.learning.returns import ValueFit, forward_with_targets, gae_targets, mean_over, value_fit
from a3c.learning.rollout import Rollout
from a3c.learning.settings import UpdateSettings
from a3c.policy import ActorCritic

__all__ = [
    "APPO",
    "KL_STOP",
    "APPOSteps",
    "Behaviour",
    "PPOFigures",
    "behaviour",
    "minibatches",
    "ppo_loss",
    "refresh_targets",
]

#: APPO stops a worker's epochs on a rollout past this multiple of --target-kl (SB3's rule).
KL_STOP = 1.5


@dataclass
class Behaviour:
    """What the acting policy said of its rollout, fixed for every step taken from it."""

    log_p: Tensor  # [T, K]
    values: Tensor  # [T, K]
    advantages: Tensor  # [T, K]
    returns: Tensor  # [T, K]
    fit: ValueFit  # of the acting values against the first returns


@dataclass(frozen=True)
class PPOFigures(Figures):
    """What an APPO step reports (detached): its loss's parts, how far the policy moved
    from the behaviour, and the behaviour values' fit."""

    policy_loss: Tensor
    value_loss: Tensor
    entropy: Tensor
    approx_kl: Tensor
    clip_fraction: Tensor
    explained_variance: Tensor
    flat_values: Tensor


@torch.no_grad()
def behaviour(model: ActorCritic, r: Rollout, gamma: float, lam: float) -> Behaviour:
    """Call with the weights the rollout was collected with (and their observation
    statistics): the log-probabilities are then exactly those of the actions taken.
    Recorded while acting (``r.log_p``, ``r.values``), they are taken as they are and
    only the bootstrap rows pass through the model, instead of the whole rollout; with
    its targets too (an actor's, for a decoupled learner), the model is not called."""
    if r.log_p is not None and r.values is not None and r.advantages is not None:
        assert r.returns is not None  # computed with the advantages
        fit = value_fit(r.values, r.returns, r.acted)
        return Behaviour(r.log_p, r.values, r.advantages, r.returns, fit)
    if r.log_p is not None and r.values is not None:
        log_p, v = r.log_p, r.values
        adv, ret = gae_targets(r, v, model.value(torch.cat((r.next_obs, r.final_obs))), gamma, lam)
    else:
        pi, v, adv, ret = forward_with_targets(model, r, gamma, lam)
        log_p = model.dist.log_prob_entropy(pi, r.actions.flatten(0, 1))[0].view_as(v)
    return Behaviour(log_p, v, adv, ret, value_fit(v, ret, r.acted))


@torch.no_grad()
def refresh_targets(
    model: ActorCritic, r: Rollout, b: Behaviour, gamma: float, lam: float
) -> Behaviour:
    """``b`` with its advantages and returns from the model's current values (call it with
    fresh shared weights): between epochs the value function has moved, by this worker's
    steps and the others', and stale targets pull it back (Andrychowicz et al. 2021
    recompute them at every pass). The behaviour's log-probabilities and values stay."""
    _, _, adv, ret = forward_with_targets(model, r, gamma, lam)
    return Behaviour(b.log_p, b.values, adv, ret, b.fit)


def minibatches(T: int, K: int, count: int, recurrent: bool) -> list[Tensor]:
    """One epoch's index sets, shuffled: of the ``T*K`` samples, or for a recurrent policy
    of the ``K`` envs, so that every sequence stays whole from its stored initial state."""
    n = K if recurrent else T * K
    return list(torch.randperm(n).tensor_split(count))


def ppo_loss(
    model: ActorCritic, r: Rollout, b: Behaviour, idx: Tensor, s: UpdateSettings
) -> tuple[Tensor, PPOFigures]:
    """``(loss, figures)`` of one minibatch (``idx`` from :func:`minibatches`): the
    clipped surrogate, the value loss and the entropy bonus."""
    by_env = r.state is not None
    if r.state is None:
        pi, v = model(_rows(r.obs, idx, by_env))
    else:
        T, k = r.rewards.shape[0], idx.numel()
        h, c = r.state
        none = torch.zeros(T, k, dtype=torch.bool, device=r.dones.device)  # no bootstrap rows
        pi, v = model.unroll(
            r.obs[:, idx], (h[idx], c[idx]), r.dones[:, idx], r.next_obs[idx], none,
            r.final_obs[:0],
        )  # fmt: skip
        pi, v = pi[: T * k], v[: T * k]
    adv, ret = _rows(b.advantages, idx, by_env), _rows(b.returns, idx, by_env)
    keep = None if r.acted is None else _rows(r.acted, idx, by_env)
    if s.normalize_advantage and adv.numel() > 1:
        adv = normalized(adv, keep)
    log_p, entropy = model.dist.log_prob_entropy(pi, _rows(r.actions, idx, by_env))
    log_ratio = log_p - _rows(b.log_p, idx, by_env)
    ratio = log_ratio.exp()
    clipped = ratio.clamp(1.0 - s.clip_range, 1.0 + s.clip_range)
    policy_loss = -mean_over(torch.min(ratio * adv, clipped * adv), keep)
    if s.clip_range_vf is not None:
        old_v = _rows(b.values, idx, by_env)
        v = old_v + (v - old_v).clamp(-s.clip_range_vf, s.clip_range_vf)
    value_loss = mean_over(value_errors(v, ret, s.value_loss), keep)
    entropy_mean = mean_over(entropy, keep)
    loss = policy_loss + s.value_coef * value_loss - s.entropy_coef * entropy_mean
    with torch.no_grad():
        approx_kl = mean_over((ratio - 1.0) - log_ratio, keep)  # Schulman's, >= 0
        clip_fraction = mean_over(((ratio - 1.0).abs() > s.clip_range).float(), keep)
    figures = PPOFigures(
        policy_loss=policy_loss.detach(),
        value_loss=value_loss.detach(),
        entropy=entropy_mean.detach(),
        approx_kl=approx_kl,
        clip_fraction=clip_fraction,
        explained_variance=b.fit.explained_variance,
        flat_values=b.fit.flat_values,
    )
    return loss, figures


def _rows(x: Tensor, idx: Tensor, by_env: bool) -> Tensor:
    """The minibatch's rows of a ``[T, K, ...]`` tensor, flattened to ``[n, ...]``."""
    return x[:, idx].flatten(0, 1) if by_env else x.flatten(0, 1)[idx]


class APPOSteps:
    """``epochs x minibatches`` clipped steps a rollout, each on fresh shared weights; a
    minibatch past ``KL_STOP x target_kl`` ends the rollout's epochs (counted as a
    ``kl_stops``)."""

    rollouts_per_step = 1

    def __init__(self, learner: Learning) -> None:
        self.learner = learner

    def __call__(self, rollout: Rollout, update: UpdateSettings, lr: float) -> bool:
        learner, s = self.learner, self.learner.settings
        gamma, lam = update.gamma, update.gae_lambda
        with learner.precision.autocast():
            b = behaviour(learner.model, rollout, gamma, lam)
        T, K = rollout.rewards.shape
        finite = True
        for epoch in range(s.epochs):
            if epoch and s.recompute_advantages:
                learner.local.copy_(learner.shared)
                with learner.precision.autocast():
                    b = refresh_targets(learner.model, rollout, b, gamma, lam)
            for idx in minibatches(T, K, s.minibatches, rollout.state is not None):
                learner.local.copy_(learner.shared)
                with learner.precision.autocast(), learner.dead.watch():
                    loss, figures = ppo_loss(learner.model, rollout, b, idx, update)
                values = figures.stacked().tolist()
                if s.target_kl is not None and float(figures.approx_kl) > KL_STOP * s.target_kl:
                    learner.stats.add("kl_stops")
                    return finite
                finite &= learner.step(loss, lr, values)
        return finite


APPO = Algorithm(
    name="appo",
    summary="asynchronous PPO, --epochs x --minibatches clipped steps per rollout, each "
    "on fresh shared weights",
    figures=PPOFigures,
    steps=APPOSteps,
    records_behaviour=True,
    normalize_advantage=True,  # as SB3 and CleanRL
    normalized_over="minibatch",
    minibatched=True,
    tuning_space={
        "n_steps": Choice((64, 128, 256, 512)),
        "envs_per_worker": Choice((2, 4, 8)),
        "epochs": Range(1, 10, integer=True),
        "minibatches": Choice((1, 4, 8, 16, 32)),
        "clip_range": Choice((0.1, 0.2, 0.3)),
    },
    metrics=(Metric("kl_stops", "charts/kl_stops", SUM),),
    # CartPole-v1 solved in 6.0 s (median of 3 seeds); A3C's 5 steps: unsolved after 60 s.
    defaults={"n_steps": 32},
)
