"""Advantage and return targets: GAE(lambda), with n-step returns as lambda = 1, and how
well the values fit them.

Rollouts are tensors shaped ``[T, N]`` (T steps of N environments, time first). The
episode-boundary semantics follow Gymnasium's ``terminated``/``truncated`` split:

* ``terminated[t]``: the step ``t`` reached a terminal state, whose value is 0 by
  definition, so nothing is bootstrapped.
* truncated at ``t`` (time limit, or any other cut-off that is not a terminal state):
  the episode *could* have continued, so the target bootstraps from ``V(final_obs)``,
  the value of the observation the truncated episode ended in. With autoreset the next
  row of the rollout already belongs to the next episode, so its value must not be
  used, and neither must 0.
* either way (``dones[t]``), the advantage recursion must not flow from the next
  episode back into this one.

Callers express all three with ``next_values`` (what to bootstrap with after step t),
``terminated`` and ``dones``; :func:`next_state_values` builds ``next_values`` from the
per-step values, the rollout's bootstrap value and the final-observation values.
:func:`gae_targets` and :func:`forward_with_targets` do all of it for a :class:`Rollout`,
which both update rules learn from.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from a3c.learning.rollout import Rollout
from a3c.policy import ActorCritic

__all__ = [
    "ValueFit",
    "forward_with_targets",
    "gae",
    "gae_targets",
    "mean_over",
    "next_state_values",
    "value_fit",
]

#: Below this variance the returns are taken as constant (nothing to explain).
VAR_EPS = 1e-8

#: Below this fraction of the returns' variance, the values' variance is taken as none:
#: outputs equal to a few ulps, as from a net with a dead layer (no ReLU unit positive on
#: any input), where a healthy net's values vary by ~1% of the returns even at its start.
FLAT_VALUES = 1e-8


@dataclass(frozen=True)
class ValueFit:
    """How well the values fit the returns (:func:`value_fit`): 0-dim tensors."""

    explained_variance: Tensor
    flat_values: Tensor  # 1.0 where the values are flat, else 0.0


def gae(
    rewards: Tensor,
    values: Tensor,
    next_values: Tensor,
    terminated: Tensor,
    dones: Tensor,
    *,
    gamma: float = 0.99,
    lam: float = 1.0,
    acted: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimates and value targets: ``(advantages, returns)``.

    All inputs are ``[T, N]`` (or any ``[T, ...]``, all the same shape):

    * ``rewards[t]``: reward of step t.
    * ``values[t]``: ``V(s_t)``, the value of the observation the action at t was taken in.
    * ``next_values[t]``: the value to bootstrap with after step t: ``V(s_{t+1})`` while
      the episode goes on (``values[t + 1]``, or the rollout's bootstrap value at
      ``t = T - 1``), ``V(final_obs)`` where the episode was truncated at t. Ignored
      where ``terminated[t]`` (may hold anything there, even NaN).
    * ``terminated[t]``: step t ended the episode in a terminal state (bool or 0/1).
    * ``dones[t]``: step t ended the episode for any reason (``terminated | truncated``);
      stops the GAE recursion at episode boundaries. ``dones`` must include
      ``terminated``.

    ``delta_t = r_t + gamma * (1 - terminated_t) * next_values_t - values_t`` and
    ``A_t = delta_t + gamma * lam * (1 - dones_t) * A_{t+1}`` (``A_T = 0``), then
    ``returns = advantages + values``. With ``lam = 1`` the returns are the n-step
    bootstrapped returns of A3C (``r_t + gamma r_{t+1} + ... + gamma^k V(s_{t+k+1})``,
    cut at episode ends), provided ``next_values[t] == values[t + 1]`` inside an episode.

    ``acted[t]`` (bool, optional): the row's agent acted at t (:mod:`a3c.envs.multiagent`).
    Each row's recursion then runs over its own steps only: the rewards and episode end of
    the steps between two of them (an opponent's move, the rest of a game it left) count
    for the earlier one, undiscounted, and bootstrap from the later one's value; the
    others' advantages are 0 and no loss reads them.

    Inputs are detached, so the outputs are constant targets with no autograd graph;
    they have ``values``' dtype.
    """
    shape = values.shape
    for name, x in (
        ("rewards", rewards),
        ("next_values", next_values),
        ("terminated", terminated),
        ("dones", dones),
    ):
        if x.shape != shape:
            raise ValueError(f"gae: {name} has shape {tuple(x.shape)}, values {tuple(shape)}")
    if values.dim() == 0 or values.shape[0] == 0:
        raise ValueError("gae: inputs need a non-empty leading time dimension")

    v = values.detach()
    term = terminated if terminated.dtype == torch.bool else terminated != 0
    done = dones if dones.dtype == torch.bool else dones != 0
    if acted is not None:
        return _gae_own_steps(rewards, v, next_values, term, done, acted, gamma, lam)
    # where, not multiply: next_values may hold garbage (NaN) at terminal steps.
    nv = torch.where(term, 0.0, next_values.detach().to(v.dtype))
    deltas = rewards.detach().to(v.dtype) + gamma * nv - v
    carry = torch.where(done, 0.0, torch.full_like(v, gamma * lam))

    # unbind + stack: one op each, instead of an indexing op per row and step.
    delta_rows, carry_rows = deltas.unbind(0), carry.unbind(0)
    rows: list[Tensor] = [delta_rows[-1]] * len(delta_rows)
    last = delta_rows[-1]
    for t in range(len(delta_rows) - 2, -1, -1):
        last = torch.addcmul(delta_rows[t], carry_rows[t], last)
        rows[t] = last
    advantages = torch.stack(rows)
    return advantages, advantages + v


def _gae_own_steps(
    rewards: Tensor,
    v: Tensor,
    next_values: Tensor,
    term: Tensor,
    done: Tensor,
    acted: Tensor,
    gamma: float,
    lam: float,
) -> tuple[Tensor, Tensor]:
    """:func:`gae` over each row's acted steps (see ``acted`` there). Going back in time,
    each row carries what follows its next own step: the rewards since (``pending``),
    whether an episode ended before it and how (``ended``, ``terminal``), the value to
    bootstrap from and that step's advantage."""
    r, nv = rewards.detach().to(v.dtype), next_values.detach().to(v.dtype)
    adv = torch.zeros_like(v)
    zero = torch.zeros_like(v[0])
    after_v, after_adv, pending = nv[-1].clone(), zero, zero
    ended = torch.zeros_like(done[0])
    terminal = torch.zeros_like(done[0])
    for t in range(v.shape[0] - 1, -1, -1):
        d, tm, own = done[t], term[t], acted[t]
        follow = torch.where(d, 0.0, pending)
        stop, end = d | ended, tm | (~d & terminal)
        boot = torch.where(end, 0.0, torch.where(d, nv[t], after_v))
        a_t = r[t] + follow + gamma * boot - v[t] + gamma * lam * torch.where(stop, 0.0, after_adv)
        adv[t] = torch.where(own, a_t, 0.0)
        pending = torch.where(own, 0.0, torch.where(d, r[t], r[t] + pending))
        terminal = ~own & torch.where(d, tm, terminal)
        ended = ~own & stop
        after_v = torch.where(own, v[t], torch.where(d, nv[t], after_v))
        after_adv = torch.where(own, a_t, after_adv)
    return adv, adv + v


def mean_over(x: Tensor, keep: Tensor | None) -> Tensor:
    """``x.mean()`` over the entries ``keep`` selects (all where None): the rows an agent
    acted in, for multi-agent rollouts."""
    if keep is None:
        return x.mean()
    return (x * keep).sum() / keep.sum().clamp(min=1)


def next_state_values(
    values: Tensor,
    bootstrap_value: Tensor,
    truncated: Tensor | None = None,
    final_values: Tensor | None = None,
) -> Tensor:
    """Build :func:`gae`'s ``next_values`` for a rollout collected with autoreset.

    ``values`` ``[T, N]`` are ``V(s_t)``; ``bootstrap_value`` ``[N]`` is the value of the
    observation after the last step (the one the next rollout starts from). Where
    ``truncated[t, n]``, the result is ``final_values[t, n]``, ``V`` of that episode's
    final observation (only those entries of ``final_values`` are read). Entries after
    terminal steps are whatever the next row holds; :func:`gae` ignores them.
    """
    if bootstrap_value.shape != values.shape[1:]:
        raise ValueError(
            f"next_state_values: bootstrap_value has shape {tuple(bootstrap_value.shape)},"
            f" expected {tuple(values.shape[1:])}"
        )
    nv = torch.cat((values[1:].detach(), bootstrap_value.detach().to(values.dtype).unsqueeze(0)))
    if truncated is None:
        return nv
    if final_values is None:
        raise ValueError("next_state_values: truncated given without final_values")
    trunc = truncated if truncated.dtype == torch.bool else truncated != 0
    return torch.where(trunc, final_values.detach().to(nv.dtype), nv)


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
    return gae(r.rewards, v, next_v, r.terminated, r.dones, gamma=gamma, lam=lam, acted=r.acted)


def value_fit(pred: Tensor, target: Tensor, keep: Tensor | None = None) -> ValueFit:
    """The explained variance, ``1 - Var(target - pred) / Var(target)``, and
    1.0 where the values are flat (one value for every sample while the returns varied) or
    else 0.0: a net that gives every input the same value learns nothing more, and the
    trainer warns when it lasts. Where the returns do not vary (one sample, or equal
    returns) both are 0, never NaN. ``keep``: the entries to judge (all where None)."""
    if keep is not None:
        pred, target = pred[keep], target[keep]
    if target.numel() == 0:
        none = torch.zeros((), device=pred.device)
        return ValueFit(none, none)
    var = target.var(correction=0)
    if var <= VAR_EPS:
        none = torch.zeros((), device=pred.device)
        return ValueFit(none, none)
    explained = 1.0 - (target - pred).var(correction=0) / var
    flat = pred.var(correction=0) <= FLAT_VALUES * var
    return ValueFit(explained, flat.to(explained.dtype))
