"""Train an actor-critic with A3C: ``python -m a3c.train --workers 8``.

The main process builds the shared model and optimizer, starts the workers and the
evaluator, and from then on only consumes: telemetry from the workers, scores from the
evaluator. It alone writes TensorBoard, the console line and checkpoints, and decides
when the run ends (step budget, time limit, target return, a signal, or a failure).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import functools
import logging
import math
import sys
import time
from multiprocessing.connection import wait
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from a3c.config import A3CConfig
from a3c.envs import env_spaces
from a3c.evaluation import build_model, score_greedy
from a3c.model import ModelSpec
from a3c.worker import STATS, run_worker, telemetry_layout
from hogwild.checkpoint import load_checkpoint, save_checkpoint
from hogwild.cli import nonnegative_int, positive_float, positive_int, run_cli, unit_float
from hogwild.errors import UsageError
from hogwild.evaluator import Evaluator, resolve_device
from hogwild.flat import flatten_parameters
from hogwild.optim import OPTIMIZERS, SharedOptimizer
from hogwild.pool import BufferPool
from hogwild.procs import FailurePolicy, WorkerFailure, WorkerGroup
from hogwild.rundir import Progress, RunDir
from hogwild.shutdown import GracefulShutdown

log = logging.getLogger("a3c.train")


@dataclasses.dataclass
class RunResult:
    run_dir: Path
    env_steps: int
    wall_time: float
    mean_return_100: float
    solved_at: tuple[float, int] | None
    best_eval: float
    exit_code: int


class _Stats:
    """What the main process knows of the run, folded in from telemetry messages."""

    def __init__(self) -> None:
        self.recent = collections.deque(maxlen=100)
        self.env_steps = 0
        self.episodes = 0
        self.window = np.zeros(len(STATS))
        self.window_returns: list[float] = []
        self.window_lengths: list[int] = []

    def add(self, buf: dict[str, torch.Tensor]) -> None:
        stats = buf["stats"].numpy()
        self.window += stats
        self.env_steps += int(stats[1])
        n = int(buf["n_episodes"])
        if n:
            rets = buf["ep_return"][:n].tolist()
            self.recent.extend(rets)
            self.window_returns.extend(rets)
            self.window_lengths.extend(buf["ep_length"][:n].tolist())
            self.episodes += n

    @property
    def mean_100(self) -> float:
        return float(np.mean(self.recent)) if self.recent else float("nan")


def train(cfg: A3CConfig) -> RunResult:
    obs_dim, n_actions = env_spaces(cfg.env)
    if cfg.target_return is None:
        spec_ = gym.spec(cfg.env.rpartition(":")[2]) if ":" not in cfg.env else None
        if spec_ is not None and spec_.reward_threshold is not None:
            cfg.target_return = float(spec_.reward_threshold)
    resolve_device(cfg.eval_device)
    spec = ModelSpec(obs_dim, n_actions, cfg.hidden, cfg.activation)
    model = spec.build()
    flat = flatten_parameters(model)
    optimizer = _make_optimizer(cfg, flat)
    env_steps = torch.zeros(cfg.workers, dtype=torch.int64)
    start_steps, elapsed_before, run_dir = 0, 0.0, None
    if cfg.resume:
        ckpt = load_checkpoint(
            cfg.resume, required=("model", "optimizer", "model_spec", "env_steps")
        )
        saved = ModelSpec.from_dict(ckpt["model_spec"])
        if saved != spec:
            raise UsageError(f"{cfg.resume}: checkpoint is for {saved}, this run builds {spec}")
        try:
            model.load_state_dict(ckpt["model"])
            optimizer.load_state_dict(ckpt["optimizer"])
        except (RuntimeError, ValueError, KeyError) as e:
            raise UsageError(f"{cfg.resume}: cannot restore ({str(e).splitlines()[0]})") from None
        start_steps = int(ckpt["env_steps"])
        elapsed_before = float(ckpt.get("wall_time", 0.0))
        run_dir = Path(cfg.resume).parent
    flat.share_memory_()
    optimizer.share_memory()
    env_steps[0] = start_steps
    env_steps.share_memory_()

    run = RunDir(cfg.logdir, f"a3c_{cfg.env}_s{cfg.seed}", cfg, cfg.run_name, resume_dir=run_dir)
    pool = BufferPool(telemetry_layout(), producers=cfg.workers, slots=4)
    stats = _Stats()
    stats.env_steps = start_steps
    group = WorkerGroup(
        run_worker,
        (cfg, spec, flat, optimizer, env_steps, pool),
        cfg.workers,
        cfg.seed,
        num_threads=cfg.threads_per_worker,
        start_method=cfg.start_method,
        policy=FailurePolicy(cfg.on_worker_failure, cfg.max_restarts),
        on_restart=lambda rank: [_consume(pool, s, stats) for s in pool.reset_producer(rank)],
    )
    evaluator = None
    if cfg.eval_interval > 0:
        evaluator = Evaluator(
            functools.partial(build_model, spec.to_dict()),
            functools.partial(
                score_greedy, env_id=cfg.env, episodes=cfg.eval_episodes, seed=cfg.seed + 10_000
            ),
            flat.numel(),
            device=cfg.eval_device,
            seed=cfg.seed,
        )

    def checkpoint(name: str, params: torch.Tensor | None = None, **extra) -> Path:
        state = model.state_dict()
        if params is not None:
            snapshot = spec.build()
            flatten_parameters(snapshot).copy_(params)
            state = snapshot.state_dict()
        return save_checkpoint(
            {
                "model": state,
                "optimizer": optimizer.state_dict(),
                "model_spec": spec.to_dict(),
                "config": run.config,
                "env_id": cfg.env,
                "env_steps": stats.env_steps,
                "wall_time": elapsed_before + time.monotonic() - t0,
                **extra,
            },
            run.path / name,
        )

    progress = Progress()
    progress.print(f"run folder: {run.path}")
    best_eval = -math.inf
    solved_at: tuple[float, int] | None = None
    exit_code = 0
    stop_reason = "step budget reached"
    with GracefulShutdown(on_force=lambda: _kill_all(group, evaluator)) as shutdown:
        t0 = time.monotonic()
        group.start()
        if evaluator is not None:
            evaluator.start()
        last_log = last_eval = last_ckpt = t0
        log_steps = stats.env_steps
        readers = pool.readers()
        try:
            while True:
                waitables = [*readers, *group.sentinels()]
                if evaluator is not None:
                    waitables += evaluator.waitables()
                ready = wait(waitables, timeout=0.1)
                for reader in ready:
                    rank = pool.owner(reader)
                    if rank is not None:
                        while (slot := pool.take(rank, 0)) is not None:
                            _consume(pool, slot, stats)
                if group.check(ready):
                    readers = pool.readers()
                now = time.monotonic()
                if evaluator is not None:
                    for step, metrics, params in evaluator.collect(ready):
                        run.scalars({f"eval/{k}": v for k, v in metrics.items()}, step)
                        score = metrics["mean_return"]
                        if score > best_eval:
                            best_eval = score
                            checkpoint("best.pt", params, eval_mean_return=score)
                        if (
                            cfg.target_metric == "eval"
                            and cfg.target_return is not None
                            and score >= cfg.target_return
                        ):
                            stop_reason = f"evaluation mean return {score:.1f} reached the target"
                    if now - last_eval >= cfg.eval_interval and evaluator.offer(
                        flat, stats.env_steps
                    ):
                        last_eval = now
                if (
                    solved_at is None
                    and cfg.target_return is not None
                    and len(stats.recent) == stats.recent.maxlen
                    and stats.mean_100 >= cfg.target_return
                ):
                    solved_at = (now - t0, stats.env_steps)
                    run.scalar("charts/solved_at_seconds", now - t0, stats.env_steps)
                    if cfg.target_metric == "train":
                        stop_reason = (
                            f"100-episode mean return {stats.mean_100:.1f} reached the target"
                        )
                if now - last_log >= cfg.log_interval:
                    _write_logs(run, stats, now - last_log, stats.env_steps - log_steps)
                    last_log, log_steps = now, stats.env_steps
                    progress.update(_status(cfg, stats, now - t0, start_steps))
                if now - last_ckpt >= cfg.checkpoint_interval:
                    checkpoint("checkpoint.pt")
                    last_ckpt = now
                if shutdown.requested:
                    stop_reason, exit_code = "interrupted", shutdown.exit_code
                    break
                if stop_reason != "step budget reached":
                    break
                if stats.env_steps >= cfg.total_steps or group.finished:
                    break
                if cfg.time_limit is not None and now - t0 >= cfg.time_limit:
                    stop_reason = "time limit reached"
                    break
        except WorkerFailure as e:
            progress.close()
            print(f"a3c.train: error: {e}", file=sys.stderr)
            stop_reason, exit_code = "worker failure", 1
        finally:
            group.stop(timeout=5.0, drain=lambda: _drain(pool, stats))
            _drain(pool, stats)
            if evaluator is not None:
                evaluator.stop()
            pool.close()
            wall = time.monotonic() - t0
            path = checkpoint("checkpoint.pt")
            progress.close()
            _write_logs(
                run, stats, max(time.monotonic() - last_log, 1e-9), stats.env_steps - log_steps
            )
            run.close(
                {
                    "mean_return_100": stats.mean_100,
                    "best_eval_return": best_eval,
                    "env_steps": stats.env_steps,
                }
            )
    progress.print(
        f"{stop_reason}: {stats.env_steps} env steps in {wall:.1f} s "
        f"({(stats.env_steps - start_steps) / max(wall, 1e-9):,.0f} steps/s), "
        f"100-episode mean return {stats.mean_100:.1f}"
        + (f", solved after {solved_at[0]:.1f} s / {solved_at[1]} steps" if solved_at else "")
        + f"; checkpoint {path}"
    )
    return RunResult(
        run.path, stats.env_steps, wall, stats.mean_100, solved_at, best_eval, exit_code
    )


def _make_optimizer(cfg: A3CConfig, flat: torch.Tensor) -> SharedOptimizer:
    return OPTIMIZERS[cfg.optimizer](flat, lr=cfg.lr, num_workers=cfg.workers)


def _consume(pool: BufferPool, slot: int, stats: _Stats) -> None:
    stats.add(pool.view(slot))
    pool.release(slot)


def _drain(pool: BufferPool, stats: _Stats) -> None:
    for rank in range(pool.producers):
        while (slot := pool.take(rank, 0)) is not None:
            _consume(pool, slot, stats)


def _kill_all(group: WorkerGroup, evaluator: Evaluator | None) -> None:
    group.kill_now()
    if evaluator is not None:
        evaluator.group.kill_now()


def _write_logs(run: RunDir, stats: _Stats, dt: float, steps: int) -> None:
    w = stats.window
    step = stats.env_steps
    if stats.window_returns:
        run.scalars(
            {
                "charts/episodic_return": float(np.mean(stats.window_returns)),
                "charts/episodic_length": float(np.mean(stats.window_lengths)),
                "charts/mean_return_100": stats.mean_100,
            },
            step,
        )
    if w[0] > 0:
        n = w[0]
        run.scalars(
            {
                "losses/policy_loss": w[2] / n,
                "losses/value_loss": w[3] / n,
                "losses/entropy": w[4] / n,
                "losses/grad_norm": w[5] / n,
                "charts/learning_rate": w[6] / n,
                "perf/env_steps_per_sec": steps / dt,
                "perf/updates_per_sec": n / dt,
                "charts/skipped_updates": w[7],
            },
            step,
        )
    stats.window[:] = 0
    stats.window_returns.clear()
    stats.window_lengths.clear()


def _status(cfg: A3CConfig, stats: _Stats, elapsed: float, start_steps: int) -> str:
    rate = (stats.env_steps - start_steps) / max(elapsed, 1e-9)
    left = max(cfg.total_steps - stats.env_steps, 0) / max(rate, 1e-9)
    return (
        f"steps {stats.env_steps:,}/{cfg.total_steps:,}  {rate:,.0f} steps/s  "
        f"episodes {stats.episodes:,}  mean return(100) {stats.mean_100:.1f}  "
        f"elapsed {elapsed:.0f}s  ETA {left:.0f}s"
    )


def _hidden(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected sizes like 128,128, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"sizes must be positive, got {text!r}")
    return sizes


def build_parser() -> argparse.ArgumentParser:
    d = A3CConfig()
    p = argparse.ArgumentParser(
        prog="a3c.train",
        description="Train an actor-critic on a Gymnasium environment with "
        "A3C: N worker processes update one shared model lock-free.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    g = p.add_argument_group("run")
    g.add_argument("--env", default=d.env, help="Gymnasium id, or module:Env-vN to import module")
    g.add_argument("--workers", type=positive_int, default=d.workers, help="worker processes")
    g.add_argument(
        "--envs-per-worker",
        type=positive_int,
        default=d.envs_per_worker,
        help="environments each worker steps with one batched forward pass",
    )
    g.add_argument(
        "--total-steps",
        type=positive_int,
        default=d.total_steps,
        help="stop after this many env steps (all workers together)",
    )
    g.add_argument("--time-limit", type=positive_float, default=None, help="stop after seconds")
    g.add_argument(
        "--target-return",
        type=float,
        default=None,
        help="stop when --target-metric reaches it "
        "(default: the env's reward_threshold, e.g. 475 for CartPole-v1)",
    )
    g.add_argument(
        "--target-metric",
        choices=("train", "eval"),
        default=d.target_metric,
        help="train: mean return of the last 100 training episodes (the standard 'solved'); "
        "eval: the evaluator's mean greedy return",
    )
    g.add_argument("--seed", type=int, default=d.seed)
    g = p.add_argument_group("algorithm")
    g.add_argument("--n-steps", type=positive_int, default=d.n_steps, help="rollout length")
    g.add_argument("--gamma", type=unit_float, default=d.gamma, help="discount")
    g.add_argument(
        "--gae-lambda",
        type=unit_float,
        default=d.gae_lambda,
        help="GAE lambda (1 = n-step returns)",
    )
    g.add_argument(
        "--optimizer",
        choices=sorted(OPTIMIZERS),
        default=d.optimizer,
        help="shared optimizer (state in shared memory)",
    )
    g.add_argument("--lr", type=positive_float, default=d.lr, help="learning rate")
    g.add_argument(
        "--lr-schedule",
        choices=("constant", "linear"),
        default=d.lr_schedule,
        help="linear: decay to 0 at --total-steps",
    )
    g.add_argument("--entropy-coef", type=float, default=d.entropy_coef)
    g.add_argument("--value-coef", type=float, default=d.value_coef)
    g.add_argument("--max-grad-norm", type=positive_float, default=d.max_grad_norm)
    g.add_argument("--hidden", type=_hidden, default=d.hidden, help="MLP sizes, e.g. 128,128")
    g.add_argument("--activation", choices=("tanh", "relu"), default=d.activation)
    g = p.add_argument_group("engine")
    g.add_argument("--threads-per-worker", type=positive_int, default=d.threads_per_worker)
    g.add_argument(
        "--start-method",
        choices=("fork", "spawn", "forkserver"),
        default=d.start_method,
        help="how workers are started",
    )
    g.add_argument("--on-worker-failure", choices=("restart", "abort"), default=d.on_worker_failure)
    g.add_argument("--max-restarts", type=nonnegative_int, default=d.max_restarts)
    g.add_argument(
        "--max-nonfinite",
        type=positive_int,
        default=d.max_nonfinite,
        help="a worker fails after this many non-finite updates in a row",
    )
    g = p.add_argument_group("evaluation and logging")
    g.add_argument(
        "--eval-interval",
        type=float,
        default=d.eval_interval,
        help="seconds between evaluations (0: no evaluator)",
    )
    g.add_argument("--eval-episodes", type=positive_int, default=d.eval_episodes)
    g.add_argument("--eval-device", choices=("auto", "cpu", "cuda"), default=d.eval_device)
    g.add_argument(
        "--checkpoint-interval",
        type=positive_float,
        default=d.checkpoint_interval,
        help="seconds between periodic checkpoints",
    )
    g.add_argument(
        "--log-interval",
        type=positive_float,
        default=d.log_interval,
        help="seconds between TensorBoard points",
    )
    g.add_argument("--logdir", default=d.logdir, help="parent folder of run folders")
    g.add_argument("--run-name", default=None, help="run folder suffix (default: a3c_ENV_sSEED)")
    g.add_argument(
        "--resume", default=None, metavar="CHECKPOINT", help="continue a run from its checkpoint.pt"
    )
    return p


def config_from_args(args: argparse.Namespace) -> A3CConfig:
    if args.eval_interval < 0:
        raise UsageError("--eval-interval must be 0 (off) or positive")
    return A3CConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(A3CConfig)})


def _main(args: argparse.Namespace) -> int:
    return train(config_from_args(args)).exit_code


def main(argv: list[str] | None = None) -> int:
    return run_cli(build_parser(), _main, argv)


if __name__ == "__main__":
    sys.exit(main())
