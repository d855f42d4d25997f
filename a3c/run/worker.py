"""One worker process: act in its own environments, learn locally, update the shared model.

Each rollout: copy the shared parameters into the local model, collect ``n_steps``
batched steps of ``envs_per_worker`` environments without autograd
(:mod:`a3c.learning.collect`), then learn from it (:mod:`a3c.learning.learner`); finished
episodes and the learner's figures go to the main process as telemetry.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch

from a3c.envs import make_vector_env
from a3c.envs.multiagent import AgentRows
from a3c.envs.random_player import RandomPlayer
from a3c.learning.algorithms import ALGORITHMS
from a3c.learning.collect import Collector
from a3c.learning.learner import Learner, LearnerSettings
from a3c.learning.normalize import RunningMeanStd
from a3c.learning.opponents import Opponents, SnapshotPool
from a3c.learning.schedules import Horizon, Schedules
from a3c.learning.settings import UpdateSettings
from a3c.policy import ActorCritic, ModelSpec
from a3c.policy.actor_critic import GroupedActorCritic
from a3c.run.config import A3CConfig
from a3c.run.handoff import Handoff
from a3c.run.telemetry import WorkerTelemetry
from hogwild.flat import flatten_parameters
from hogwild.optim import SharedOptimizer
from hogwild.pool import BufferPool
from hogwild.procs import WorkerContext

__all__ = [
    "SharedRun",
    "add_live_obs",
    "learner_settings",
    "run_steps",
    "run_worker",
    "worker_rate",
    "worker_rollout",
]


@dataclass(frozen=True)
class SharedRun:
    """What a run's workers share with its main process, in shared memory."""

    spec: ModelSpec
    params: torch.Tensor  # the shared model, one flat tensor
    optimizer: SharedOptimizer
    env_steps: torch.Tensor  # this node's steps, one row per worker
    global_steps: torch.Tensor  # the run's count as the main process knows it (all nodes)
    pool: BufferPool  # telemetry to the main process
    horizon: Horizon  # the decays': a resumed run's go on where they were
    obs_rms: RunningMeanStd | None = None
    return_rms: RunningMeanStd | None = None
    rollouts: Handoff | None = None  # actors to learner, for a decoupled algorithm
    learner_device: str = "cpu"  # a decoupled algorithm's, resolved
    snapshots: SnapshotPool | None = None  # --snapshot-games: each worker's past policies


def run_worker(ctx: WorkerContext, cfg: A3CConfig, run: SharedRun) -> None:
    spec, shared, optimizer, pool = run.spec, run.params, run.optimizer, run.pool
    env_steps, obs_rms = run.env_steps, run.obs_rms
    envs = make_vector_env(cfg.env, cfg.envs_per_worker, seed=ctx.seed, **cfg.env_options())
    T, K = worker_rollout(cfg).steps, envs.num_envs  # many agents: a row per agent of each game
    model = spec.build()
    local = flatten_parameters(model)
    telemetry = WorkerTelemetry(pool, ctx.rank, ctx)
    learner = Learner(
        learner_settings(cfg, run.horizon), model=model, local=local, shared=shared,
        optimizer=optimizer, rank=ctx.rank, stats=telemetry.stats,
    )  # fmt: skip
    opponents = None
    if (cfg.snapshot_games > 0 or cfg.random_games > 0) and isinstance(envs, AgentRows):
        opponents = Opponents(
            model, cfg.snapshot_games, len(envs.agents), K, ctx.seed, run.snapshots, ctx.rank,
            randomly=RandomPlayer(envs, ctx.seed) if cfg.random_games else None,
            random_share=cfg.random_games,
        )  # fmt: skip
    collector = Collector(
        envs, model, T, seed=ctx.seed, record=ALGORITHMS[cfg.algo].records_behaviour,
        return_rms=run.return_rms, writer=ctx.rank, gamma=cfg.gamma, opponents=opponents,
    )  # fmt: skip
    try:
        while not ctx.should_stop() and run_steps(run) < cfg.total_steps:
            local.copy_(shared)
            version = optimizer.total_steps
            if obs_rms is not None:
                model.set_obs_stats(*obs_rms.mean_std())
            rollout = collector.collect()
            telemetry.add_episodes(collector.take_episodes())
            teams, illegal = collector.take_games()
            for team in teams:
                telemetry.stats.add("games")
                telemetry.stats.add("team_return", team)
            telemetry.stats.add("illegal_moves", illegal)
            lag, updates = optimizer.total_steps - version, telemetry.stats["updates"]
            learner.learn(rollout, run_steps(run))
            telemetry.stats.peak("policy_lag_max", lag)
            telemetry.stats.add("policy_lag", lag * (telemetry.stats["updates"] - updates))
            if opponents is not None:
                opponents.keep()
            steps = T * K if rollout.acted is None else int(rollout.acted.sum())
            telemetry.stats.add("env_steps", steps)
            env_steps[ctx.rank] += steps
            if obs_rms is not None:
                add_live_obs(obs_rms, ctx.rank, model, rollout.obs, rollout.acted)
            if telemetry.due():
                telemetry.send()
    finally:
        envs.close()
    telemetry.send()


def add_live_obs(
    obs_rms: RunningMeanStd,
    writer: int,
    model: ActorCritic,
    obs: torch.Tensor,
    acted: torch.Tensor | None,
) -> None:
    """Fold a rollout's observations into ``writer``'s row of the statistics: only the rows
    whose agent acted (none of an agent that left, or not yet its turn), and with a policy
    per group each group's rows into the columns its own net reads, not the zeros of
    the other groups' blocks."""
    rows = obs.reshape(-1, obs_rms.dim)
    if acted is not None:
        rows = rows[acted.reshape(-1)]
    if not isinstance(model, GroupedActorCritic):
        obs_rms.add(writer, rows)
        return
    group = rows[:, 0].long()
    for g, columns in enumerate(model.columns):
        obs_rms.add(writer, rows[group == g][:, columns], columns)


def learner_settings(cfg: A3CConfig, horizon: Horizon | None = None) -> LearnerSettings:
    """The learner's settings, from the run's; its decays along ``horizon`` (none: a fresh
    run's, over ``--total-steps``; a resumed run's comes from
    :func:`a3c.run.resume.restore`). ``--normalize-advantage`` unset is the algorithm's
    own default (APPO: on, per minibatch, as SB3 and CleanRL; A3C: off, the paper's)."""
    rollout = worker_rollout(cfg)
    normalize = cfg.normalize_advantage
    if normalize is None:
        normalize = ALGORITHMS[cfg.algo].normalize_advantage
    update = UpdateSettings(
        gamma=cfg.gamma,
        gae_lambda=cfg.gae_lambda,
        value_coef=cfg.value_coef,
        entropy_coef=cfg.entropy_coef,
        normalize_advantage=normalize,
        value_loss=cfg.value_loss,
        clip_range=cfg.clip_range,
        clip_range_vf=cfg.clip_range_vf,
    )
    schedules = Schedules(
        Horizon(cfg.total_steps) if horizon is None else horizon,
        lr=worker_rate(cfg),
        lr_final=0.0 if cfg.lr_schedule == "linear" else None,
        lr_warmup_steps=cfg.lr_warmup_steps,
        entropy_coef_final=cfg.entropy_coef_final,
        clip_range_final=cfg.clip_range_final,
    )
    return LearnerSettings(
        algo=cfg.algo,
        update=update,
        schedules=schedules,
        rollout_samples=rollout.steps * cfg.envs_per_worker,
        max_grad_norm=cfg.max_grad_norm,
        max_nonfinite=cfg.max_nonfinite,
        epochs=cfg.epochs,
        minibatches=rollout.minibatches,
        recompute_advantages=cfg.recompute_advantages,
        target_kl=rollout.target_kl,
        amp=cfg.amp,
    )


def worker_rate(cfg: A3CConfig) -> float:
    """``--lr``, scaled by ``sqrt(--lr-workers / --workers)`` where more workers than it
    was chosen at learn lock-free (Pong, 8 workers: half the 2-worker rate reached +18
    in 1.08M agent steps; the full rate's policy collapsed on one seed of two)."""
    chosen = cfg.lr_workers
    if chosen is None or cfg.workers <= chosen or ALGORITHMS[cfg.algo].decoupled:
        return cfg.lr
    return cfg.lr * math.sqrt(chosen / cfg.workers)


class RolloutShape(NamedTuple):
    """A worker's rollout: its steps per env, the minibatches it is learned in, and the KL
    from the acting weights past which its epochs stop (``--target-kl``)."""

    steps: int
    minibatches: int
    target_kl: float | None


def worker_rollout(cfg: A3CConfig) -> RolloutShape:
    """``--n-steps`` and ``--minibatches`` scaled by ``--rollout-workers / --workers``, and
    ``--target-kl`` by its inverse, where more workers than they were chosen at learn
    lock-free. The updates that land while a worker collects grow with the workers times
    its rollout, and shorter rollouts keep them as they were (Hopper, 8 workers, APPO:
    2,692 at 1M steps with 128-step rollouts in 8 minibatches, 972 with the 2-worker 512
    in 32); the KL from the acting weights counts the other workers' steps, and at 8
    workers the 2-worker cap held learning back (Walker2d: 3,918 at 3M steps, 6,057
    without it)."""
    chosen = cfg.rollout_workers
    if chosen is None or cfg.workers <= chosen or ALGORITHMS[cfg.algo].decoupled:
        return RolloutShape(cfg.n_steps, cfg.minibatches, cfg.target_kl)
    scale = chosen / cfg.workers
    return RolloutShape(
        max(1, round(cfg.n_steps * scale)),
        max(1, round(cfg.minibatches * scale)),
        None if cfg.target_kl is None else cfg.target_kl / scale,
    )


def run_steps(run: SharedRun) -> int:
    """The run's env steps so far, all nodes together: the main process publishes the
    global count; this node's own count is fresher when it is the only node."""
    return max(int(run.env_steps.sum()), int(run.global_steps))
