"""A worker's side of learning: each rollout into lock-free steps of the shared optimizer.

The run's algorithm (:data:`a3c.learning.algorithms.ALGORITHMS`) makes the steps from a
rollout (A3C one, APPO ``epochs x minibatches``); each goes through :meth:`Learner.step`:
the gradient of exactly its loss, a global-norm clip, one lock-free step of the shared
optimizer, and its figures, then the learner's own, summed by name into the worker's
:class:`~a3c.learning.metrics.Tally`. With ``amp="bf16"`` the forward passes that learn
run under CPU autocast (the policy's encoder and trunk in bf16, its head and LSTM core in
fp32); the backward pass, the gradient and the step stay fp32. Acting is not affected.
A CUDA learner (``--algo ppo``) also takes ``fp16``: the loss scaled by a ``GradScaler``,
the gradient unscaled before the clip, a step with an overflow skipped.
"""

from __future__ import annotations

import numpy as np
import torch

from a3c.learning.algorithm import LearnerSettings
from a3c.learning.algorithms import ALGORITHMS
from a3c.learning.dead_units import DeadUnits
from a3c.learning.metrics import SUM, Metric, Tally
from a3c.learning.rollout import Rollout
from a3c.policy import ActorCritic
from hogwild.flat import attach_flat_grad, clip_grad_norm_
from hogwild.optim import SharedOptimizer
from hogwild.precision import Precision, resolve_amp

__all__ = ["COUNTS", "STEP_FIGURES", "Learner", "LearnerSettings", "NonFiniteUpdates"]

#: What the learner counts, whatever the algorithm.
COUNTS = (
    Metric("updates", None, SUM),
    Metric("skipped", "charts/skipped_updates", SUM),
)
#: What each step adds after its loss's figures, in this order.
STEP_FIGURES = (
    Metric("grad_norm", "losses/grad_norm"),
    Metric("lr", "charts/learning_rate"),
    Metric("dead_units", "charts/dead_units"),
)


class NonFiniteUpdates(RuntimeError):
    pass


class Learner:
    """Turns each rollout into lock-free steps of the shared optimizer, as its algorithm
    says, and sums their figures into ``stats`` by name."""

    def __init__(
        self,
        settings: LearnerSettings,
        *,
        model: ActorCritic,
        local: torch.Tensor,
        shared: torch.Tensor,
        optimizer: SharedOptimizer,
        rank: int,
        stats: Tally,
    ) -> None:
        self.settings, self.model, self.local, self.shared = settings, model, local, shared
        self.optimizer, self.rank, self.stats = optimizer, rank, stats
        self.algorithm = ALGORITHMS[settings.algo]
        self.grad = attach_flat_grad(model, local)
        self.precision = Precision(resolve_amp(settings.amp), local.device.type)
        self.dead = DeadUnits(getattr(model, "first_conv", None))
        figures = (*self.algorithm.figures.names(), *(m.name for m in STEP_FIGURES))
        self._add_figures = stats.adder(figures)
        self.nonfinite_in_row = 0
        self.steps = self.algorithm.steps(self)

    def learn(self, rollout: Rollout, steps: int) -> None:
        """Learn from ``rollout``; ``max_nonfinite`` rollouts in a row that were not
        learned from in full (a step skipped) fail the worker. Counted per rollout, not per
        step: APPO takes 16 to 320 steps on one, where A3C's one step would fail the worker
        ten times sooner on the same bad data; and a bad sample vetoes A3C's whole step, so
        one skipped step of APPO's is enough to count its rollout."""
        s = self.settings
        lr = s.schedules.learning_rate(steps)
        finite = self.steps(rollout, s.schedules.update(s.update, steps), lr)
        if finite is None:  # held for the next rollouts' step: counted with it
            return
        if finite:
            self.nonfinite_in_row = 0
            return
        self.nonfinite_in_row += self.steps.rollouts_per_step
        if self.nonfinite_in_row >= s.max_nonfinite:
            raise NonFiniteUpdates(
                f"{self.nonfinite_in_row} rollouts in a row with a non-finite loss or gradient"
            )

    def step(self, loss: torch.Tensor, lr: float, figures: list, held: bool = False) -> bool:
        """One lock-free step with exactly this loss's gradient (``held``: plus the earlier
        rollouts' that the algorithm left in ``grad``), unless it is not finite (then
        skipped: False); ``figures`` (then the grad norm, lr and dead units' share) are
        summed into ``stats``."""
        if not held:
            self.grad.zero_()
        self.precision.backward(loss)
        self.precision.unscale(self.grad)
        grad_norm = clip_grad_norm_(self.grad, self.settings.max_grad_norm)
        # Only the loss and the gradient can veto an update, never a logged figure.
        finite = bool(np.isfinite(grad_norm) and np.isfinite(loss.item()))
        if finite:
            self.optimizer.step(self.grad, self.rank, lr)
            self.stats.add("updates")
            self._add_figures((*figures, grad_norm, lr, self.dead.share))
        else:
            self.stats.add("skipped")
        self.precision.update()
        return finite
