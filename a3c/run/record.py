"""What a run has achieved and how it ended: kept in every checkpoint, so that a resumed
run goes on with the same record (and a poor first evaluation cannot replace ``best.pt``)."""

from __future__ import annotations

import dataclasses
import logging
import math
import random
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from hogwild.checkpoint import load_checkpoint
from hogwild.errors import UsageError

log = logging.getLogger(__name__)


class Solved(NamedTuple):
    """When the 100-episode training mean first reached the target (``target``: the one
    it reached; None in checkpoints from before it was kept)."""

    seconds: float
    env_steps: int
    target: float | None = None


class BestMean(NamedTuple):
    """The best 100-episode training mean so far, and when it was reached."""

    mean: float
    seconds: float
    env_steps: int


@dataclasses.dataclass
class RunHistory:
    """The run's record so far; times are seconds of the whole run (all sessions)."""

    best_eval: float = -math.inf
    best_eval_step: int | None = None
    solved_at: Solved | None = None
    best_100: BestMean | None = None
    entropy_warned: bool = False
    flat_values_warned: bool = False
    recent: list[float] = dataclasses.field(default_factory=list)  # the last 100 returns
    episodes: int = 0

    def state(self) -> dict[str, Any]:
        """Plain types only: a ``weights_only`` load refuses our named tuples."""
        state = dataclasses.asdict(self)
        state["solved_at"] = _plain(self.solved_at)
        state["best_100"] = _plain(self.best_100)
        return state

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> RunHistory:
        names = {f.name for f in dataclasses.fields(cls)}
        history = cls(**{k: v for k, v in state.items() if k in names})
        history.solved_at = None if history.solved_at is None else Solved(*history.solved_at)
        history.best_100 = None if history.best_100 is None else BestMean(*history.best_100)
        return history


@dataclasses.dataclass
class A3CResult:
    """How a run went, as :func:`a3c.api.train` returns it."""

    run_dir: Path | None
    env_steps: int
    wall_time: float
    mean_return_100: float
    solved_at: Solved | None
    best_mean_100: BestMean | None
    best_eval: float
    exit_code: int


def saved_best_eval(path: Path) -> float:
    """The score behind the run's ``best.pt`` (-inf if none): a record that a checkpoint
    taken before it was written does not know of, and a resume must not undercut."""
    if not path.exists():
        return -math.inf
    try:
        return float(load_checkpoint(path).get("eval_mean_return", -math.inf))
    except UsageError as e:
        log.warning("ignoring the unreadable %s: %s", path, e)
        return -math.inf


def rng_state() -> dict[str, Any]:
    """The main process's random generators, in types a ``weights_only`` load accepts."""
    state = np.random.get_state(legacy=True)
    assert isinstance(state, tuple)  # numpy's global generator is an MT19937
    name, keys, pos, has_gauss, cached = state
    return {
        "torch": torch.get_rng_state(),
        "numpy": (name, keys.tolist(), pos, has_gauss, cached),
        "random": random.getstate(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    version, internal, gauss = state["random"]
    random.setstate((version, tuple(internal), gauss))


def _plain(value: tuple | None) -> tuple | None:
    return None if value is None else tuple(value)
