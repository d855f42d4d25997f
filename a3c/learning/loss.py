"""From one rollout to the actor-critic loss: the A3C update's arithmetic, in one tested place.

A :class:`Rollout` is what a worker collected: ``T`` steps of ``K`` environments, with
the observation after the last step (to bootstrap from) and the final observations of
episodes cut off by a time limit (to bootstrap a truncation from ``V(final_obs)``
instead of the next episode's first state). :func:`a3c_loss` runs one forward pass with
autograd over all of them and returns the loss and the figures worth logging.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from a3c.learning.returns import gae, next_state_values
from a3c.policy import ActorCritic

__all__ = [
    "FIT_STATS",
    "LOSS_STATS",
    "LossSettings",
    "Rollout",
    "a3c_loss",
    "forward_with_targets",
    "gae_targets",
    "value_fit",
]

#: Below this variance the returns are taken as constant (nothing to explain).
VAR_EPS = 1e-8

#: Below this fraction of the returns' variance, the values' variance is taken as none:
#: outputs equal to a few ulps, as from a net with a dead layer (no ReLU unit positive on
#: any input), where a healthy net's values vary by ~1% of the returns even at its start.
FLAT_VALUES = 1e-8

#: How well the values fit the returns (:func:`value_fit`), in order.
FIT_STATS = ("explained_variance", "flat_values")
#: The figures :func:`a3c_loss` reports, in order.
LOSS_STATS = ("policy_loss", "value_loss", "entropy", *FIT_STATS)


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


@dataclass(frozen=True)
class LossSettings:
    gamma: float = 0.99
    gae_lambda: float = 1.0
    value_coef: float = 0.5
    entropy_coef: float = 0.0
    normalize_advantage: bool = False
    value_loss: str = "mse"  # or "huber" (smooth L1, delta 1: SB3's DQN / rl_games' clip)


def forward_with_targets(
    model: ActorCritic, r: Rollout, gamma: float, lam: float
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """One pass over a rollout: ``(pi [T*K, ...], values [T, K], advantages, returns)``;
    the targets (GAE) carry no gradient, ``pi`` and ``values`` do where autograd is on."""
    T, K = r.rewards.shape
    n = T * K
    if r.state is None:
        pi, values = model(torch.cat((r.obs.flatten(0, 1), r.next_obs, r.final_obs)))
    else:
        pi, values = model.unroll(r.obs, r.state, r.dones, r.next_obs, r.truncated, r.final_obs)
    v = values[:n].view(T, K)
    adv, ret = gae_targets(r, v, values[n:], gamma, lam)
    return pi[:n], v, adv, ret


@torch.no_grad()
def gae_targets(
    r: Rollout, v: Tensor, bootstrap: Tensor, gamma: float, lam: float
) -> tuple[Tensor, Tensor]:
    """``(advantages, returns)`` [T, K] from the rollout's values ``v`` [T, K] and
    ``bootstrap``: the values of ``next_obs`` [K], then of ``final_obs`` [M]."""
    K = v.shape[1]
    final_v = torch.zeros_like(v)
    final_v[r.truncated] = bootstrap[K:]
    next_v = next_state_values(v, bootstrap[:K], r.truncated, final_v)
    return gae(r.rewards, v, next_v, r.terminated, r.dones, gamma=gamma, lam=lam)


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


def value_fit(pred: Tensor, target: Tensor) -> Tensor:
    """``FIT_STATS``: the explained variance, ``1 - Var(target - pred) / Var(target)``, and
    1.0 where the values are flat (one value for every sample while the returns varied) or
    else 0.0: a net that gives every input the same value learns nothing more, and the
    trainer warns when it lasts. Where the returns do not vary (one sample, or equal
    returns) both are 0, never NaN: a NaN figure once vetoed every update of ``--n-steps 1
    --envs-per-worker 1``."""
    var = target.var(correction=0)
    if var <= VAR_EPS:
        return torch.zeros(2)
    explained = 1.0 - (target - pred).var(correction=0) / var
    flat = pred.var(correction=0) <= FLAT_VALUES * var
    return torch.stack((explained, flat.to(explained.dtype)))
