"""One worker: act in its own environments, learn locally, update the shared model.

Each rollout: copy the shared parameters into the local model, run ``n_steps`` batched
steps of ``envs_per_worker`` environments without autograd, then learn from it. A3C:
one forward pass with autograd over the whole rollout (plus the bootstrap and final
observations), GAE(lambda) targets, the actor-critic loss, a global-norm clip, and one
lock-free step of the shared optimizer with exactly this update's gradient (a rollout of
fewer than ``MIN_BATCH`` samples waits for the next ones'). APPO: the
same targets once, then ``epochs x minibatches`` clipped steps (:mod:`a3c.learning.ppo`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from a3c.envs import make_vector_env
from a3c.learning.collect import Collector
from a3c.learning.loss import LOSS_STATS, LossSettings, a3c_loss
from a3c.learning.normalize import RunningMeanStd
from a3c.learning.ppo import (
    PPO_STATS,
    PPOSettings,
    behaviour,
    minibatches,
    ppo_loss,
    refresh_targets,
)
from a3c.learning.returns import FIT_STATS
from a3c.learning.rollout import Rollout
from a3c.policy import ModelSpec
from a3c.run.config import A3CConfig
from a3c.run.telemetry import STAT, WorkerTelemetry
from hogwild.flat import attach_flat_grad, clip_grad_norm_, flatten_parameters
from hogwild.optim import SharedOptimizer
from hogwild.pool import BufferPool
from hogwild.procs import WorkerContext

#: APPO stops a worker's epochs on a rollout past this multiple of --target-kl (SB3's rule).
KL_STOP = 1.5

#: A3C steps on the mean gradient of at least this many samples (the A3C paper's 5 steps):
#: clipped alone to --max-grad-norm, every one-sample gradient took one size, V rose to
#: r / (1 - gamma) and CartPole's policy collapsed (mean 9.4 where random play gets 22).
MIN_BATCH = 5


class NonFiniteUpdates(RuntimeError):
    pass


@dataclass(frozen=True)
class SharedRun:
    """What a run's workers share with its main process, in shared memory."""

    spec: ModelSpec
    params: torch.Tensor  # the shared model, one flat tensor
    optimizer: SharedOptimizer
    env_steps: torch.Tensor  # this node's steps, one row per worker
    global_steps: torch.Tensor  # the run's count as the main process knows it (all nodes)
    pool: BufferPool  # telemetry to the main process
    obs_rms: RunningMeanStd | None = None
    return_rms: RunningMeanStd | None = None


def run_worker(ctx: WorkerContext, cfg: A3CConfig, run: SharedRun) -> None:
    spec, shared, optimizer, pool = run.spec, run.params, run.optimizer, run.pool
    env_steps, global_steps = run.env_steps, run.global_steps
    obs_rms, return_rms = run.obs_rms, run.return_rms
    T, K = cfg.n_steps, cfg.envs_per_worker
    envs = make_vector_env(cfg.env, K, seed=ctx.seed, **cfg.env_options())
    model = spec.build()
    local = flatten_parameters(model)
    telemetry = WorkerTelemetry(pool, ctx.rank, ctx)
    learner = Learner(cfg, model, local, shared, optimizer, ctx.rank, telemetry.stats)

    record = cfg.algo == "appo"  # its behaviour policy, kept while acting
    collector = Collector(
        envs, model, T, seed=ctx.seed, record=record,
        return_rms=return_rms, writer=ctx.rank, gamma=cfg.gamma,
    )  # fmt: skip
    try:
        while not ctx.should_stop() and _steps(env_steps, global_steps) < cfg.total_steps:
            local.copy_(shared)
            if obs_rms is not None:
                model.set_obs_stats(*obs_rms.mean_std())
            rollout = collector.collect()
            for ret, length in collector.take_episodes():
                telemetry.returns.append(ret)
                telemetry.lengths.append(length)
            learner.learn(rollout, _steps(env_steps, global_steps))
            telemetry.stats[STAT["env_steps"]] += T * K
            env_steps[ctx.rank] += T * K
            if obs_rms is not None:
                obs_rms.add(ctx.rank, rollout.obs.view(T * K, -1))
            if telemetry.due():
                telemetry.send()
    finally:
        envs.close()
    telemetry.send()


#: Where each step's figures go in the telemetry stats: a loss's, then grad norm and lr.
A3C_SLOTS = np.array([STAT[n] for n in (*LOSS_STATS, "grad_norm", "lr")])
PPO_SLOTS = np.array([STAT[n] for n in (*PPO_STATS, *FIT_STATS, "grad_norm", "lr")])
KL = PPO_STATS.index("approx_kl")


class Learner:
    """A worker's side of learning: turns each rollout into lock-free steps of the shared
    optimizer (one for A3C, ``epochs x minibatches`` for APPO) and sums their figures
    into the telemetry ``stats``."""

    def __init__(
        self,
        cfg: A3CConfig,
        model: torch.nn.Module,
        local: torch.Tensor,
        shared: torch.Tensor,
        optimizer: SharedOptimizer,
        rank: int,
        stats: np.ndarray,
    ) -> None:
        self.cfg, self.model, self.local, self.shared = cfg, model, local, shared
        self.optimizer, self.rank, self.stats = optimizer, rank, stats
        self.grad = attach_flat_grad(model, local)
        self.settings = loss_settings(cfg)  # rebuilt per rollout only if the entropy decays
        self.nonfinite_in_row = 0
        # A3C: rollouts whose gradients make one step, and how many of them are in grad.
        self.accumulate = -(-MIN_BATCH // (cfg.n_steps * cfg.envs_per_worker))
        self.pending = 0
        self.pending_figures = torch.zeros(len(LOSS_STATS))

    def learn(self, rollout: Rollout, steps: int) -> None:
        """Learn from ``rollout``; ``cfg.max_nonfinite`` rollouts in a row that were not
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
        self.nonfinite_in_row += self.accumulate if self.cfg.algo == "a3c" else 1
        if self.nonfinite_in_row >= self.cfg.max_nonfinite:
            raise NonFiniteUpdates(
                f"{self.nonfinite_in_row} rollouts in a row with a non-finite loss or gradient"
            )

    def _learn(self, rollout: Rollout, steps: int) -> bool | None:
        """The rollout's steps; whether all were finite (None: held, no step taken)."""
        cfg = self.cfg
        lr = _learning_rate(cfg, steps)
        entropy_coef = _decayed(cfg.entropy_coef, cfg.entropy_coef_final, steps, cfg)
        if cfg.algo == "a3c":
            settings = self.settings
            if cfg.entropy_coef_final is not None:
                settings = loss_settings(cfg, entropy_coef)
            loss, figures = a3c_loss(self.model, rollout, settings)
            held = self.accumulate > 1
            if held:
                loss, figures = self._accumulated(loss, figures)
                if loss is None:
                    return None
            return self._step(loss, lr, A3C_SLOTS, figures.tolist(), held)
        b = behaviour(self.model, rollout, cfg.gamma, cfg.gae_lambda)
        settings = ppo_settings(cfg, entropy_coef, steps)
        T, K = rollout.rewards.shape
        finite = True
        for epoch in range(cfg.epochs):
            if epoch and cfg.recompute_advantages:
                self.local.copy_(self.shared)
                b = refresh_targets(self.model, rollout, b, cfg.gamma, cfg.gae_lambda)
            for idx in minibatches(T, K, cfg.minibatches, rollout.state is not None):
                self.local.copy_(self.shared)
                loss, figures = ppo_loss(self.model, rollout, b, idx, settings)
                values = figures.tolist()
                if cfg.target_kl is not None and values[KL] > KL_STOP * cfg.target_kl:
                    self.stats[STAT["kl_stops"]] += 1
                    return finite
                finite &= self._step(loss, lr, PPO_SLOTS, [*values, *b.fit])
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

    def _step(
        self, loss: torch.Tensor, lr: float, slots: np.ndarray, figures: list, held: bool = False
    ) -> bool:
        """One lock-free step with exactly this loss's gradient (``held``: plus the earlier
        rollouts' that :meth:`_accumulated` left in ``grad``), unless it is not finite
        (then skipped: False); ``figures`` (then the grad norm and lr) are summed into
        ``stats[slots]``."""
        if not held:
            self.grad.zero_()
        loss.backward()
        grad_norm = clip_grad_norm_(self.grad, self.cfg.max_grad_norm)
        stats = self.stats
        # Only the loss and the gradient can veto an update, never a logged figure.
        if np.isfinite(grad_norm) and np.isfinite(loss.item()):
            self.optimizer.step(self.grad, self.rank, lr)
            stats[STAT["updates"]] += 1
            stats[slots] += (*figures, grad_norm, lr)
            return True
        stats[STAT["skipped"]] += 1
        return False


def loss_settings(cfg: A3CConfig, entropy_coef: float | None = None) -> LossSettings:
    return LossSettings(
        gamma=cfg.gamma,
        gae_lambda=cfg.gae_lambda,
        value_coef=cfg.value_coef,
        entropy_coef=cfg.entropy_coef if entropy_coef is None else entropy_coef,
        normalize_advantage=bool(cfg.normalize_advantage),
        value_loss=cfg.value_loss,
    )


def ppo_settings(cfg: A3CConfig, entropy_coef: float, steps: int) -> PPOSettings:
    return PPOSettings(
        clip_range=_decayed(cfg.clip_range, cfg.clip_range_final, steps, cfg),
        clip_range_vf=cfg.clip_range_vf,
        value_coef=cfg.value_coef,
        entropy_coef=entropy_coef,
        normalize_advantage=cfg.normalize_advantage is not False,
        value_loss=cfg.value_loss,
    )


def _steps(env_steps: torch.Tensor, global_steps: torch.Tensor) -> int:
    """The run's env steps so far, all nodes together: the main process publishes the
    global count; this node's own count is fresher when it is the only node."""
    return max(int(env_steps.sum()), int(global_steps))


def _learning_rate(cfg: A3CConfig, steps: int) -> float:
    lr = _decayed(cfg.lr, 0.0 if cfg.lr_schedule == "linear" else None, steps, cfg)
    if cfg.lr_warmup_steps:
        lr *= min((steps + 1) / cfg.lr_warmup_steps, 1.0)
    return lr


def _decayed(start: float, final: float | None, steps: int, cfg: A3CConfig) -> float:
    """``start``, or with a ``final`` value the linear way from it to ``final`` over the
    run's ``total_steps`` (all nodes' steps: every node follows the same schedule)."""
    if final is None:
        return start
    return start + (final - start) * cfg.decay_done(steps)
