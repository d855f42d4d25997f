"""The model every worker steps in place, its shared optimizer and running statistics:
built from the config, restored from a checkpoint, and what a checkpoint keeps of them."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from a3c.actions import ActionSpec
from a3c.envs.spaces import EnvSpaces
from a3c.learning.normalize import RunningMeanStd, mean_std_of
from a3c.learning.opponents import SnapshotPool
from a3c.policy import ModelSpec
from a3c.run.config import A3CConfig
from hogwild.errors import UsageError
from hogwild.evaluator import Snapshot
from hogwild.flat import flatten_buffers, flatten_parameters
from hogwild.optim import OPTIMIZERS, SharedOptimizer


def make_optimizer(cfg: A3CConfig, flat: torch.Tensor, workers: int = 1) -> SharedOptimizer:
    """The run's optimizer (``--optimizer``, its rate and epsilon) over ``flat``."""
    eps = {} if cfg.optimizer_eps is None else {"eps": cfg.optimizer_eps}
    return OPTIMIZERS[cfg.optimizer](flat, lr=cfg.lr, num_workers=workers, **eps)


def reads_with_conv(cfg: A3CConfig, spaces: EnvSpaces) -> bool:
    """Whether the policy ``cfg`` asks for reads the env's observations with a conv net:
    images, or a game's board (in front of its action mask) unless ``--policy mlp``."""
    kind = spaces.kind
    wanted = {"mlp": False, "cnn": True}.get(cfg.policy, kind != "vectors")
    if kind != "a board" and wanted != (kind == "images"):
        raise UsageError(f"--policy {cfg.policy} does not fit {cfg.env}'s observations ({kind})")
    return wanted


def model_spec(cfg: A3CConfig, spaces: EnvSpaces) -> ModelSpec:
    """The policy the config asks for, on the env's (adapted) spaces. A conv net is one
    shared net read raw: a preset's separate nets and normalisation give way to it."""
    conv = reads_with_conv(cfg, spaces)
    grid = spaces.grid if conv else ()
    spec = ModelSpec(
        spaces.obs_shape,
        spaces.action,
        spaces.obs_dtype,
        cfg.hidden,
        cfg.activation,
        cfg.normalize_obs and not conv,  # a conv net reads pixels (by 1/255) or cells raw
        cfg.separate_networks and not conv,
        cfg.log_std_init,
        cfg.squash_actions,
        cfg.lstm_size if cfg.policy == "lstm" else 0,
        cfg.conv,
        "background" if cfg.center_frames and spaces.kind == "images" else "none",
        spaces.action_mask,
        spaces.groups,
        grid,
    )
    spec.check(UsageError)
    return spec


def as_built(cfg: A3CConfig, spec: ModelSpec) -> A3CConfig:
    """``cfg`` with the net's settings as ``spec`` built them (a conv net is one net read
    raw, whatever a preset said), so that config.json says what ran and its settings can
    be given again."""
    return dataclasses.replace(
        cfg, normalize_obs=spec.normalize_obs, separate_networks=spec.separate
    )


def _shown(value: Any) -> Any:
    """A field of a :class:`ModelSpec` as a message names it: the action as its plain dict."""
    return value.to_dict() if isinstance(value, ActionSpec) else value


class SharedModel:
    """The model (``flat``: its parameters as one vector), the shared optimizer and the
    running statistics (observations, returns), one row per worker."""

    def __init__(self, cfg: A3CConfig, spaces: EnvSpaces) -> None:
        self.spec = model_spec(cfg, spaces)
        normalize_obs = self.spec.normalize_obs
        per_column = bool(self.spec.groups)  # a group's rows count for its own columns alone
        dim = self.spec.obs_dim
        self.obs_rms = RunningMeanStd(cfg.workers, dim, per_column) if normalize_obs else None
        self.return_rms = RunningMeanStd(cfg.workers, 1) if cfg.normalize_reward else None
        torch.manual_seed(cfg.seed)  # the initial model; workers seed themselves
        self.model = self.spec.build()
        self.flat = flatten_parameters(self.model)
        self.buffers = flatten_buffers(self.model)
        self.optimizer = make_optimizer(cfg, self.flat, cfg.workers)
        self.snapshots = SnapshotPool.of(self.model, cfg.workers) if cfg.snapshot_games else None

    def statistics(self) -> dict[str, RunningMeanStd]:
        """The running statistics in use, by the names checkpoints give them."""
        named = {"obs_rms": self.obs_rms, "return_rms": self.return_rms}
        return {k: v for k, v in named.items() if v is not None}

    def share_memory(self) -> None:
        self.flat.share_memory_()
        self.optimizer.share_memory()
        for rms in self.statistics().values():
            rms.share_memory()
        if self.snapshots is not None:
            self.snapshots.share_memory()

    def restore(self, ckpt: dict[str, Any], path: str) -> dict[str, torch.Tensor]:
        """Model, optimizer, statistics and opponents (``--snapshot-games``) from a checkpoint;
        the statistics as saved."""
        saved = ModelSpec.from_dict(ckpt["model_spec"])
        if saved != self.spec:
            differs = ", ".join(
                f"{f.name} {_shown(getattr(saved, f.name))!r} "
                f"(this run: {_shown(getattr(self.spec, f.name))!r})"
                for f in dataclasses.fields(saved)
                if getattr(saved, f.name) != getattr(self.spec, f.name)
            )
            raise UsageError(
                f"{path}: its policy does not fit this run's (checkpoint of "
                f"{ckpt.get('env_id', 'an unknown env')}): {differs}"
            )
        try:
            self.model.load_state_dict(ckpt["model"])
            self.optimizer.load_state_dict(ckpt["optimizer"])
        except (RuntimeError, ValueError, KeyError) as e:
            raise UsageError(f"{path}: cannot restore ({str(e).splitlines()[0]})") from None
        statistics = {}
        for name, rms in self.statistics().items():
            if name not in ckpt:
                raise UsageError(f"{path}: checkpoint has no {name} (was {name} off in that run?)")
            try:
                rms.load(ckpt[name])
            except (TypeError, ValueError) as e:
                raise UsageError(f"{path}: bad {name}: {e}") from None
            statistics[name] = ckpt[name]
        if self.snapshots is not None and "snapshots" in ckpt:  # else: none kept yet
            try:
                self.snapshots.load(ckpt["snapshots"])
            except (TypeError, ValueError, KeyError, AttributeError) as e:
                raise UsageError(f"{path}: bad snapshots: {e}") from None
        return statistics

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps of it beside the model (copies, not views)."""
        return {
            "optimizer": self.optimizer.state_dict(),
            "model_spec": self.spec.to_dict(),
            **{k: v.state() for k, v in self.statistics().items()},
            **({} if self.snapshots is None else {"snapshots": self.snapshots.state()}),
        }

    def sync_obs_stats(self, state: dict[str, Any]) -> None:
        """The model's observation mean/std buffers from a checkpoint ``state``'s
        statistics, so that the two always agree."""
        if self.obs_rms is not None:
            self.model.set_obs_stats(*mean_std_of(state["obs_rms"], self.spec.obs_dim))

    def snapshot_model(self, snapshot: Snapshot) -> dict[str, torch.Tensor]:
        """The state dict of an evaluated snapshot's parameters (and buffers)."""
        model = self.spec.build()
        flatten_parameters(model).copy_(snapshot.params)
        if snapshot.buffers is not None:
            flatten_buffers(model).copy_(snapshot.buffers)
        return model.state_dict()

    def local_statistics(self) -> torch.Tensor | None:
        """This node's statistics as one vector, for the other nodes to merge."""
        stats = list(self.statistics().values())
        return torch.cat([rms.local() for rms in stats]) if stats else None

    def merge_remote(self, gathered: list[torch.Tensor] | None, rank: int) -> None:
        """Hold the other nodes' statistics (``gathered``: every node's, by rank)."""
        if not gathered:
            return
        others = [g for r, g in enumerate(gathered) if r != rank]
        offset = 0
        for rms in self.statistics().values():
            n = rms.rows.shape[1]
            rms.set_remote([g[offset : offset + n] for g in others])
            offset += n
