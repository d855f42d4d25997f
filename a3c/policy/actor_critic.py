"""The A3C actor-critic, assembled from parts picked by the env's spaces.

    observation -> encoder -> MLP trunk -> fused head -> (action distribution's inputs, value)

Every worker runs this model on a handful of observations per step, on one CPU thread,
so the forward pass is written for per-call overhead rather than elegance: layers are
applied with ``torch.nn.functional`` instead of through ``nn.Sequential`` (which costs a
``Module.__call__`` per layer), and the policy and value heads are one fused ``Linear``
(one matmul instead of two). The action distribution (:mod:`.distributions`) reads the
head's policy rows; a Gaussian's log-std is a parameter of its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from a3c.actions import ActionSpec, action_spec_from_dict, check_action_spec
from a3c.policy.distributions import ActionDistribution, make_distribution
from a3c.policy.encoders import CENTERS, ENCODERS, conv_encoder
from hogwild.errors import UsageError

__all__ = ["ACTIVATIONS", "OBS_CLIP", "ActorCritic", "GroupedActorCritic", "ModelSpec"]

#: Trunk nonlinearities by name (the name is what checkpoints record).
ACTIVATIONS = {"tanh": torch.tanh, "relu": torch.relu}

#: Normalised observations are clipped to +-OBS_CLIP standard deviations (as VecNormalize).
OBS_CLIP = 10.0
_TRUNK_GAIN = math.sqrt(2.0)
_POLICY_GAIN = 0.01
_VALUE_GAIN = 1.0
#: The logit of an illegal action (SB3-contrib's MaskableCategorical's): probability 0,
#: and no NaN in the entropy where a row's every action is masked.
MASKED_LOGIT = -1e8


@dataclass(frozen=True, eq=True)
class ModelSpec:
    """Everything needed to rebuild an :class:`ActorCritic` (stored in checkpoints).

    ``obs_shape`` is the adapted observation's shape (``(obs_dim,)`` for vectors);
    ``action`` the action space's description (:func:`a3c.envs.spaces.action_spec`).
    """

    obs_shape: tuple[int, ...]
    action: ActionSpec
    obs_dtype: str = "float32"
    hidden: tuple[int, ...] = (128, 128)
    activation: str = "tanh"
    normalize_obs: bool = False
    separate: bool = False
    log_std_init: float = 0.0
    squash: bool = False
    lstm: int = 0  # hidden size of an LSTM core between the trunk and the head (0: none)
    conv: str = "auto"  # the image encoder (encoders.ENCODERS, or auto); vectors ignore it
    center_frames: str = "none"  # images: what each channel is centred on (encoders.CENTERS)
    action_mask: bool = False  # a vector observation's last n entries: the legal actions
    # groups of agents with policies of their own: each's (observation size, actions), laid
    # out as a3c.envs.multiagent.AgentViews lays rows out (a3c.policy.grouped)
    groups: tuple[tuple[int, int], ...] = ()
    # a masked vector observation whose first entries are a board (H, W, C) or (C, H, W):
    # read by a conv net, as an image is
    grid: tuple[int, ...] = ()

    @property
    def image(self) -> bool:
        """Image observations (``uint8 [C, H, W]`` or ``[H, W, C]``): a conv encoder."""
        return len(self.obs_shape) == 3 and self.obs_dtype == "uint8"

    @property
    def channels_last(self) -> bool:
        """``[H, W, C]`` images (Gymnasium's usual layout) have fewer channels than rows
        and columns; Atari frame stacks (4, 84, 84) and MinAtar grids come channel-first."""
        return self.image and self.obs_shape[2] < min(self.obs_shape[:2])

    @property
    def grid_channels_last(self) -> bool:
        """A board's planes come last (PettingZoo's connect four (6, 7, 2), go's (5, 5, 17))
        unless it has fewer of them than rows and columns (OpenSpiel's othello (3, 8, 8))."""
        return not (self.grid and self.grid[0] < min(self.grid[1:]))

    def __post_init__(self) -> None:
        # Accept lists and the action's plain dict (e.g. from JSON) but store tuples and its
        # record; a malformed dict stays as given, for check() to name in its turn.
        object.__setattr__(self, "obs_shape", tuple(self.obs_shape))
        object.__setattr__(self, "hidden", tuple(self.hidden))
        with contextlib.suppress(TypeError):  # else check() names it
            object.__setattr__(self, "grid", tuple(self.grid))
            object.__setattr__(self, "groups", tuple(tuple(g) for g in self.groups))
        if isinstance(self.action, dict):
            with contextlib.suppress(UsageError):
                object.__setattr__(self, "action", action_spec_from_dict(self.action))

    @property
    def obs_dim(self) -> int:
        return math.prod(self.obs_shape)

    def build(self) -> ActorCritic:
        """A freshly initialised model with this architecture."""
        if self.groups:
            return GroupedActorCritic(self)
        return ActorCritic(self)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict; :meth:`from_dict` inverts it."""
        d = dataclasses.asdict(self)
        d["obs_shape"], d["hidden"] = list(self.obs_shape), list(self.hidden)
        d["grid"] = list(self.grid)
        d["groups"] = [list(g) for g in self.groups]
        d["action"] = self.action.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: Any) -> ModelSpec:
        """Parse a checkpoint's model config; malformed input is a :class:`UsageError`.

        Checkpoints written before the policy had parts (``obs_dim``/``n_actions``, a
        categorical MLP) are read too.
        """
        if not isinstance(d, dict):
            raise UsageError(f"checkpoint model config must be a mapping, got {type(d).__name__}")
        d = dict(d)
        if "obs_dim" in d or "n_actions" in d:  # the pre-parts format
            d["obs_shape"] = [d.pop("obs_dim", None)]
            d["action"] = {"type": "discrete", "n": d.pop("n_actions", None)}
        known = {f.name for f in dataclasses.fields(cls)}
        missing = {"obs_shape", "action"} - d.keys()
        if missing:
            raise UsageError(f"checkpoint model config lacks {', '.join(sorted(missing))}")
        unknown = d.keys() - known
        if unknown:
            raise UsageError(f"checkpoint model config has unknown keys {sorted(unknown)}")
        for key in ("obs_shape", "hidden", "groups", "grid"):
            if not isinstance(d.get(key, []), (list, tuple)):
                raise UsageError(f"checkpoint model config: {key} must be a list, got {d[key]!r}")
        if isinstance(d.get("center_frames"), bool):  # before 2026-12-04: True was the mean
            d["center_frames"] = "mean" if d["center_frames"] else "none"
        for key in ("normalize_obs", "separate", "squash", "action_mask"):
            if not isinstance(d.get(key, False), bool):
                raise UsageError(f"checkpoint model config: {key} must be a bool, got {d[key]!r}")
        spec = cls(**d)
        spec.check(UsageError)
        return spec

    def check(self, error: type[Exception] = ValueError) -> None:
        def positive_ints(xs: Any) -> bool:
            return all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in xs)

        if not self.obs_shape or not positive_ints(self.obs_shape):
            raise error(f"observation shape must be positive ints, got {self.obs_shape!r}")
        vector = len(self.obs_shape) == 1 and self.obs_dtype == "float32"
        if not (vector or self.image):
            raise error(
                f"observations {self.obs_dtype} {self.obs_shape}: the policy takes float32 "
                "vectors or uint8 images"
            )
        if self.image and (self.separate or self.normalize_obs):
            raise error(
                "image observations take one shared conv net and no observation "
                "normalisation (use --no-separate-networks --no-normalize-obs)"
            )
        if self.conv != "auto" and self.conv not in ENCODERS:
            raise error(
                f"conv encoder must be auto or one of {sorted(ENCODERS)}, got {self.conv!r}"
            )
        if self.center_frames not in CENTERS or (self.center_frames != "none" and not self.image):
            raise error(
                f"center_frames must be one of {', '.join(CENTERS)} (and none unless the "
                f"observations are images), got {self.center_frames!r}"
            )
        check_action_spec(self.action, error)
        if not positive_ints(self.hidden):
            raise error(f"hidden sizes must be positive ints, got {self.hidden!r}")
        if not isinstance(self.lstm, int) or isinstance(self.lstm, bool) or self.lstm < 0:
            raise error(f"lstm size must be an int >= 0, got {self.lstm!r}")
        if self.lstm and self.separate:
            raise error("an LSTM policy shares its trunk: it cannot have separate networks")
        if self.action_mask:
            n = getattr(self.action, "n", None)
            if not (vector and isinstance(n, int) and self.obs_dim > n) or self.lstm:
                raise error(
                    "an action mask needs a Discrete action, a vector observation longer "
                    "than the mask, and a feed-forward policy"
                )
        if self.activation not in ACTIVATIONS:
            raise error(f"activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}")
        if self.grid and not (
            len(self.grid) == 3
            and positive_ints(self.grid)
            and self.action_mask
            and not (self.groups or self.separate or self.normalize_obs)
            and self.obs_dim == math.prod(self.grid) + getattr(self.action, "n", 0)
        ):
            raise error(
                f"grid {self.grid!r}: a board (3 dimensions) that, with the action mask, makes the "
                "whole observation, read by one shared conv net without normalisation"
            )
        if self.groups:
            sizes = [g for g in self.groups if isinstance(g, tuple) and len(g) == 2]
            n = getattr(self.action, "n", None)
            if not (
                len(sizes) == len(self.groups) >= 2
                and all(positive_ints(g) for g in sizes)
                and self.action_mask
                and n == max(a for _, a in sizes)
                and self.obs_dim == 1 + sum(d for d, _ in sizes) + n
            ):
                raise error(
                    f"groups {self.groups!r}: two or more (observation size, actions) pairs, "
                    "a masked Discrete action of the largest group's size, and an "
                    "observation of the group's index, each group's block and the mask"
                )


def _full_precision(x: Tensor) -> tuple[Tensor, contextlib.AbstractContextManager]:
    """``x`` in fp32 and a context with autocast off, under autocast (a bf16 learning
    pass): the head and the LSTM core stay fp32, so log-probabilities and values are
    within float error of those recorded while acting, and only the encoder and trunk,
    where the time goes, run in bf16. Otherwise ``x`` as it is and no context."""
    device = x.device.type
    if torch.is_autocast_enabled(device):
        return x.float(), torch.autocast(device, enabled=False)
    return x, contextlib.nullcontext()


class ActorCritic(nn.Module):
    """An actor-critic: an encoder (normalised vectors, or a conv net for images), an MLP
    trunk, an optional LSTM core, and fused heads; with vectors, optionally separate
    policy and value nets.

    Initialisation follows CleanRL/SB3: orthogonal weights, zero biases, gain sqrt(2) in
    the trunk, 0.01 for the policy head (so the initial policy is near uniform, or a
    Gaussian's mean near 0) and 1.0 for the value head.

    The default trunk activation is tanh: ReLU needed twice the steps on CartPole
    (docs/tuning.md).

    Shared (``separate=False``): parameters live in ``trunk`` (a list of ``Linear``) and
    ``head``, a single ``Linear(hidden[-1], n + 1)`` whose first ``n`` output rows feed
    the action distribution and whose last row is the state value.
    Separate (``separate=True``, SB3's default for A2C/PPO): the value net ``value_trunk``
    has its own layers of the same sizes, so a large value loss cannot swamp the policy's
    features; ``head`` still holds both output layers (fused), applied block-wise.

    Observation normalisation (``normalize_obs``) uses the buffers ``obs_mean`` and
    ``obs_std``: not parameters, so they stay out of the flat vector the optimizer steps;
    workers set them from the shared running statistics, checkpoints keep them.
    """

    obs_mean: Tensor  # buffers, registered with normalize_obs
    obs_std: Tensor

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        spec.check(ValueError)
        self.spec = spec
        obs_dim = spec.obs_dim
        self._act = ACTIVATIONS[spec.activation]
        self.normalize_obs = spec.normalize_obs
        self.separate = spec.separate
        if spec.normalize_obs:
            self.register_buffer("obs_mean", torch.zeros(obs_dim))
            self.register_buffer("obs_std", torch.ones(obs_dim))

        self.dist: ActionDistribution = make_distribution(
            spec.action, spec.log_std_init, spec.squash
        )
        self.n_pi = self.dist.n_inputs
        self.encoder = None
        if spec.image:  # the conv net ends in its own FC layer: no MLP trunk after it
            self.encoder = conv_encoder(
                spec.conv,
                spec.obs_shape,
                channels_last=spec.channels_last,
                center=spec.center_frames,
            )
            sizes: tuple[int, ...] = (self.encoder.out_features,)
        elif spec.grid:  # 0/1 cells: no 1/255 scale
            self.encoder = conv_encoder(
                spec.conv, spec.grid, channels_last=spec.grid_channels_last, scale=1.0
            )
            sizes = (self.encoder.out_features,)
        else:
            sizes = (obs_dim, *spec.hidden)
        self.trunk = nn.ModuleList(
            nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:], strict=True)
        )
        if spec.separate:
            self.value_trunk = nn.ModuleList(
                nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:], strict=True)
            )
        self.lstm = nn.LSTMCell(sizes[-1], spec.lstm) if spec.lstm else None
        self.head = nn.Linear(spec.lstm or sizes[-1], self.n_pi + 1)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """(Re)initialise all weights as described in the class docstring."""
        for layer in [*self.trunk, *getattr(self, "value_trunk", ())]:
            nn.init.orthogonal_(layer.weight, gain=_TRUNK_GAIN)
            nn.init.zeros_(layer.bias)
        # Orthogonal init of each head separately, then written into the fused weight.
        n = self.n_pi
        policy_w = torch.empty(n, self.head.in_features)
        value_w = torch.empty(1, self.head.in_features)
        nn.init.orthogonal_(policy_w, gain=_POLICY_GAIN)
        nn.init.orthogonal_(value_w, gain=_VALUE_GAIN)
        self.head.weight[:n].copy_(policy_w)
        self.head.weight[n:].copy_(value_w)
        nn.init.zeros_(self.head.bias)
        if self.lstm is not None:  # CleanRL's LSTM agents: orthogonal weights, zero biases
            for name, p in self.lstm.named_parameters():
                (nn.init.zeros_ if "bias" in name else nn.init.orthogonal_)(p)

    @property
    def first_conv(self) -> nn.Module | None:
        """The conv encoder's first layer (ReLU after it), where a dead start shows first;
        None without one."""
        return None if self.encoder is None else self.encoder.conv[0]

    def _features(self, obs: Tensor, trunk: nn.ModuleList) -> Tensor:
        if self.encoder is not None:
            if self.spec.grid:
                obs = obs[:, : math.prod(self.spec.grid)].reshape(-1, *self.spec.grid)
            return self.encoder(obs)
        x = obs
        if self.normalize_obs:
            x = (x - self.obs_mean).div_(self.obs_std).clamp_(-OBS_CLIP, OBS_CLIP)
        act = self._act
        for layer in cast("Iterable[nn.Linear]", trunk):
            x = act(F.linear(x, layer.weight, layer.bias))
        return x

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """Map observations ``[B, *obs_shape]`` to ``(pi [B, n], value [B])``, where ``pi``
        is what :attr:`dist` reads (logits, or a Gaussian's mean).

        With a shared trunk both outputs are views of one head output (not contiguous).
        A recurrent model refuses: without its core it would act as another policy (or,
        where the core's size is the trunk's, silently as one without memory).
        """
        if self.lstm is not None:
            raise TypeError("an LSTM policy acts with act_recurrent and learns with unroll")
        n = self.n_pi
        if not self.separate:
            out = self._head(self._features(obs, self.trunk))
            return self._legal(out[:, :n], obs), out[:, n]
        return self.pi(obs), self.value(obs)

    def pi(self, obs: Tensor) -> Tensor:
        """The policy's outputs alone (acting needs no value: with separate nets, half the cost)."""
        n = self.n_pi
        if not self.separate:
            return self(obs)[0]
        return self._legal(self._head(self._features(obs, self.trunk), slice(n)), obs)

    def _legal(self, logits: Tensor, obs: Tensor) -> Tensor:
        """``logits`` with the actions the observation's mask forbids at :data:`MASKED_LOGIT`."""
        if not self.spec.action_mask:
            return logits
        legal = obs[:, -self.n_pi :] > 0.5
        return logits.masked_fill(~legal, MASKED_LOGIT)

    def value(self, obs: Tensor) -> Tensor:
        n = self.n_pi
        if not self.separate:
            return self(obs)[1]
        return self._head(self._features(obs, self.value_trunk), slice(n, None)).squeeze(-1)

    def _head(self, x: Tensor, rows: slice | None = None) -> Tensor:
        """The fused head's output (its ``rows``), in fp32 even under autocast."""
        weight: Tensor = self.head.weight
        bias: Tensor = self.head.bias
        if rows is not None:
            weight, bias = weight[rows], bias[rows]
        x, fp32 = _full_precision(x)
        with fp32:
            return F.linear(x, weight, bias)

    def act(self, obs: Tensor, greedy: bool = False) -> Tensor:
        """Actions for a batch of observations, as stored in a rollout (see ``dist.to_env``)."""
        pi = self.pi(obs)
        return self.dist.greedy(pi) if greedy else self.dist.sample(pi)

    def act_scored(self, obs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(actions, their log-probabilities, values)``: what APPO learns against,
        recorded while acting instead of in a second pass over the rollout."""
        pi, v = self(obs)
        actions = self.dist.sample(pi)
        return actions, self.dist.log_prob_entropy(pi, actions)[0], v

    # -- the recurrent core ---------------------------------------------------------
    @property
    def recurrent(self) -> bool:
        return self.lstm is not None

    def empty_obs(self, *lead: int) -> Tensor:
        """A buffer for ``lead`` x one observation, laid out as the model learns from it:
        ``(C, H, W)`` images channel-last in memory, as the conv net learns in, so that the
        minibatches gathered from it need no conversion (4.3 of Pong's ~11 ms of input
        work per 128 frames, every epoch)."""
        shape, dtype = self.spec.obs_shape, getattr(torch, self.spec.obs_dtype)
        if not self.spec.image or self.spec.channels_last:
            return torch.empty(*lead, *shape, dtype=dtype)
        c, h, w = shape
        return torch.empty(*lead, h, w, c, dtype=dtype).movedim(-1, -3)

    def initial_state(
        self, batch: int, device: torch.device | str | None = None
    ) -> tuple[Tensor, Tensor]:
        """The LSTM's zero state for ``batch`` envs: ``(h, c)``, each ``[batch, size]``."""
        size = self.spec.lstm
        return torch.zeros(batch, size, device=device), torch.zeros(batch, size, device=device)

    def act_recurrent(
        self, obs: Tensor, state: tuple[Tensor, Tensor], greedy: bool = False
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """Actions and the LSTM state after ``obs`` (one step of each env)."""
        pi, state = self.pi_recurrent(obs, state)
        return (self.dist.greedy(pi) if greedy else self.dist.sample(pi)), state

    def pi_recurrent(
        self, obs: Tensor, state: tuple[Tensor, Tensor]
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """The policy's outputs (what :attr:`dist` reads) and the LSTM state after ``obs``."""
        assert self.lstm is not None, "pi_recurrent is for an LSTM policy"
        x, fp32 = _full_precision(self._features(obs, self.trunk))
        with fp32:
            h, c = self.lstm(x, state)
        return self._head(h, slice(self.n_pi)), (h, c)

    def unroll(
        self,
        obs: Tensor,
        state: tuple[Tensor, Tensor],
        dones: Tensor,
        next_obs: Tensor,
        truncated: Tensor,
        final_obs: Tensor,
    ) -> tuple[Tensor, Tensor]:
        """Policy outputs and values over a rollout, in the layout the loss reads for a
        feed-forward model: ``[T*K]`` rollout rows, then ``[K]`` bootstrap rows, then the
        ``[M]`` truncated episodes' final observations (in ``truncated``'s row-major order).

        The state starts at ``state`` (the rollout's first, detached: truncated BPTT) and is
        zeroed for an env after a step that ended its episode, as the worker did; a final
        observation continues its own episode's state.
        """
        M = final_obs.shape[0]
        feats = self._features(torch.cat((obs.flatten(0, 1), next_obs, final_obs)), self.trunk)
        feats, fp32 = _full_precision(feats)
        with fp32:
            return self._unroll_core(feats, state, dones, truncated, M)

    def _unroll_core(
        self, feats: Tensor, state: tuple[Tensor, Tensor], dones: Tensor, truncated: Tensor, M: int
    ) -> tuple[Tensor, Tensor]:
        """:meth:`unroll` from the encoded rows ``feats`` on."""
        assert self.lstm is not None, "unroll is for an LSTM policy"
        T, K = dones.shape
        steps = feats[: T * K].view(T, K, -1)
        finals = feats[T * K + K :]
        h, c = state
        outs, ended, m = [], [], 0
        keep = (~dones).unsqueeze(-1).to(feats.dtype)
        for t in range(T):
            h, c = self.lstm(steps[t], (h, c))
            outs.append(h)
            if M and truncated[t].any():
                idx = truncated[t].nonzero().squeeze(1)
                k = idx.numel()
                ended.append(self.lstm(finals[m : m + k], (h[idx], c[idx]))[0])
                m += k
            h, c = h * keep[t], c * keep[t]
        outs.append(self.lstm(feats[T * K : T * K + K], (h, c))[0])
        out = self._head(torch.cat([*outs, *ended]))
        return out[:, : self.n_pi], out[:, self.n_pi]

    def set_obs_stats(self, mean: Tensor, std: Tensor) -> None:
        """Install observation statistics (from :class:`a3c.learning.normalize.RunningMeanStd`)."""
        self.obs_mean.copy_(mean)
        self.obs_std.copy_(std)


class GroupedActorCritic(ActorCritic):
    """An :class:`ActorCritic` per group of ``spec.groups``, routed by the row's first entry.

    ``--agent-groups prefix`` gives ``speaker_*`` and ``listener_*`` a policy each. The
    engine steps, shares and checkpoints one model, so this one holds a net per group and
    sends each row to its group's: a row (:class:`a3c.envs.multiagent.AgentViews`) is the
    group's index, one block of observation per group, and the legal actions of the
    largest group. A group's net reads its own block and the mask, so no parameter sees
    another group's rows; the losses are summed over all rows, each group's gradient
    reaching only its own net.
    """

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
