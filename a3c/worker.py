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

from a3c.config import A3CConfig
from a3c.envs import final_observations, make_vector_env
from a3c.model import ModelSpec, log_prob_entropy, sample_actions
from a3c.obs_norm import ObsStats
from a3c.returns import gae
from a3c.telemetry import WorkerTelemetry
from hogwild.flat import attach_flat_grad, flatten_parameters
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
    pool: BufferPool,
    obs_stats: ObsStats | None = None,
) -> None:
    T, K = cfg.n_steps, cfg.envs_per_worker
    envs = make_vector_env(cfg.env, K, seed=ctx.seed)
    model = spec.build()
    local = flatten_parameters(model)
    grad = attach_flat_grad(model, local)
    telemetry = WorkerTelemetry(pool, ctx.rank, ctx)

    obs_buf = torch.empty(T, K, spec.obs_dim)
    act_buf = torch.empty(T, K, dtype=torch.int64)
    rew_buf = torch.empty(T, K)
    term_buf = torch.empty(T, K, dtype=torch.bool)
    done_buf = torch.empty(T, K, dtype=torch.bool)
    trunc_buf = torch.empty(T, K, dtype=torch.bool)
    ep_return = np.zeros(K)
    ep_length = np.zeros(K, dtype=np.int64)
    nonfinite_in_row = 0

    obs_np, _ = envs.reset(seed=ctx.seed)
    obs = torch.from_numpy(obs_np)
    try:
        while not ctx.should_stop():
            local.copy_(shared)
            final_idx: list[tuple[int, int]] = []
            final_obs: list[np.ndarray] = []
            with torch.no_grad():
                for t in range(T):
                    obs_buf[t] = obs
                    logits, _ = model(obs)
                    actions = sample_actions(logits)
                    act_buf[t] = actions
                    obs_np, reward, terminated, truncated, info = envs.step(actions.numpy())
                    rew_buf[t] = torch.from_numpy(reward)
                    term_buf[t] = torch.from_numpy(terminated)
                    trunc_buf[t] = torch.from_numpy(truncated & ~terminated)
                    done = terminated | truncated
                    done_buf[t] = torch.from_numpy(done)
                    ep_return += reward
                    ep_length += 1
                    if done.any():
                        for i in np.flatnonzero(done):
                            telemetry.returns.append(float(ep_return[i]))
                            telemetry.lengths.append(int(ep_length[i]))
                        ep_return[done] = 0
                        ep_length[done] = 0
                        idx, fobs = final_observations(info, truncated & ~terminated)
                        final_idx.extend((t, int(i)) for i in idx)
                        final_obs.extend(fobs)
                    obs = torch.from_numpy(obs_np)

            # One forward with autograd over rollout + bootstrap + truncated-final observations.
            parts = [obs_buf.view(T * K, -1), obs]
            if final_obs:
                parts.append(torch.from_numpy(np.stack(final_obs)))
            logits, values = model(torch.cat(parts))
            v = values[: T * K].view(T, K)
            with torch.no_grad():
                next_v = torch.cat((v[1:], values[T * K : T * K + K].unsqueeze(0)))
                for j, (t, i) in enumerate(final_idx):
                    next_v[t, i] = values[T * K + K + j]
            adv, ret = gae(
                rew_buf, v, next_v, term_buf, done_buf, gamma=cfg.gamma, lam=cfg.gae_lambda
            )
            log_p, entropy = log_prob_entropy(logits[: T * K], act_buf.view(-1))
            policy_loss = -(log_p * adv.view(-1)).mean()
            value_loss = (ret - v).pow(2).mean()
            entropy_mean = entropy.mean()
            loss = policy_loss + cfg.value_coef * value_loss - cfg.entropy_coef * entropy_mean

            grad.zero_()
            loss.backward()
            grad_norm = float(grad.norm())
            lr = _learning_rate(cfg, env_steps)
            losses = torch.stack((policy_loss, value_loss, entropy_mean)).detach().tolist()
            stats = telemetry.stats
            stats[1] += T * K
            if np.isfinite(grad_norm) and np.isfinite(sum(losses)):
                nonfinite_in_row = 0
                if grad_norm > cfg.max_grad_norm:
                    grad.mul_(cfg.max_grad_norm / (grad_norm + 1e-6))
                optimizer.step(grad, ctx.rank, lr)
                stats[0] += 1
                stats[2:7] += (*losses, grad_norm, lr)
            else:
                nonfinite_in_row += 1
                stats[7] += 1
                if nonfinite_in_row >= cfg.max_nonfinite:
                    raise NonFiniteUpdates(
                        f"{nonfinite_in_row} updates in a row with a non-finite loss or gradient"
                    )
            env_steps[ctx.rank] += T * K
            if obs_stats is not None:
                obs_stats.add(ctx.rank, obs_buf.view(T * K, -1))
                obs_stats.publish(model, local, shared)
            if telemetry.due():
                telemetry.send()
    finally:
        envs.close()
    telemetry.send()


def _learning_rate(cfg: A3CConfig, env_steps: torch.Tensor) -> float:
    if cfg.lr_schedule == "linear":
        return cfg.lr * max(1.0 - int(env_steps.sum()) / cfg.total_steps, 0.0)
    return cfg.lr
