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
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from a3c.callbacks import STOPPED, Callback, RunEvent, call_all, finite_or_none
from a3c.cli import build_parser, config_from_args
from a3c.config import A3CConfig
from a3c.envs import env_spaces
from a3c.envs.spaces import EnvSpaces
from a3c.evaluation import build_model, score_greedy
from a3c.normalize import RunningMeanStd, mean_std_of
from a3c.policy import ModelSpec
from a3c.telemetry import STAT, RunStats, status_line, telemetry_layout, write_logs
from a3c.worker import SharedRun, run_worker
from hogwild.checkpoint import load_checkpoint
from hogwild.cli import run_cli
from hogwild.console import Progress
from hogwild.errors import UsageError
from hogwild.evaluator import Evaluator, Snapshot, resolve_device
from hogwild.flat import flatten_buffers, flatten_parameters
from hogwild.optim import OPTIMIZERS
from hogwild.procs import FailurePolicy, WorkerGroup
from hogwild.run import Generation, RunEnd, RunLoop

log = logging.getLogger("a3c.train")

#: Warn when the policy's entropy is below this fraction of the uniform policy's while
#: the 100-episode mean has not improved for STALL_S seconds (a near-deterministic policy
#: that still improves, as on MountainCar-v0 at ~4% of uniform, is left alone).
ENTROPY_COLLAPSE = 0.1
STALL_S = 30.0


@dataclasses.dataclass
class RunHistory:
    """What the run has achieved so far. Every checkpoint keeps it, so a resumed run goes
    on with the same record: the same 100-episode window, and a first evaluation that
    cannot replace a better ``best.pt``. Times are seconds of the whole run (all sessions).
    """

    best_eval: float = -math.inf
    best_eval_step: int | None = None
    solved_at: tuple[float, int] | None = None  # (seconds, env steps)
    best_100: tuple[float, float, int] | None = None  # (mean, seconds, env steps)
    entropy_warned: bool = False
    recent: list[float] = dataclasses.field(default_factory=list)  # the last 100 returns
    episodes: int = 0

    def state(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> RunHistory:
        names = {f.name for f in dataclasses.fields(cls)}
        history = cls(**{k: v for k, v in state.items() if k in names})
        history.solved_at = _tuple(history.solved_at)
        history.best_100 = _tuple(history.best_100)
        return history


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


def train(cfg: A3CConfig, callbacks: Sequence[Callback] = ()) -> A3CResult:
    """Run A3C to the end (budget, time, target, signal or failure) and say how it went.

    ``callbacks`` are called with a :class:`~a3c.callbacks.RunEvent` at each log point,
    evaluation and at the end; one that returns False stops the run.
    The calling process runs single-threaded while workers are forked (see
    :class:`~hogwild.procs.WorkerGroup`); its thread count is restored afterwards.
    """
    for callback in callbacks:
        if not callable(callback):
            raise UsageError(f"a callback must be callable, got {callback!r}")
    threads = torch.get_num_threads()
    try:
        return A3CRun(cfg, callbacks).run()
    finally:
        torch.set_num_threads(threads)


class A3CRun:
    """The main process of one run (one node's, under ``torchrun``): A3C's side of the
    engine's :class:`~hogwild.run.RunLoop`, which runs the plumbing around it."""

    def __init__(self, cfg: A3CConfig, callbacks: Sequence[Callback] = ()) -> None:
        self.cfg = cfg
        self.callbacks = list(callbacks)
        spaces = env_spaces(cfg.env, **cfg.env_options())
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
        self.history = RunHistory()
        saved_statistics: dict[str, torch.Tensor] = {}
        if cfg.resume:
            run_dir, saved_statistics = self._restore(cfg.resume)
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
        self.loop = RunLoop(  # under torchrun: joins the group, takes rank 0's parameters
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
        if self.rank != 0:
            # Every node restores the run's statistics but only rank 0 as its own: the
            # others hold them as "the other nodes'" until the first round says so, or
            # merging the nodes' statistics would count them once per node.
            for name, saved in saved_statistics.items():
                self._statistics()[name].load(saved, remote=True)

        self.rundir = None
        if self.is_main:
            name = f"{cfg.algo}_{cfg.env}_s{cfg.seed}"
            self.rundir = self.loop.open_run_dir(name, cfg, cfg.run_name, resume_dir=run_dir)

        self.stats = RunStats()
        self.stats.env_steps = self.start_steps
        self.stats.recent.extend(self.history.recent)
        self.stats.episodes = self.history.episodes
        self.global_steps = self.start_steps
        self._synced_local = 0
        self._round_local = 0  # this node's count as sent in the round in flight
        self.evaluator: Evaluator | None = None
        if cfg.eval_interval > 0 and self.is_main:
            self.evaluator = Evaluator(
                functools.partial(build_model, self.spec.to_dict()),
                functools.partial(
                    score_greedy,
                    env_id=cfg.env,
                    env_kwargs=cfg.env_options(),
                    episodes=cfg.eval_episodes,
                    seed=cfg.seed + 10_000,
                    max_steps=cfg.eval_max_steps,
                ),
                self.flat.numel(),
                buffers_numel=self.buffers.numel(),
                device=cfg.eval_device,
                seed=cfg.seed,
            )
        self.t0 = self.last_log = self.last_eval = self.last_progress = time.monotonic()
        self.log_steps = self.global_steps

    def _restore(self, path: str) -> tuple[Path, dict[str, torch.Tensor]]:
        """Model, optimizer, step count, history and random generators from ``path``; the
        run folder, and the saved statistics (loaded already; see ``__init__`` for nodes)."""
        ckpt = load_checkpoint(path, required=("model", "optimizer", "model_spec", "env_steps"))
        saved = ModelSpec.from_dict(ckpt["model_spec"])
        if saved != self.spec:
            differs = ", ".join(
                f"{f.name} {getattr(saved, f.name)!r} (this run: {getattr(self.spec, f.name)!r})"
                for f in dataclasses.fields(saved)
                if getattr(saved, f.name) != getattr(self.spec, f.name)
            )
            raise UsageError(
                f"{path}: its policy does not fit this run's (checkpoint of "
                f"{ckpt.get('env_id', 'an unknown env')}): {differs}"
            )
        try:
            self.model.load_state_dict(ckpt["model"])
            self.optimizer.load_state_dict(ckpt["optimizer"])
        except (RuntimeError, ValueError, KeyError) as e:
            raise UsageError(f"{path}: cannot restore ({str(e).splitlines()[0]})") from None
        self.start_steps = int(ckpt["env_steps"])
        statistics = {}
        for name, rms in self._statistics().items():
            if name not in ckpt:
                raise UsageError(f"{path}: checkpoint has no {name} (was {name} off in that run?)")
            try:
                rms.load(ckpt[name])
            except (TypeError, ValueError) as e:
                raise UsageError(f"{path}: bad {name}: {e}") from None
            statistics[name] = ckpt[name]
        self.elapsed_before = float(ckpt.get("wall_time", 0.0))
        try:
            if "history" in ckpt:
                self.history = RunHistory.from_state(ckpt["history"])
            if "rng" in ckpt:
                set_rng_state(ckpt["rng"])
        except (TypeError, ValueError, KeyError, RuntimeError) as e:
            raise UsageError(f"{path}: bad run history or random state ({e})") from None
        run_dir = Path(path).parent
        self.history.best_eval = max(self.history.best_eval, _saved_best_eval(run_dir / "best.pt"))
        return run_dir, statistics

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
                SharedRun(
                    self.spec,
                    self.flat,
                    self.optimizer,
                    self.env_steps,
                    self.published_steps,
                    self.loop.pool,
                    self.obs_rms,
                    self.return_rms,
                ),
            ),
            cfg.workers,
            worker_seed(cfg.seed, self.rank, self.start_steps),
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
        reason = self._log(now) or reason
        self.published_steps.fill_(self.global_steps)
        if self.global_steps >= self.cfg.total_steps:
            return reason or "step budget reached"
        return reason

    def round_counters(self) -> list[float]:
        self._count_steps()
        self._round_local = self._synced_local
        return [float(self._round_local)]

    def round_gather(self) -> torch.Tensor | None:
        """This node's running statistics, one vector, for the other nodes to merge."""
        stats = list(self._statistics().values())
        return torch.cat([rms.local() for rms in stats]) if stats else None

    def on_round(self, totals: torch.Tensor, gathered: list[torch.Tensor] | None) -> None:
        """The run's steps are every node's steps as of the round, plus this node's since
        it sent its own count (not since the last tick: the count would dip each round)."""
        self._merge_remote_statistics(gathered)
        self._count_steps()
        counted = self.start_steps + int(totals[0]) + self._synced_local - self._round_local
        # Never backwards (a linear schedule follows it): another node's count can only
        # have grown since the last round, but a float sum is not worth trusting with that.
        self.global_steps = max(self.global_steps, counted)
        self.published_steps.fill_(self.global_steps)

    def finish(self, end: RunEnd) -> dict[str, float] | None:
        reason = end.reason or ("failure" if end.exit_code == 1 else "all workers finished")
        self.wall = end.seconds
        stats, metrics, written = self.stats, None, {}
        if self.rundir is not None:
            written = write_logs(
                self.rundir,
                stats,
                self.global_steps,
                max(time.monotonic() - self.last_log, 1e-9),
                self.global_steps - self.log_steps,
                self.cfg.algo,
            )
            metrics = {
                "mean_return_100": stats.mean_100,
                "best_eval_return": self.history.best_eval,
                "env_steps": self.global_steps,
            }
        if self.is_main or end.exit_code:
            solved, path = self.history.solved_at, end.checkpoint
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
            self.history.solved_at,
            self.history.best_100,
            self.history.best_eval,
            end.exit_code,
        )
        self._call_back("end", time.monotonic(), written)
        return metrics

    # -- A3C's decisions -------------------------------------------------------------------
    def _count_steps(self) -> None:
        """Fold this node's new env steps into the global count: telemetry's, or the
        workers' shared counters where they are ahead (a worker that died had steps it
        never reported, which its counter keeps)."""
        local = max(self.stats.env_steps, int(self.env_steps.sum())) - self.start_steps
        self.global_steps += local - self._synced_local
        self._synced_local = local

    def _evaluate(self, ready: Sequence[Any], now: float) -> str | None:
        if self.evaluator is None:
            return None
        reason = None
        history = self.history
        for step, metrics, snapshot in self.evaluator.collect(ready):
            self.rundir.scalars({f"eval/{k}": v for k, v in metrics.items()}, step)
            score = metrics["mean_return"]
            if score > history.best_eval and snapshot is None:
                # Its snapshot was dropped: keep the old best.pt and its record, rather
                # than call "best" what best.pt does not hold.
                log.warning("no snapshot kept for the evaluation at step %d", step)
            elif score > history.best_eval:
                state = self.checkpoint_state(snapshot, eval_mean_return=score)
                if self.loop.save_checkpoint(state, self.rundir.path / "best.pt") is not None:
                    history.best_eval, history.best_eval_step = score, step
            target = self.cfg.target_return
            if self.cfg.target_metric == "eval" and target is not None and score >= target:
                reason = f"evaluation mean return {score:.1f} reached the target"
            if not self._call_back("eval", now, eval_mean_return=score):
                reason = reason or STOPPED
        if now - self.last_eval >= self.cfg.eval_interval and self.evaluator.offer(
            self.flat, self.global_steps, self.buffers, keep=self._offered_state
        ):
            self.last_eval = now
        return reason

    def _offered_state(self) -> dict[str, Any]:
        """What ``best.pt`` keeps beside an offered snapshot (copied only when the evaluator
        takes one: a busy evaluator costs no optimizer copy per tick). One read of the
        statistics for both: the scored model normalises with exactly those it keeps."""
        state = self._run_state()
        self._set_obs_stats(state)
        return state

    def _track_best_100(self, now: float) -> bool:
        """Note a new best 100-episode mean; whether the window is full."""
        stats, history = self.stats, self.history
        full = len(stats.recent) == stats.recent.maxlen
        if full and (history.best_100 is None or stats.mean_100 > history.best_100[0]):
            history.best_100 = (stats.mean_100, self._run_seconds(now), self.global_steps)
            self.last_progress = now
        return full

    def _check_solved(self, now: float) -> str | None:
        stats, target, history = self.stats, self.cfg.target_return, self.history
        full = self._track_best_100(now)
        if history.solved_at is not None or target is None or not full or stats.mean_100 < target:
            return None
        history.solved_at = (self._run_seconds(now), self.global_steps)
        if self.rundir is not None:
            self.rundir.scalar("charts/solved_at_seconds", history.solved_at[0], self.global_steps)
        if self.cfg.target_metric == "train":
            return f"100-episode mean return {stats.mean_100:.1f} reached the target"
        return None

    def _log(self, now: float) -> str | None:
        """Log when due; a reason to stop if a callback asked for one."""
        if now - self.last_log < self.cfg.log_interval:
            return None
        self._warn_entropy_collapse(now)
        written: dict[str, float] = {}
        if self.rundir is not None:
            written = write_logs(
                self.rundir,
                self.stats,
                self.global_steps,
                now - self.last_log,
                self.global_steps - self.log_steps,
                self.cfg.algo,
            )
            self.progress.update(
                status_line(
                    self.cfg, self.stats, self.global_steps, now - self.t0, self.start_steps
                )
            )
        self.last_log, self.log_steps = now, self.global_steps
        return None if self._call_back("log", now, written) else STOPPED

    def _call_back(
        self,
        kind: str,
        now: float,
        stats: dict[str, float] | None = None,
        eval_mean_return: float | None = None,
    ) -> bool:
        """Call the callbacks (main process only); False if one asked to stop."""
        if not self.callbacks or not self.is_main:
            return True
        history, best_100 = self.history, self.history.best_100
        event = RunEvent(
            kind=kind,
            env_steps=self.global_steps,
            seconds=self._run_seconds(now),
            episodes=self.stats.episodes,
            mean_return_100=self.stats.mean_100 if self.stats.recent else None,
            best_mean_100=best_100[0] if best_100 else None,
            eval_mean_return=eval_mean_return,
            best_eval=finite_or_none(history.best_eval),
            stats=dict(stats or {}),
            run_dir=self.rundir.path if self.rundir else None,
            _writer=self.rundir.scalar if self.rundir else None,
        )
        return call_all(self.callbacks, event)

    def _warn_entropy_collapse(self, now: float) -> None:
        """Say once, on the console, when the policy has stopped exploring and improving."""
        w, target = self.stats.window, self.cfg.target_return
        stalled = now - self.last_progress >= STALL_S
        history = self.history
        updates = w[STAT["updates"]]
        if history.entropy_warned or updates == 0 or history.solved_at is not None or not stalled:
            return
        entropy, uniform = w[STAT["entropy"]] / updates, self.model.dist.max_entropy
        if uniform and entropy < ENTROPY_COLLAPSE * uniform:
            history.entropy_warned = True
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

    def _set_obs_stats(self, state: dict[str, Any]) -> None:
        """The model's buffers (observation mean/std) from a checkpoint ``state``'s
        statistics, so the two always agree."""
        if self.obs_rms is not None:
            self.model.set_obs_stats(*mean_std_of(state["obs_rms"]))

    def checkpoint_state(self, snapshot: Snapshot | None = None, **extra) -> dict[str, Any]:
        """What a checkpoint holds: the live model and run, or an evaluated ``snapshot``
        with what was kept when it was offered (optimizer, statistics, steps, history)."""
        if snapshot is None:
            self._count_steps()
            state = self._run_state()
            self._set_obs_stats(state)  # the statistics saved beside it, read once
            return {"model": self.model.state_dict(), **state, **extra}
        model = self.spec.build()
        flatten_parameters(model).copy_(snapshot["params"])
        if "buffers" in snapshot:
            flatten_buffers(model).copy_(snapshot["buffers"])
        return {"model": model.state_dict(), **snapshot["kept"], **extra}

    def _run_state(self) -> dict[str, Any]:
        """Everything a checkpoint holds but the model, as of now (copies, not views)."""
        self._track_best_100(time.monotonic())
        self.history.recent = list(self.stats.recent)
        self.history.episodes = self.stats.episodes
        return {
            "optimizer": self.optimizer.state_dict(),
            "model_spec": self.spec.to_dict(),
            "config": self.rundir.config,
            "env_id": self.cfg.env,
            "env_kwargs": self.cfg.env_options(),
            "env_steps": self.global_steps,
            "wall_time": self._run_seconds(time.monotonic()),
            "history": self.history.state(),
            "rng": rng_state(),
            **{k: v.state() for k, v in self._statistics().items()},
        }

    def _run_seconds(self, now: float) -> float:
        """Seconds of the whole run, earlier sessions included."""
        return self.elapsed_before + now - self.t0


def worker_seed(seed: int, rank: int, start_steps: int) -> int:
    """The first worker's seed on node ``rank``; a resumed run (``start_steps`` > 0) draws
    fresh seeds from its step count, so it replays none of the randomness it already
    saw, yet resuming one checkpoint twice (one worker) gives the same run twice."""
    if start_steps == 0:
        return seed + 100_003 * rank
    return int(np.random.SeedSequence([seed, rank, start_steps]).generate_state(1)[0])


def rng_state() -> dict[str, Any]:
    """The main process's random generators, in types a ``weights_only`` load accepts."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "numpy": (name, keys.tolist(), pos, has_gauss, cached),
        "random": random.getstate(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    version, internal, gauss = state["random"]
    random.setstate((version, tuple(internal), gauss))


def _saved_best_eval(path: Path) -> float:
    """The score behind the run's ``best.pt`` (-inf if none): a record that a checkpoint
    taken before it was written does not know of, and a resume must not undercut."""
    if not path.exists():
        return -math.inf
    try:
        return float(load_checkpoint(path).get("eval_mean_return", -math.inf))
    except UsageError as e:
        log.warning("ignoring the unreadable %s: %s", path, e)
        return -math.inf


def _tuple(value: Any) -> tuple | None:
    return None if value is None else tuple(value)


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
