"""One A3C worker: act in its own environments, learn locally, update the shared model.

Each update: copy the shared parameters into the local model, run ``n_steps`` batched
steps of ``envs_per_worker`` environments without autograd, then one forward pass with
autograd over the whole rollout (plus the bootstrap and final observations), GAE(lambda)
targets, the actor-critic loss, a global-norm clip, and one lock-free step of the shared
optimizer with exactly this update's gradient.
"""

from __future__ import annotations

import numpy as np
import torch

from a3c.collect import Collector
from a3c.config import A3CConfig
from a3c.envs import make_vector_env
from a3c.loss import LossSettings, a3c_loss
from a3c.normalize import RETURN_CLIP, ReturnScaler, RunningMeanStd
from a3c.policy import ModelSpec
from a3c.telemetry import WorkerTelemetry
from hogwild.flat import attach_flat_grad, clip_grad_norm_, flatten_parameters
from hogwild.optim import SharedOptimizer
from hogwild.pool import BufferPool
from hogwild.procs import WorkerContext


class NonFiniteUpdates(RuntimeError):
    pass


def run_worker(
    ctx: WorkerContext,
    cfg: A3CConfig,
    spec: ModelSpec,
    shared: torch.Tensor,
    optimizer: SharedOptimizer,
    env_steps: torch.Tensor,
    global_steps: torch.Tensor,
    pool: BufferPool,
    obs_rms: RunningMeanStd | None = None,
    return_rms: RunningMeanStd | None = None,
) -> None:
    T, K = cfg.n_steps, cfg.envs_per_worker
    envs = make_vector_env(cfg.env, K, seed=ctx.seed, **cfg.env_kwargs)
    model = spec.build()
    local = flatten_parameters(model)
    grad = attach_flat_grad(model, local)
    telemetry = WorkerTelemetry(pool, ctx.rank, ctx)
    settings = loss_settings(cfg)
    scaler = ReturnScaler(return_rms, ctx.rank, K, cfg.gamma) if return_rms else None

    collector = Collector(envs, model, T, seed=ctx.seed, scaler=scaler)
    nonfinite_in_row = 0
    try:
        while not ctx.should_stop() and _steps(env_steps, global_steps) < cfg.total_steps:
            local.copy_(shared)
            if obs_rms is not None:
                model.set_obs_stats(*obs_rms.mean_std())
            rollout = collector.collect()
            for ret, length in collector.take_episodes():
                telemetry.returns.append(ret)
                telemetry.lengths.append(length)
            if scaler is not None:
                rollout.rewards.mul_(scaler.scale()).clamp_(-RETURN_CLIP, RETURN_CLIP)
            loss, figures = a3c_loss(model, rollout, settings)
            grad.zero_()
            loss.backward()
            grad_norm = clip_grad_norm_(grad, cfg.max_grad_norm)
            lr = _learning_rate(cfg, _steps(env_steps, global_steps))
            losses = figures.tolist()
            stats = telemetry.stats
            stats[1] += T * K
            # Only the loss and the gradient can veto an update, never a logged figure.
            if np.isfinite(grad_norm) and np.isfinite(loss.item()):
                nonfinite_in_row = 0
                optimizer.step(grad, ctx.rank, lr)
                stats[0] += 1
                stats[2:8] += (*losses, grad_norm, lr)
            else:
                nonfinite_in_row += 1
                stats[8] += 1
                if nonfinite_in_row >= cfg.max_nonfinite:
                    raise NonFiniteUpdates(
                        f"{nonfinite_in_row} updates in a row with a non-finite loss or gradient"
                    )
            env_steps[ctx.rank] += T * K
            if obs_rms is not None:
                obs_rms.add(ctx.rank, rollout.obs.view(T * K, -1))
            if scaler is not None:
                scaler.flush()
            if telemetry.due():
                telemetry.send()
    finally:
        envs.close()
    telemetry.send()


def loss_settings(cfg: A3CConfig) -> LossSettings:
    return LossSettings(
        gamma=cfg.gamma,
        gae_lambda=cfg.gae_lambda,
        value_coef=cfg.value_coef,
        entropy_coef=cfg.entropy_coef,
        normalize_advantage=cfg.normalize_advantage,
        value_loss=cfg.value_loss,
    )


def _steps(env_steps: torch.Tensor, global_steps: torch.Tensor) -> int:
    """The run's env steps so far, all nodes together: the main process publishes the
    global count; this node's own count is fresher when it is the only node."""
    return max(int(env_steps.sum()), int(global_steps))


def _learning_rate(cfg: A3CConfig, steps: int) -> float:
    if cfg.lr_schedule == "linear":
        return cfg.lr * max(1.0 - steps / cfg.total_steps, 0.0)
    return cfg.lr
