"""How the rate and the loss's decaying settings move with the run's env steps.

Every decay is linear over the run's step budget (all nodes' steps, so every node follows
the same schedule); a resumed run goes on from where its decays were to the end of its
new budget (:func:`decay_done`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from a3c.learning.settings import UpdateSettings

__all__ = ["Horizon", "Schedules", "decay_done"]


def decay_done(
    steps: int, total_steps: int, start_steps: int = 0, start_done: float = 0.0
) -> float:
    """The share of the linear decays done after ``steps`` env steps: ``steps / total_steps``,
    or for a resumed run the way on from where its decays were (``start_done`` at
    ``start_steps``) to the end of its budget: a larger --total-steps stretches what is left
    of the decay instead of raising the rate again."""
    span = total_steps - start_steps
    if span <= 0:
        return 1.0
    return min(start_done + (1.0 - start_done) * max(steps - start_steps, 0) / span, 1.0)


@dataclass(frozen=True)
class Horizon:
    """The steps the decays run over: to ``total_steps``, from ``start_done`` of the way at
    ``start_steps`` (a resumed run's; a fresh run starts from none of it at 0)."""

    total_steps: int
    start_steps: int = 0
    start_done: float = 0.0

    def done(self, steps: int) -> float:
        return decay_done(steps, self.total_steps, self.start_steps, self.start_done)


@dataclass(frozen=True)
class Schedules:
    """The learning rate and the update's entropy coefficient and clip range after a given
    number of env steps: each from its start to its ``*_final`` value (none: constant)
    along the horizon; the rate also warms up from 0 over ``lr_warmup_steps`` (0: none)."""

    horizon: Horizon
    lr: float
    lr_final: float | None = None
    lr_warmup_steps: int = 0
    entropy_coef_final: float | None = None
    clip_range_final: float | None = None

    def learning_rate(self, steps: int) -> float:
        lr = self.decayed(self.lr, self.lr_final, steps)
        if self.lr_warmup_steps:
            lr *= min((steps + 1) / self.lr_warmup_steps, 1.0)
        return lr

    def update(self, start: UpdateSettings, steps: int) -> UpdateSettings:
        """``start`` (the settings at step 0) with its decaying settings where they are."""
        if self.entropy_coef_final is None and self.clip_range_final is None:
            return start
        return replace(
            start,
            entropy_coef=self.decayed(start.entropy_coef, self.entropy_coef_final, steps),
            clip_range=self.decayed(start.clip_range, self.clip_range_final, steps),
        )

    def decayed(self, start: float, final: float | None, steps: int) -> float:
        """``start``, or with a ``final`` value the linear way from it to ``final``."""
        if final is None:
            return start
        return start + (final - start) * self.horizon.done(steps)
