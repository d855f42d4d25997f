"""Train an actor-critic with A3C: ``python -m a3c.train --workers 8``.

The main process builds the shared model and optimizer, starts the workers and the
evaluator, and from then on only consumes: telemetry from the workers, scores from the
evaluator. It alone writes TensorBoard, the console line and checkpoints, and decides
when the run ends (step budget, time limit, target return, a signal, or a failure).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import logging
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

from a3c.cli import build_parser, config_from_args
from a3c.config import A3CConfig
from a3c.envs import env_spaces
from a3c.envs.spaces import EnvSpaces
from a3c.evaluation import build_model, score_greedy
from a3c.normalize import RunningMeanStd
from a3c.policy import ModelSpec
from a3c.telemetry import RunStats, status_line, telemetry_layout, write_logs
from a3c.worker import run_worker
from hogwild.checkpoint import load_checkpoint
from hogwild.cli import run_cli
from hogwild.errors import UsageError
from hogwild.evaluator import Evaluator, Snapshot, resolve_device
from hogwild.flat import flatten_buffers, flatten_parameters
from hogwild.optim import OPTIMIZERS
from hogwild.procs import FailurePolicy, WorkerGroup
from hogwild.run import Generation, RunEnd, RunLoop
from hogwild.rundir import Progress

log = logging.getLogger("a3c.train")

#: Warn when the policy's entropy is below this fraction of the uniform policy's while
#: the 100-episode mean has not improved for STALL_S seconds (a near-deterministic policy
#: that still improves, as on MountainCar-v0 at ~4% of uniform, is left alone).
ENTROPY_COLLAPSE = 0.1
STALL_S = 30.0


@dataclasses.dataclass
class A3CResult:
    run_dir: Path | None
    env_steps: int
    wall_time: float
    mean_return_100: float
    solved_at: tuple[float, int] | None
    best_mean_100: tuple[float, float, int] | None  # (mean, seconds, env steps) of the best
    best_eval: float
    exit_code: int


def train(cfg: A3CConfig) -> A3CResult:
    """Run A3C to the end (budget, time, target, signal or failure) and say how it went.

    The calling process runs single-threaded while workers are forked (see
    :class:`~hogwild.procs.WorkerGroup`); its thread count is restored afterwards.
    """
    threads = torch.get_num_threads()
    try:
        return A3CRun(cfg).run()
    finally:
        torch.set_num_threads(threads)


class A3CRun:
    """The main process of one run (one node's, under ``torchrun``): A3C's side of the
    engine's :class:`~hogwild.run.RunLoop`, which runs the plumbing around it."""

    def __init__(self, cfg: A3CConfig) -> None:
        self.cfg = cfg
        spaces = env_spaces(cfg.env, **cfg.env_kwargs)
        if cfg.target_return is None:
            cfg.target_return = _reward_threshold(cfg.env)
        resolve_device(cfg.eval_device)
        self.spec = model_spec(cfg, spaces)
        obs_dim = self.spec.obs_dim
        self.obs_rms = RunningMeanStd(cfg.workers, obs_dim) if self.spec.normalize_obs else None
        self.return_rms = RunningMeanStd(cfg.workers, 1) if cfg.normalize_reward else None
        torch.manual_seed(cfg.seed)  # the initial model; workers seed themselves
        self.model = self.spec.build()
        self.flat = flatten_parameters(self.model)
        self.buffers = flatten_buffers(self.model)
        self.optimizer = OPTIMIZERS[cfg.optimizer](self.flat, lr=cfg.lr, num_workers=cfg.workers)
        self.start_steps, self.elapsed_before, run_dir = 0, 0.0, None
        if cfg.resume:
            run_dir = self._restore(cfg.resume)
        self.flat.share_memory_()
        self.optimizer.share_memory()
        self.env_steps = torch.zeros(cfg.workers, dtype=torch.int64)
        self.env_steps[0] = self.start_steps
        self.env_steps.share_memory_()
        # The run's global step count as this process knows it (all nodes), for the workers'
        # learning-rate schedule.
        self.published_steps = torch.zeros((), dtype=torch.int64).share_memory_()
        for rms in self._statistics().values():
            rms.share_memory()

        self.progress = Progress()
        self.loop = RunLoop(
            cfg,
            "a3c.train",
            telemetry_layout(),
            params=self.flat,
            counters=1,
            progress=self.progress,
            time_limit=cfg.time_limit,
            checkpoint_every=cfg.checkpoint_interval,
            warn=self.progress.print,
        )
        self.rank, self.is_main = self.loop.rank, self.loop.is_main
        self.rundir = None
        if self.is_main:
            name = f"a3c_{cfg.env}_s{cfg.seed}"
            self.rundir = self.loop.open_run_dir(name, cfg, cfg.run_name, resume_dir=run_dir)

        self.stats = RunStats()
        self.stats.env_steps = self.start_steps
        self.global_steps = self.start_steps
        self._synced_local = 0
        self.evaluator: Evaluator | None = None
        if cfg.eval_interval > 0 and self.is_main:
            self.evaluator = Evaluator(
                functools.partial(build_model, self.spec.to_dict()),
                functools.partial(
                    score_greedy,
                    env_id=cfg.env,
                    env_kwargs=dict(cfg.env_kwargs),
                    episodes=cfg.eval_episodes,
                    seed=cfg.seed + 10_000,
                ),
                self.flat.numel(),
                buffers_numel=self.buffers.numel(),
                device=cfg.eval_device,
                seed=cfg.seed,
            )
        self.best_eval = -math.inf
        self.solved_at: tuple[float, int] | None = None
        self.best_100: tuple[float, float, int] | None = None
        self.entropy_warned = False
        self.t0 = self.last_log = self.last_eval = self.last_progress = time.monotonic()
        self.log_steps = self.global_steps

    def _restore(self, path: str) -> Path:
        ckpt = load_checkpoint(path, required=("model", "optimizer", "model_spec", "env_steps"))
        saved = ModelSpec.from_dict(ckpt["model_spec"])
        if saved != self.spec:
            raise UsageError(f"{path}: checkpoint is for {saved}, this run builds {self.spec}")
        try:
            self.model.load_state_dict(ckpt["model"])
            self.optimizer.load_state_dict(ckpt["optimizer"])
        except (RuntimeError, ValueError, KeyError) as e:
            raise UsageError(f"{path}: cannot restore ({str(e).splitlines()[0]})") from None
        self.start_steps = int(ckpt["env_steps"])
        for name, rms in self._statistics().items():
            if name not in ckpt:
                raise UsageError(f"{path}: checkpoint has no {name} (was {name} off in that run?)")
            try:
                rms.load(ckpt[name])
            except (TypeError, ValueError) as e:
                raise UsageError(f"{path}: bad {name}: {e}") from None
        self.elapsed_before = float(ckpt.get("wall_time", 0.0))
        return Path(path).parent

    # -- the run: what the engine's loop asks of A3C ---------------------------------------
    def run(self) -> A3CResult:
        if self.rundir is not None:
            self.progress.print(f"run folder: {self.rundir.path}")
        self.loop.run(self)
        return self.result

    def next_generation(self, last: Generation | None) -> WorkerGroup | None:
        """One generation of workers for the whole run; the evaluator starts with it."""
        if last is not None:
            return None
        cfg = self.cfg
        group = WorkerGroup(
            run_worker,
            (
                cfg,
                self.spec,
                self.flat,
                self.optimizer,
                self.env_steps,
                self.published_steps,
                self.loop.pool,
                self.obs_rms,
                self.return_rms,
            ),
            cfg.workers,
            cfg.seed + 100_003 * self.rank,
            num_threads=cfg.threads_per_worker,
            start_method=cfg.start_method,
            policy=FailurePolicy(cfg.on_worker_failure, cfg.max_restarts),
            on_restart=self.loop.supervisor.restarted,
        )
        self.t0 = self.loop.t0
        self.last_log = self.last_eval = self.last_progress = self.t0
        self.log_steps = self.global_steps
        if self.evaluator is not None:
            self.loop.evaluator = self.evaluator.start()
        return group

    def on_message(self, view: dict[str, torch.Tensor]) -> None:
        self.stats.add(view)

    def tick(self, ready: Sequence[Any], now: float) -> str | None:
        self._count_steps()
        reason = self._evaluate(ready, now) or self._check_solved(now)
        self._log(now)
        self.published_steps.fill_(self.global_steps)
        if self.global_steps >= self.cfg.total_steps:
            return reason or "step budget reached"
        return reason

    def round_counters(self) -> list[float]:
        self._count_steps()
        return [float(self._synced_local)]

    def round_gather(self) -> torch.Tensor | None:
        """This node's running statistics, one vector, for the other nodes to merge."""
        stats = list(self._statistics().values())
        return torch.cat([rms.local() for rms in stats]) if stats else None

    def on_round(self, totals: torch.Tensor, gathered: list[torch.Tensor] | None) -> None:
        """The run's steps are every node's steps as of the round, plus this node's since."""
        self._merge_remote_statistics(gathered)
        self.global_steps = (
            self.start_steps
            + int(totals[0])
            + (self.stats.env_steps - self.start_steps - self._synced_local)
        )
        self.published_steps.fill_(self.global_steps)

    def finish(self, end: RunEnd) -> dict[str, float] | None:
        reason = end.reason or ("failure" if end.exit_code == 1 else "all workers finished")
        self.wall = end.seconds
        stats, metrics = self.stats, None
        if self.rundir is not None:
            write_logs(
                self.rundir,
                stats,
                self.global_steps,
                max(time.monotonic() - self.last_log, 1e-9),
                self.global_steps - self.log_steps,
            )
            metrics = {
                "mean_return_100": stats.mean_100,
                "best_eval_return": self.best_eval,
                "env_steps": self.global_steps,
            }
        if self.is_main or end.exit_code:
            solved, path = self.solved_at, end.checkpoint
            self.progress.print(
                f"{reason}: {self.global_steps} env steps in {self.wall:.1f} s "
                f"({(self.global_steps - self.start_steps) / max(self.wall, 1e-9):,.0f} steps/s), "
                f"100-episode mean return {stats.mean_100:.1f}"
                + (f", solved after {solved[0]:.1f} s / {solved[1]} steps" if solved else "")
                + (f"; checkpoint {path}" if path else "")
            )
        self.result = A3CResult(
            self.rundir.path if self.rundir else None,
            self.global_steps,
            self.wall,
            stats.mean_100,
            self.solved_at,
            self.best_100,
            self.best_eval,
            end.exit_code,
        )
        return metrics

    # -- A3C's decisions -------------------------------------------------------------------
    def _count_steps(self) -> None:
        """Fold this node's new env steps (from telemetry) into the global count."""
        self.global_steps += self.stats.env_steps - self.start_steps - self._synced_local
        self._synced_local = self.stats.env_steps - self.start_steps

    def _evaluate(self, ready: Sequence[Any], now: float) -> str | None:
        if self.evaluator is None:
            return None
        reason = None
        for step, metrics, params in self.evaluator.collect(ready):
            self.rundir.scalars({f"eval/{k}": v for k, v in metrics.items()}, step)
            score = metrics["mean_return"]
            if score > self.best_eval:
                self.best_eval = score
                if params is None:  # its snapshot was dropped: save nothing rather than another
                    log.warning("no snapshot kept for the evaluation at step %d", step)
                else:
                    state = self.checkpoint_state(params, eval_mean_return=score)
                    self.loop.save_checkpoint(state, self.rundir.path / "best.pt")
            target = self.cfg.target_return
            if self.cfg.target_metric == "eval" and target is not None and score >= target:
                reason = f"evaluation mean return {score:.1f} reached the target"
        if now - self.last_eval >= self.cfg.eval_interval and self.evaluator.offer(
            self.flat, self.global_steps, self._current_buffers()
        ):
            self.last_eval = now
        return reason

    def _check_solved(self, now: float) -> str | None:
        stats, target = self.stats, self.cfg.target_return
        full = len(stats.recent) == stats.recent.maxlen
        if full and (self.best_100 is None or stats.mean_100 > self.best_100[0]):
            self.best_100 = (stats.mean_100, now - self.t0, self.global_steps)
            self.last_progress = now
        if (
            self.solved_at is not None
            or target is None
            or len(stats.recent) < stats.recent.maxlen
            or stats.mean_100 < target
        ):
            return None
        self.solved_at = (now - self.t0, self.global_steps)
        if self.rundir is not None:
            self.rundir.scalar("charts/solved_at_seconds", now - self.t0, self.global_steps)
        if self.cfg.target_metric == "train":
            return f"100-episode mean return {stats.mean_100:.1f} reached the target"
        return None

    def _log(self, now: float) -> None:
        if now - self.last_log < self.cfg.log_interval:
            return
        self._warn_entropy_collapse(now)
        if self.rundir is not None:
            write_logs(
                self.rundir,
                self.stats,
                self.global_steps,
                now - self.last_log,
                self.global_steps - self.log_steps,
            )
            self.progress.update(
                status_line(
                    self.cfg, self.stats, self.global_steps, now - self.t0, self.start_steps
                )
            )
        self.last_log, self.log_steps = now, self.global_steps

    def _warn_entropy_collapse(self, now: float) -> None:
        """Say once, on the console, when the policy has stopped exploring and improving."""
        w, target = self.stats.window, self.cfg.target_return
        stalled = now - self.last_progress >= STALL_S
        if self.entropy_warned or w[0] == 0 or self.solved_at is not None or not stalled:
            return
        entropy, uniform = w[4] / w[0], self.model.dist.max_entropy
        if uniform and entropy < ENTROPY_COLLAPSE * uniform:
            self.entropy_warned = True
            self.progress.print(
                f"warning: the policy's entropy fell to {entropy:.3f} (uniform: {uniform:.2f})"
                + (f" before the target {target:g} was reached" if target is not None else "")
                + f" and the 100-episode mean is flat for {now - self.last_progress:.0f} s;"
                " it has almost stopped exploring (try --entropy-coef 0.01)"
            )

    def _statistics(self) -> dict[str, RunningMeanStd]:
        """The shared running statistics of this run, by the name checkpoints use."""
        named = {"obs_rms": self.obs_rms, "return_rms": self.return_rms}
        return {k: v for k, v in named.items() if v is not None}

    def _merge_remote_statistics(self, gathered: list[torch.Tensor] | None) -> None:
        if not gathered:
            return
        others = [g for rank, g in enumerate(gathered) if rank != self.rank]
        offset = 0
        for rms in self._statistics().values():
            n = rms.rows.shape[1]
            rms.set_remote([g[offset : offset + n] for g in others])
            offset += n

    def _current_buffers(self) -> torch.Tensor:
        """The model's buffers (observation mean/std) as the workers now compute them."""
        if self.obs_rms is not None:
            self.model.set_obs_stats(*self.obs_rms.mean_std())
        return self.buffers

    def checkpoint_state(self, snapshot: Snapshot | None = None, **extra) -> dict[str, Any]:
        """What a checkpoint holds: the live model, or the ``snapshot`` an evaluation scored."""
        self._count_steps()
        self._current_buffers()
        state = self.model.state_dict()
        if snapshot is not None:
            model = self.spec.build()
            flatten_parameters(model).copy_(snapshot["params"])
            if "buffers" in snapshot:
                flatten_buffers(model).copy_(snapshot["buffers"])
            state = model.state_dict()
        return {
            "model": state,
            "optimizer": self.optimizer.state_dict(),
            "model_spec": self.spec.to_dict(),
            "config": self.rundir.config,
            "env_id": self.cfg.env,
            "env_kwargs": dict(self.cfg.env_kwargs),
            "env_steps": self.global_steps,
            "wall_time": self.elapsed_before + time.monotonic() - self.t0,
            **{k: v.state() for k, v in self._statistics().items()},
            **extra,
        }


def model_spec(cfg: A3CConfig, spaces: EnvSpaces) -> ModelSpec:
    """The policy the config asks for, on the env's (adapted) spaces."""
    image = len(spaces.obs_shape) == 3
    wanted = {"mlp": False, "cnn": True}.get(cfg.policy, image)
    if wanted != image:
        kind = "images" if image else "vectors"
        raise UsageError(f"--policy {cfg.policy} does not fit {cfg.env}'s observations ({kind})")
    spec = ModelSpec(
        spaces.obs_shape,
        spaces.action,
        spaces.obs_dtype,
        cfg.hidden,
        cfg.activation,
        cfg.normalize_obs and not image,  # pixels are scaled by 1/255 instead
        cfg.separate_networks,
        cfg.log_std_init,
        cfg.squash_actions,
        cfg.lstm_size if cfg.policy == "lstm" else 0,
        cfg.conv,
    )
    spec.check(UsageError)
    return spec


def _reward_threshold(env_id: str) -> float | None:
    try:
        threshold = gym.spec(env_id.rpartition(":")[2]).reward_threshold
    except gym.error.Error:
        return None
    return None if threshold is None else float(threshold)


def _main(args: argparse.Namespace) -> int:
    return train(config_from_args(args)).exit_code


def main(argv: list[str] | None = None) -> int:
    return run_cli(build_parser(), _main, argv)


if __name__ == "__main__":
    sys.exit(main())
