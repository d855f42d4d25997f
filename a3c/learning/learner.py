"""A worker's side of learning: each rollout into lock-free steps of the shared optimizer.

A3C: one forward pass with autograd over the whole rollout (plus the bootstrap and final
observations), GAE(lambda) targets, the actor-critic loss, a global-norm clip, and one
lock-free step with exactly this update's gradient (a rollout of fewer than ``MIN_BATCH``
samples waits for the next ones'). APPO: the same targets once, then ``epochs x
minibatches`` clipped steps (:mod:`a3c.learning.ppo`), each on fresh shared weights.
Each step's figures are summed, by name, into the telemetry's slots. With ``amp="bf16"``
the forward passes that learn run under CPU autocast (the policy's encoder and trunk in
bf16, its head and LSTM core in fp32); the backward pass, the gradient and the step stay
fp32. Acting is not affected.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from a3c.learning.dead_units import DeadUnits
from a3c.learning.figures import Figures
from a3c.learning.loss import A3CFigures, a3c_loss
from a3c.learning.ppo import PPOFigures, behaviour, minibatches, ppo_loss, refresh_targets
from a3c.learning.rollout import Rollout
from a3c.learning.schedules import Schedules
from a3c.learning.settings import UpdateSettings
from hogwild.flat import attach_flat_grad, clip_grad_norm_
from hogwild.optim import SharedOptimizer
from hogwild.precision import Precision, resolve_amp

__all__ = ["FIGURES", "KL_STOP", "MIN_BATCH", "Learner", "LearnerSettings", "NonFiniteUpdates"]

#: APPO stops a worker's epochs on a rollout past this multiple of --target-kl (SB3's rule).
KL_STOP = 1.5

#: A3C steps on the mean gradient of at least this many samples (the A3C paper's 5 steps):
#: clipped alone to --max-grad-norm, every one-sample gradient took one size, V rose to
#: r / (1 - gamma) and CartPole's policy collapsed (mean 9.4 where random play gets 22).
MIN_BATCH = 5

#: What each algorithm's steps report: its loss's figures; each step adds the learner's
#: own ``STEP_FIGURES``, and the learner counts ``COUNTS``.
FIGURES: dict[str, type[Figures]] = {"a3c": A3CFigures, "appo": PPOFigures}
STEP_FIGURES = ("grad_norm", "lr", "dead_units")
COUNTS = ("updates", "skipped", "kl_stops")


class NonFiniteUpdates(RuntimeError):
    pass


@dataclass(frozen=True)
class LearnerSettings:
    """What a learner is told (built from the run's settings by
    :func:`a3c.run.worker.learner_settings`)."""

    algo: str  # "a3c" or "appo"
    update: UpdateSettings  # the loss's, its decaying settings at their start
    schedules: Schedules
    rollout_samples: int  # of each rollout: steps x envs
    max_grad_norm: float
    max_nonfinite: int  # rollouts in a row not learned from in full that fail the worker
    epochs: int = 1  # APPO: passes over each rollout
    minibatches: int = 1  # APPO: steps per pass
    recompute_advantages: bool = False  # APPO: fresh targets before each later epoch
    target_kl: float | None = None  # APPO: stop a rollout's epochs past KL_STOP x this
    amp: str = "off"  # "bf16" (or "auto" on a CPU with bf16 instructions): the passes
    #                   that learn run under CPU autocast


class Learner:
    """Turns each rollout into lock-free steps of the shared optimizer (one for A3C,
    ``epochs x minibatches`` for APPO) and sums their figures into ``stats``, at the
    places ``slots`` gives each name."""

    def __init__(
        self,
        settings: LearnerSettings,
        model: torch.nn.Module,
        local: torch.Tensor,
        shared: torch.Tensor,
        optimizer: SharedOptimizer,
        rank: int,
        stats: np.ndarray,
        slots: Mapping[str, int],
    ) -> None:
        self.settings, self.model, self.local, self.shared = settings, model, local, shared
        self.optimizer, self.rank, self.stats = optimizer, rank, stats
        self.grad = attach_flat_grad(model, local)
        self.precision = Precision(resolve_amp(settings.amp))
        self.dead = DeadUnits(getattr(model, "first_conv", None))
        figures = FIGURES[settings.algo].names()
        self.step_slots = np.array([slots[name] for name in (*figures, *STEP_FIGURES)])
        self.count = {name: slots[name] for name in COUNTS}
        self.nonfinite_in_row = 0
        # A3C: rollouts whose gradients make one step, and how many of them are in grad.
        self.accumulate = -(-MIN_BATCH // settings.rollout_samples)
        self.pending = 0
        self.pending_figures = torch.zeros(len(figures))

    def learn(self, rollout: Rollout, steps: int) -> None:
        """Learn from ``rollout``; ``max_nonfinite`` rollouts in a row that were not
        learned from in full (a step skipped) fail the worker. Counted per rollout, not per
        step: APPO takes 16 to 320 steps on one, where A3C's one step would fail the worker
        ten times sooner on the same bad data; and a bad sample vetoes A3C's whole step, so
        one skipped step of APPO's is enough to count its rollout."""
        finite = self._learn(rollout, steps)
        if finite is None:  # held for the next rollouts' step: counted with it
            return
        if finite:
            self.nonfinite_in_row = 0
            return
        # A3C's step is its ``accumulate`` rollouts' (1 unless they are under MIN_BATCH).
        self.nonfinite_in_row += self.accumulate if self.settings.algo == "a3c" else 1
        if self.nonfinite_in_row >= self.settings.max_nonfinite:
            raise NonFiniteUpdates(
                f"{self.nonfinite_in_row} rollouts in a row with a non-finite loss or gradient"
            )

    def _learn(self, rollout: Rollout, steps: int) -> bool | None:
        """The rollout's steps; whether all were finite (None: held, no step taken)."""
        s = self.settings
        lr = s.schedules.learning_rate(steps)
        update = s.schedules.update(s.update, steps)
        if s.algo == "a3c":
            return self._a3c_step(rollout, update, lr)
        return self._appo_steps(rollout, update, lr)

    def _a3c_step(self, rollout: Rollout, update: UpdateSettings, lr: float) -> bool | None:
        with self.precision.autocast(), self.dead.watch():
            loss, figures = a3c_loss(self.model, rollout, update)
        values = figures.stacked()
        held = self.accumulate > 1
        if held:
            loss, values = self._accumulated(loss, values)
            if loss is None:
                return None
        return self._step(loss, lr, values.tolist(), held)

    def _appo_steps(self, rollout: Rollout, update: UpdateSettings, lr: float) -> bool:
        s = self.settings
        gamma, lam = update.gamma, update.gae_lambda
        with self.precision.autocast():
            b = behaviour(self.model, rollout, gamma, lam)
        T, K = rollout.rewards.shape
        finite = True
        for epoch in range(s.epochs):
            if epoch and s.recompute_advantages:
                self.local.copy_(self.shared)
                with self.precision.autocast():
                    b = refresh_targets(self.model, rollout, b, gamma, lam)
            for idx in minibatches(T, K, s.minibatches, rollout.state is not None):
                self.local.copy_(self.shared)
                with self.precision.autocast(), self.dead.watch():
                    loss, figures = ppo_loss(self.model, rollout, b, idx, update)
                values = figures.stacked().tolist()
                if s.target_kl is not None and float(figures.approx_kl) > KL_STOP * s.target_kl:
                    self.stats[self.count["kl_stops"]] += 1
                    return finite
                finite &= self._step(loss, lr, values)
        return finite

    def _accumulated(
        self, loss: torch.Tensor, figures: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor]:
        """A rollout smaller than ``MIN_BATCH``: its gradient (a share of the mean) is
        added to ``grad``; the last of ``accumulate`` rollouts comes back as ``(loss,
        mean figures)`` to step with, the others as ``(None, figures)``."""
        loss = loss / self.accumulate
        if self.pending == 0:
            self.grad.zero_()
            self.pending_figures.zero_()
        self.pending += 1
        self.pending_figures += figures
        if self.pending < self.accumulate:
            loss.backward()
            return None, figures
        self.pending = 0
        return loss, self.pending_figures / self.accumulate

    def _step(self, loss: torch.Tensor, lr: float, figures: list, held: bool = False) -> bool:
        """One lock-free step with exactly this loss's gradient (``held``: plus the earlier
        rollouts' that :meth:`_accumulated` left in ``grad``), unless it is not finite
        (then skipped: False); ``figures`` (then the grad norm and lr) are summed into
        ``stats``."""
        if not held:
            self.grad.zero_()
        loss.backward()
        grad_norm = clip_grad_norm_(self.grad, self.settings.max_grad_norm)
        stats = self.stats
        # Only the loss and the gradient can veto an update, never a logged figure.
        if np.isfinite(grad_norm) and np.isfinite(loss.item()):
            self.optimizer.step(self.grad, self.rank, lr)
            stats[self.count["updates"]] += 1
            stats[self.step_slots] += (*figures, grad_norm, lr, self.dead.share)
            return True
        stats[self.count["skipped"]] += 1
        return False
