"""The settings of one update step, A3C's or APPO's, in one record both losses read.

The learner gets them from the run's configuration (:func:`a3c.run.worker.learner_settings`,
which decides the defaults that depend on the algorithm) and moves the decaying ones along
:mod:`.schedules`; nothing in :mod:`a3c.learning` reads the configuration itself.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["UpdateSettings"]


@dataclass(frozen=True)
class UpdateSettings:
    gamma: float = 0.99
    gae_lambda: float = 1.0
    value_coef: float = 0.5
    entropy_coef: float = 0.0
    normalize_advantage: bool = False  # A3C: per rollout; APPO: per minibatch
    value_loss: str = "mse"  # or "huber" (smooth L1, delta 1: SB3's DQN / rl_games' clip)
    clip_range: float = 0.2  # APPO: the clip of the probability ratio (A3C has none)
    clip_range_vf: float | None = None  # APPO: clip the value's move from the behaviour's
