"""Groups of agents with policies of their own, one model to the engine.

``--agent-groups prefix`` gives ``speaker_*`` and ``listener_*`` a policy each. The engine
steps, shares and checkpoints one model, so :class:`GroupedActorCritic` holds one
:class:`ActorCritic` per group and sends each row to its group's: a row
(:class:`a3c.envs.multiagent.AgentViews`) is the group's index, one block of observation per
group, and the legal actions of the largest group. A group's net reads its own block and
the mask, so no parameter sees another group's rows; the losses are summed over all rows,
each group's gradient reaching only its own net.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import cast

import torch
from torch import Tensor, nn

from a3c.policy.actor_critic import ActorCritic, ModelSpec

__all__ = ["GroupedActorCritic"]


class GroupedActorCritic(ActorCritic):
    """An :class:`ActorCritic` per group of ``spec.groups``, routed by the row's first entry."""

    def __init__(self, spec: ModelSpec) -> None:
        nn.Module.__init__(self)  # no trunk or head of its own: the groups' nets have them
        spec.check(ValueError)
        self.spec = spec
        self.normalize_obs, self.separate = spec.normalize_obs, spec.separate
        self.encoder, self.lstm = None, None
        n = spec.obs_dim - 1 - sum(d for d, _ in spec.groups)  # the mask: the largest group's
        self.nets = nn.ModuleList(
            ActorCritic(dataclasses.replace(spec, obs_shape=(d + n,), groups=()))
            for d, _ in spec.groups
        )
        self.dist = self.policies[0].dist
        self.n_pi = n
        starts = torch.cumsum(torch.tensor([1] + [d for d, _ in spec.groups]), 0).tolist()
        mask = list(range(spec.obs_dim - n, spec.obs_dim))
        self.columns = [  # each group's block, then the mask
            torch.tensor(list(range(a, a + d)) + mask)
            for a, (d, _) in zip(starts, spec.groups, strict=False)
        ]

    @property
    def policies(self) -> list[ActorCritic]:
        """Each group's own policy, in the groups' order: its block and the mask in."""
        return [cast("ActorCritic", net) for net in self.nets]

    @torch.no_grad()
    def reset_parameters(self) -> None:
        for net in self.policies:
            net.reset_parameters()

    def _routed(self, obs: Tensor, part: Callable[[ActorCritic, Tensor], Tensor]) -> Tensor:
        """``part(net, rows)`` of each group's net on its rows, back in the rows' order."""
        group = obs[:, 0].long()
        order, outs = [], []
        for g, net in enumerate(self.policies):
            rows = (group == g).nonzero().squeeze(1)
            order.append(rows)
            outs.append(part(net, obs[rows][:, self.columns[g].to(obs.device)]))
        every = torch.cat(order)
        if every.numel() != obs.shape[0]:
            raise ValueError(f"a row's group is not one of 0..{len(self.nets) - 1}")
        return torch.cat(outs)[torch.argsort(every)]

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        out = self._routed(obs, _pi_and_value)
        return out[:, : self.n_pi], out[:, self.n_pi]

    def pi(self, obs: Tensor) -> Tensor:
        return self._routed(obs, lambda net, x: net.pi(x))

    def value(self, obs: Tensor) -> Tensor:
        return self._routed(obs, lambda net, x: net.value(x))

    def set_obs_stats(self, mean: Tensor, std: Tensor) -> None:
        for net, columns in zip(self.policies, self.columns, strict=True):
            net.set_obs_stats(mean[columns], std[columns])


def _pi_and_value(net: ActorCritic, x: Tensor) -> Tensor:
    pi, value = net(x)
    return torch.cat((pi, value.unsqueeze(1)), 1)
