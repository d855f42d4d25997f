"""Where a run starts: from nothing, or from a checkpoint (``--resume``).

:func:`restore` puts a checkpoint's model, optimizer, statistics and random generators
back and returns what the run goes on from as one frozen record, :class:`Resumed`; a
fresh run gets the same record from :meth:`Resumed.fresh`, so the trainer has one path.
The config is only read: what the resume decides (the decays' horizon above all) is in
the record, and the trainer passes it on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from a3c.learning.schedules import Horizon, decay_done
from a3c.run.config import A3CConfig
from a3c.run.record import RunHistory, saved_best_eval, set_rng_state
from a3c.run.shared_model import SharedModel
from hogwild.checkpoint import load_checkpoint
from hogwild.errors import UsageError
from hogwild.run import CHECKPOINT

__all__ = ["BEST", "Resumed", "restore"]

#: The checkpoint of the best evaluation, beside the run's own checkpoint.pt.
BEST = "best.pt"

#: Flags that a resume in the run's own folder cannot follow (the folder is the saved one).
IN_PLACE = ("logdir", "run_name")


@dataclass(frozen=True)
class Resumed:
    """What a run starts from.

    ``run_dir``: the folder to go on in (None: a new one, for a fresh run or a branch);
    ``steps``: the env steps already taken; ``history``: the run's record, which the
    trainer keeps up to date from here; ``horizon``: the decays', which go on where the
    saved run had them; ``elapsed``: seconds of the earlier sessions; ``branched_from``:
    the checkpoint a branch starts from; ``branch_keeps_best``: whether it is an evaluated
    model (best.pt) whose score and file the branch keeps; ``ignored``: the flags a resume
    in place cannot follow, as the user gave them; ``statistics``: the running statistics
    as saved (the nodes but rank 0 hold them as the other nodes').
    """

    run_dir: Path | None
    steps: int
    history: RunHistory
    horizon: Horizon
    elapsed: float = 0.0
    branched_from: str | None = None
    branch_keeps_best: bool = False
    ignored: tuple[str, ...] = ()
    statistics: Mapping[str, torch.Tensor] = field(default_factory=dict)

    @classmethod
    def fresh(cls, total_steps: int) -> Resumed:
        """A run from nothing: no steps, an empty record, decays over the whole budget."""
        return cls(None, 0, RunHistory(), Horizon(total_steps))


def restore(path: str, cfg: A3CConfig, shared: SharedModel) -> Resumed:
    """Put the checkpoint at ``path`` back into ``shared`` and the random generators; what
    the run goes on from.

    checkpoint.pt goes on in its own folder. Any other file (best.pt, a renamed copy)
    branches into a new one: its folder may hold a newer run, which a resume from an older
    checkpoint must not overwrite. An evaluated model (best.pt) brings its score along as
    the branch's best; a copy of a checkpoint.pt does not, as the parent's best.pt is not
    in the branch's folder.
    """
    ckpt = load_checkpoint(path, required=("model", "optimizer", "model_spec", "env_steps"))
    statistics = shared.restore(ckpt, path)
    history = RunHistory()
    try:
        if "history" in ckpt:
            history = RunHistory.from_state(ckpt["history"])
        if "rng" in ckpt:
            set_rng_state(ckpt["rng"])
    except (TypeError, ValueError, KeyError, RuntimeError) as e:
        raise UsageError(f"{path}: bad run history or random state ({e})") from None
    steps = int(ckpt["env_steps"])
    saved = ckpt.get("config", {})
    elapsed = float(ckpt.get("wall_time", 0.0))
    horizon = Horizon(cfg.total_steps, steps, _saved_decay_done(saved, steps, cfg.total_steps))
    if Path(path).name == CHECKPOINT:
        folder = Path(path).parent
        history.best_eval = max(history.best_eval, saved_best_eval(folder / BEST))
        ignored = tuple(
            f"--{name.replace('_', '-')} {getattr(cfg, name)}"
            for name in IN_PLACE
            if name in saved and getattr(cfg, name) != saved[name]
        )
        return Resumed(
            folder, steps, history, horizon, elapsed, ignored=ignored, statistics=statistics
        )
    keeps_best = "eval_mean_return" in ckpt
    if keeps_best:
        history.best_eval, history.best_eval_step = float(ckpt["eval_mean_return"]), steps
    else:
        history.best_eval, history.best_eval_step = -math.inf, None
    return Resumed(
        None, steps, history, horizon, elapsed,
        branched_from=path, branch_keeps_best=keeps_best, statistics=statistics,
    )  # fmt: skip


def _saved_decay_done(saved: Mapping[str, Any], steps: int, total_steps: int) -> float:
    """How far the saved run's decays were at its last step: along its own budget, from
    where its own session started them (``decay_start_*``, which its config records)."""
    return decay_done(
        steps,
        saved.get("total_steps", total_steps),
        saved.get("decay_start_steps", 0),
        saved.get("decay_start_done", 0.0),
    )
