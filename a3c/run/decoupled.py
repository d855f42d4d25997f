"""The two roles of a decoupled run (:data:`a3c.learning.decoupled.PPO`): worker 0 learns,
the others act.

An actor copies the published weights, noting their version (the optimizer's step count),
collects a rollout, scores it with those weights (log-probabilities, values, GAE targets:
the learner then needs no final observations) and fills one of its own slots of a
:class:`~hogwild.pool.BufferPool` with it, as telemetry travels: only the slot's index is
sent. Two slots each: an actor fills one while the learner reads the other, and waits when
the learner is behind. A rollout waiting for the learner grows stale, so the learner also
sets how many may be collected or queued at once (:mod:`a3c.run.handoff`): one fewer while it
is the bound, one more while it waits for them. The learner takes rollouts as they come and
learns from each with APPO's steps. On the CPU it steps the shared weights in place; on
CUDA it keeps its own weights and optimizer state there and publishes both into shared
memory after each rollout, where actors, evaluator and checkpoints read them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from a3c.envs import make_vector_env
from a3c.learning.collect import Collector
from a3c.learning.learner import Learner
from a3c.learning.ppo import behaviour
from a3c.policy import ModelSpec
from a3c.run.config import A3CConfig
from a3c.run.handoff import WAIT_S, Pace, hand_over, slot_rollout, turned
from a3c.run.shared_model import make_optimizer
from a3c.run.telemetry import WorkerTelemetry
from a3c.run.worker import SharedRun, learner_settings, run_steps
from hogwild.evaluator import resolve_device
from hogwild.flat import flatten_parameters
from hogwild.optim import SharedOptimizer
from hogwild.procs import WorkerContext

__all__ = ["learner_device", "run_decoupled"]


def learner_device(cfg: A3CConfig, spec: ModelSpec) -> str:
    """``--learner-device``: ``auto`` is CUDA for a conv net where there is one."""
    if cfg.learner_device == "auto":
        return "cuda" if spec.image and torch.cuda.is_available() else "cpu"
    return resolve_device(cfg.learner_device, flag="--learner-device").type


def run_decoupled(ctx: WorkerContext, cfg: A3CConfig, run: SharedRun) -> None:
    (_learn if ctx.rank == 0 else _act)(ctx, cfg, run)


def _act(ctx: WorkerContext, cfg: A3CConfig, run: SharedRun) -> None:
    handoff = run.rollouts
    assert handoff is not None  # made by the trainer for a decoupled algorithm
    T, K = cfg.n_steps, cfg.envs_per_worker
    producer = handoff.pool.producer(ctx.rank - 1)
    envs = make_vector_env(cfg.env, K, seed=ctx.seed, **cfg.env_options())
    model = run.spec.build()
    local = flatten_parameters(model)
    frames_turned = turned(model)
    telemetry = WorkerTelemetry(run.pool, ctx.rank, ctx)
    collector = Collector(
        envs, model, T, seed=ctx.seed, record=True, return_rms=run.return_rms,
        writer=ctx.rank, gamma=cfg.gamma,
    )  # fmt: skip
    try:
        while not ctx.should_stop() and run_steps(run) < cfg.total_steps:
            if not handoff.enter(ctx):
                break
            version = run.optimizer.total_steps  # read first: the weights are this or newer
            local.copy_(run.params)
            if run.obs_rms is not None:
                model.set_obs_stats(*run.obs_rms.mean_std())
            rollout = collector.collect()
            telemetry.add_episodes(collector.take_episodes())
            scored = behaviour(model, rollout, cfg.gamma, cfg.gae_lambda)
            if not hand_over(ctx, producer, rollout, scored.__dict__, version, frames_turned):
                break
            telemetry.stats.add("env_steps", T * K)
            run.env_steps[ctx.rank] += T * K
            if run.obs_rms is not None:
                run.obs_rms.add(ctx.rank, rollout.obs.reshape(T * K, -1))
            if telemetry.due():
                telemetry.send()
    finally:
        envs.close()
    telemetry.send()


@dataclass
class _Published:
    """A CUDA learner's weights and optimizer, published into the run's shared ones."""

    local: Tensor
    optimizer: SharedOptimizer
    run: SharedRun

    def __call__(self) -> None:
        shared = self.run.optimizer
        shared.params.copy_(self.local)
        for name, t in self.optimizer.state.items():
            shared.state[name].copy_(t)
        shared.steps[0] = self.optimizer.total_steps  # last: the version of what is there


def _learner(cfg: A3CConfig, run: SharedRun, device: str, stats: Any) -> tuple[Learner, Any]:
    """The learner on ``device`` and what publishes its weights (nothing on the CPU,
    where it steps the shared ones)."""
    model = run.spec.build().to(device)
    local = flatten_parameters(model)
    if device == "cpu":
        optimizer, shared, publish = run.optimizer, run.params, None
    else:
        local.copy_(run.params)
        optimizer = make_optimizer(cfg, local)
        for name, t in optimizer.state.items():
            t.copy_(run.optimizer.state[name])
        optimizer.steps[0] = run.optimizer.total_steps
        shared, publish = local, _Published(local, optimizer, run)
    learner = Learner(
        learner_settings(cfg, run.horizon), model=model, local=local, shared=shared,
        optimizer=optimizer, rank=0, stats=stats,
    )  # fmt: skip
    return learner, publish


def _learn(ctx: WorkerContext, cfg: A3CConfig, run: SharedRun) -> None:
    assert run.rollouts is not None
    rollouts, device, pace = run.rollouts.pool, run.learner_device, Pace(run.rollouts)
    if device == "cpu":
        torch.set_num_threads(cfg.learner_threads)
    telemetry = WorkerTelemetry(run.pool, ctx.rank, ctx)
    learner, publish = _learner(cfg, run, device, telemetry.stats)
    frames_turned = turned(learner.model)
    try:
        while not ctx.should_stop() and run_steps(run) < cfg.total_steps:
            was_waiting = rollouts.waiting() > 0
            slot = rollouts.receive(timeout=WAIT_S)
            if slot is not None:
                pace.taken(was_waiting)
                try:
                    learned = _learn_one(
                        cfg, run, learner, rollouts.view(slot), pace, frames_turned
                    )
                finally:
                    rollouts.release(slot)
                if learned and publish is not None:
                    publish()
            if telemetry.due():
                telemetry.send()
    finally:
        if publish is not None:
            publish()
    telemetry.send()


def _learn_one(
    cfg: A3CConfig,
    run: SharedRun,
    learner: Learner,
    slot: dict[str, Tensor],
    pace: Pace,
    frames_turned: bool,
) -> bool:
    """Learn from one handed-over rollout, unless it is older than ``max_policy_lag``."""
    stats = learner.stats
    lag = learner.optimizer.total_steps - int(slot["version"])
    stats.peak("policy_lag_max", lag)
    if lag > cfg.max_policy_lag:
        stats.add("stale_rollouts")
        return False
    updates = stats["updates"]
    if run.obs_rms is not None:
        learner.model.set_obs_stats(*run.obs_rms.mean_std())
    learner.learn(slot_rollout(slot, run.learner_device, frames_turned), run_steps(run))
    made = stats["updates"] - updates
    stats.add("policy_lag", lag * made)
    stats.add("rollouts_in_flight", pace.limit * made)
    return True
