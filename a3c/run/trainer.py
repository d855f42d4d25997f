"""The main process of a run: :func:`train` (``python -m a3c.train`` is the command).

The main process builds the shared model and optimizer, starts the workers and the
evaluator, and from then on only consumes: telemetry from the workers, scores from the
evaluator. It alone writes TensorBoard and the console line (through its
:class:`~a3c.run.logger.RunLogger`) and checkpoints, warns of a run that stopped learning
(:mod:`a3c.run.health`), and decides when the run ends (step budget, time limit, target
return, a signal, or a failure).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import multiprocessing as mp
import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch

from a3c.envs import env_spaces, is_multiagent_id
from a3c.envs.make import agent_names
from a3c.learning.algorithms import ALGORITHMS
from a3c.learning.schedules import Horizon
from a3c.run.callbacks import STOPPED, Callback, RunEvent, finite_or_none
from a3c.run.config import A3CConfig
from a3c.run.decoupled import learner_device, run_decoupled
from a3c.run.handoff import Handoff
from a3c.run.health import Health
from a3c.run.logger import RunLogger
from a3c.run.presets import measured_workers, preset_names
from a3c.run.record import A3CResult, rng_state
from a3c.run.resume import BEST, Resumed, restore
from a3c.run.shared_model import SharedModel, as_built
from a3c.run.steps import StepCount
from a3c.run.stopping import StopRules
from a3c.run.telemetry import RunStats, telemetry_layout
from a3c.run.worker import SharedRun, run_worker, worker_rate, worker_rollout
from a3c.scoring import EvalScore, build_model, score_greedy, self_play
from hogwild.console import Progress
from hogwild.errors import UsageError
from hogwild.evaluator import Evaluator, Snapshot, resolve_device
from hogwild.pool import BufferPool
from hogwild.precision import check_amp, resolve_amp
from hogwild.procs import resolve_start_method, torch_threads
from hogwild.run import CHECKPOINT, Generation, RunEnd, RunLoop, Workers
from hogwild.rundir import RunDir
from hogwild.shutdown import GracefulShutdown

log = logging.getLogger("a3c.run.trainer")


def train(cfg: A3CConfig, callbacks: Sequence[Callback] = ()) -> A3CResult:
    """Run A3C to the end (budget, time, target, signal or failure) and say how it went.

    ``callbacks`` are called with a :class:`~a3c.run.callbacks.RunEvent` at each log point,
    evaluation and at the end; one that returns False stops the run.
    The calling process runs single-threaded while workers are forked (see
    :class:`~hogwild.procs.WorkerGroup`); its thread count is restored afterwards.
    """
    for callback in callbacks:
        if not callable(callback):
            raise UsageError(f"a callback must be callable, got {callback!r}")
    # From before the run folder is made: a signal then stops the run with a checkpoint.
    with torch_threads(), GracefulShutdown() as early:
        return A3CRun(cfg, callbacks, early).run()


class A3CRun:
    """The main process of one run (one node's, under ``torchrun``): A3C's side of the
    engine's :class:`~hogwild.run.RunLoop`, which runs the plumbing around it."""

    def __init__(
        self,
        cfg: A3CConfig,
        callbacks: Sequence[Callback] = (),
        shutdown: GracefulShutdown | None = None,
    ) -> None:
        spaces = env_spaces(cfg.env, **cfg.env_options())
        if ALGORITHMS[cfg.algo].decoupled and is_multiagent_id(cfg.env):
            raise UsageError(
                f"--algo {cfg.algo} does not take PettingZoo envs yet; use --algo appo or a3c"
            )
        for flag, share in (("snapshot", cfg.snapshot_games), ("random", cfg.random_games)):
            if share > 0 and not is_multiagent_id(cfg.env):
                raise UsageError(f"--{flag}-games is for PettingZoo games; {cfg.env} is not one")
        resolve_device(cfg.eval_device)
        self.shared = SharedModel(cfg, spaces)
        self.spec, self.model = self.shared.spec, self.shared.model
        self.learner_device = learner_device(cfg, self.spec)
        self.rollouts: Handoff | None = None  # a decoupled algorithm's, actors to learner
        fresh = Resumed.fresh(cfg.total_steps)
        self.resumed = resumed = restore(cfg.resume, cfg, self.shared) if cfg.resume else fresh
        self.history = resumed.history
        self.cfg = cfg = run_config(as_built(cfg, self.spec), self.learner_device, resumed.horizon)
        self.shared.share_memory()
        self.steps = StepCount(cfg.workers, resumed.steps)

        self.progress = Progress()
        self.loop = RunLoop(  # under torchrun: joins the group, takes rank 0's parameters
            cfg,
            "a3c.train",
            telemetry_layout(),
            params=self.shared.flat,
            counters=1,
            progress=self.progress,
            time_limit=cfg.time_limit,
            checkpoint_every=cfg.checkpoint_interval,
            warn=self.progress.print,
            shutdown=shutdown,
        )
        self.rank, self.is_main = self.loop.rank, self.loop.is_main
        if self.rank != 0:
            # Every node restores the run's statistics but only rank 0 as its own: the
            # others hold them as "the other nodes'" until the first round says so, or
            # merging the nodes' statistics would count them once per node.
            for name, saved in resumed.statistics.items():
                self.shared.statistics()[name].load(saved, remote=True)

        self.rundir: RunDir | None = None
        if self.is_main:
            name = f"{cfg.algo}_{cfg.env}_s{cfg.seed}"
            rundir = self.loop.open_run_dir(name, cfg, cfg.run_name, resume_dir=resumed.run_dir)
            assert isinstance(rundir, RunDir)  # rank 0's is a real one
            self.rundir = rundir

        self.stats = RunStats(
            agent_names(cfg.env, cfg.env_options()), self_play(cfg.env, cfg.env_options())
        )
        self.stats.env_steps = resumed.steps
        self.stats.recent.extend(self.history.recent)
        self.stats.episodes = self.history.episodes
        self.evaluator: Evaluator | None = None
        if cfg.eval_interval > 0 and self.is_main:
            self.evaluator = Evaluator(
                functools.partial(build_model, self.spec.to_dict()),
                EvalScore(
                    cfg.env,
                    cfg.env_options(),
                    cfg.eval_episodes,
                    cfg.seed + 10_000,
                    cfg.eval_max_steps,
                ),
                self.shared.flat.numel(),
                buffers_numel=self.shared.buffers.numel(),
                device=cfg.eval_device,
                seed=cfg.seed,
            )
        self.stop_rules = StopRules(cfg, self.history)
        self.health = Health(self.history, self.model.dist.max_entropy, cfg.target_return)
        self.logger = RunLogger(cfg, self.rundir, self.progress, callbacks)
        self.callback_error: Exception | None = None  # the first, raised from train()
        self.last_eval = 0.0  # when the evaluator last took a snapshot (monotonic s)

    @property
    def _dir(self) -> RunDir:
        """The run folder, for what rank 0 alone does (evaluations, callbacks, checkpoints)."""
        assert self.rundir is not None, "only rank 0 has the run folder"
        return self.rundir

    def _keep_best(self, source: Path) -> None:
        """A branch from an evaluated checkpoint (best.pt) keeps it as its own best.pt: the
        model that its record's best evaluation names."""
        try:
            shutil.copyfile(source, self._dir.path / BEST)
        except OSError as e:
            self.progress.print(f"warning: {source} not copied into the new run folder: {e}")

    # -- the run: what the engine's loop asks of A3C ---------------------------------------
    def run(self) -> A3CResult:
        if self.rundir is not None:
            self.progress.print(f"run folder: {self.rundir.path}")
            cfg = self.cfg
            self.progress.print(
                f"{cfg.env}: preset {preset_names(cfg)}, {cfg.algo}, {cfg.workers} workers"
                f" x {cfg.envs_per_worker} envs"
            )
            if self.stats.self_play:
                self.progress.print(
                    f"{cfg.env}: a zero-sum game, one policy in every seat, so its training "
                    "returns sum to 0; its progress is the evaluator's, against a random player"
                    + (
                        " (eval/win_rate*)"
                        if cfg.eval_interval > 0
                        else " (none: --eval-interval 0)"
                    )
                )
            rate = worker_rate(cfg)
            if rate != cfg.lr:
                self.progress.print(
                    f"learning rate {rate:.3g}: --lr {cfg.lr:g} was chosen at {cfg.lr_workers}"
                    f" workers, x sqrt({cfg.lr_workers}/{cfg.workers}) at {cfg.workers}"
                )
            rollout = worker_rollout(cfg)
            if rollout != (cfg.n_steps, cfg.minibatches, cfg.target_kl):
                kl = "" if rollout.target_kl is None else f", KL cap {rollout.target_kl:g}"
                chosen_kl = "none" if cfg.target_kl is None else f"{cfg.target_kl:g}"
                self.progress.print(
                    f"rollouts of {rollout.steps} steps in {rollout.minibatches} minibatches{kl}:"
                    f" --n-steps {cfg.n_steps}, --minibatches {cfg.minibatches} and --target-kl"
                    f" {chosen_kl} were chosen at {cfg.rollout_workers} workers, scaled by"
                    f" {cfg.rollout_workers}/{cfg.workers} (the cap by its inverse) at"
                    f" {cfg.workers}"
                )
            measured = measured_workers(cfg)
            if measured is not None and measured != cfg.workers:
                self.progress.print(
                    f"warning: preset {cfg.preset} was measured with {measured} workers, not"
                    f" {cfg.workers}: its settings may not hold (docs/tuning.md)"
                )
            cores = os.cpu_count() or 1
            if measured is not None and cores > measured and not ALGORITHMS[cfg.algo].decoupled:
                self.progress.print(
                    f"note: {cores} cores here, {cfg.workers} workers: preset {cfg.preset}"
                    f" pins {cfg.algo} to {measured}; --algo ppo uses every core (one learner,"
                    " on CUDA or --learner-threads, beside the actors)"
                )
            resumed = self.resumed
            if resumed.ignored:
                self.progress.print(
                    f"{' and '.join(resumed.ignored)} ignored: a resume from {CHECKPOINT} goes on"
                    f" in its own folder; resume from a copy under another name to branch"
                )
            if resumed.branched_from is not None:
                self.progress.print(
                    f"resumed from {resumed.branched_from} into this new run folder; the run"
                    " it came from and its checkpoint.pt are left as they are"
                )
                if resumed.branch_keeps_best:
                    self._keep_best(Path(resumed.branched_from))
        if self.cfg.amp == "auto":
            native = resolve_amp("auto") == "bf16"
            self.progress.print(
                "--amp auto: learning in bf16" if native
                else "--amp auto: learning in fp32 (this CPU has no bf16 instructions)"
            )  # fmt: skip
        try:
            self.loop.run(self)
        finally:
            if self.rollouts is not None:
                self.rollouts.close()
        if self.callback_error is not None:
            raise self.callback_error
        return self.result

    def next_generation(self, last: Generation | None, telemetry: BufferPool) -> Workers | None:
        """One generation of workers for the whole run; the evaluator starts with it."""
        if last is not None:
            return None
        cfg = self.cfg
        # The workers' clocks start with the loop's: rates, evaluations and stall warnings
        # count from here.
        self.last_eval = self.t0
        self.health.restart(self.t0)
        self.logger.restart(self.t0, self.steps.total)
        target, restartable = run_worker, True
        if ALGORITHMS[cfg.algo].decoupled:
            # A restarted actor could not get its slots back from the learner's side of
            # the pool, nor a learner its CUDA state: a failure stops the run, with a
            # checkpoint.
            target, restartable = run_decoupled, False
            self.rollouts = Handoff.open(self.model, cfg, mp.get_context(cfg.start_method))
        workers = Workers(
            target,
            (
                cfg,
                SharedRun(
                    self.spec,
                    self.shared.flat,
                    self.shared.optimizer,
                    self.steps.per_worker,
                    self.steps.published,
                    telemetry,
                    self.resumed.horizon,
                    self.shared.obs_rms,
                    self.shared.return_rms,
                    self.rollouts,
                    self.learner_device,
                    self.shared.snapshots,
                ),
            ),
            worker_seed(cfg.seed, self.rank, self.steps.start),
            restartable=restartable,
        )
        if self.evaluator is not None:
            self.loop.watch(self.evaluator.start())
        return workers

    def on_message(self, view: dict[str, torch.Tensor]) -> None:
        self.stats.add(view)

    def tick(self, ready: Sequence[Any], now: float) -> str | None:
        self._count_steps()
        reason = self._collect_scores(ready, now)
        self._offer_snapshot(now)
        reason = reason or self._check_solved(now)
        reason = self._log(now) or reason
        self.steps.publish()
        if self.steps.total >= self.cfg.total_steps:
            return reason or "step budget reached"
        return reason

    def round_counters(self) -> list[float]:
        return [float(self.steps.start_round(self.stats.env_steps))]

    def round_gather(self) -> torch.Tensor | None:
        return self.shared.local_statistics()

    def on_round(self, totals: torch.Tensor, gathered: list[torch.Tensor] | None) -> None:
        (all_nodes_steps,) = totals.tolist()  # the one counter of round_counters()
        self.shared.merge_remote(gathered, self.rank)
        self.steps.end_round(int(all_nodes_steps), self.stats.env_steps)

    def finish(self, end: RunEnd) -> dict[str, float] | None:
        reason = end.reason or ("failure" if end.exit_code == 1 else "all workers finished")
        self.wall = end.seconds
        stats, metrics = self.stats, None
        written = self.logger.write(stats, self.steps.total, time.monotonic())
        if stats.self_play and stats.last_eval is None and self.evaluator is not None:
            self._score_at_end()
        if self.rundir is not None:
            metrics = {
                "mean_return_100": stats.mean_100,
                "best_eval_return": self.history.best_eval,
                "env_steps": self.steps.total,
            }
        if self.is_main or end.exit_code:
            solved, path = self.history.solved_at, end.checkpoint
            self.progress.print(
                f"{reason}: {self.steps.total} env steps in {self.wall:.1f} s "
                f"({(self.steps.total - self.steps.start) / max(self.wall, 1e-9):,.0f} steps/s), "
                f"100-episode mean return {stats.mean_100:.1f}"
                + (
                    f", solved after {solved.seconds:.1f} s / {solved.env_steps} steps"
                    if solved
                    else ""
                )
                + (f"; {stats.self_play_summary()}" if stats.self_play else "")
                + (f"; checkpoint {path}" if path else "")
            )
        self.result = A3CResult(
            self.rundir.path if self.rundir else None,
            self.steps.total,
            self.wall,
            stats.mean_100,
            self.history.solved_at,
            self.history.best_100,
            self.history.best_eval,
            end.exit_code,
        )
        self._call_back("end", time.monotonic(), written)
        return metrics

    def _score_at_end(self) -> None:
        """Self-play whose evaluator sent no score (a short run, a busy machine): the final
        policy scored here, so that the run ends with a figure of its progress (the end
        event's, which a3c.tune reads when no log point had one)."""
        cfg, steps = self.cfg, self.steps.total
        metrics = score_greedy(self.model, torch.device("cpu"), steps, env_id=cfg.env,
                               env_kwargs=cfg.env_options(), episodes=cfg.eval_episodes,
                               seed=cfg.seed + 10_000, max_steps=cfg.eval_max_steps)  # fmt: skip
        self.logger.eval_scores(metrics, steps)
        self.stats.last_eval = metrics

    # -- A3C's decisions -------------------------------------------------------------------
    def _count_steps(self) -> None:
        self.steps.count(self.stats.env_steps)

    def _collect_scores(self, ready: Sequence[Any], now: float) -> str | None:
        """The evaluator's new scores, each logged, kept as ``best.pt`` if none scored higher
        (a tie goes to the later policy, trained longer: a win rate against a random player
        sits at 1 for most of a board game's run) and told to the callbacks; a reason to
        stop if one reached the target."""
        if self.evaluator is None:
            return None
        reason = None
        for step, metrics, snapshot in self.evaluator.collect(ready):
            self.logger.eval_scores(metrics, step)
            self.stats.last_eval = metrics
            score = metrics["mean_return"]
            if score >= self.history.best_eval:
                self._save_best(score, step, snapshot)
            reason = self.stop_rules.eval_reason(score) or reason
            if not self._call_back("eval", now, eval_mean_return=score):
                reason = reason or STOPPED
        return reason

    def _save_best(self, score: float, step: int, snapshot: Snapshot | None) -> None:
        """Save the snapshot that scored a new best as ``best.pt``, and record its score."""
        if snapshot is None:
            # Its snapshot was dropped: keep the old best.pt and its record, rather than
            # call "best" what best.pt does not hold.
            log.warning("no snapshot kept for the evaluation at step %d", step)
            return
        state = self.checkpoint_state(snapshot, eval_mean_return=score)
        if self.loop.save_checkpoint(state, self._dir.path / BEST) is not None:
            self.history.best_eval, self.history.best_eval_step = score, step

    def _offer_snapshot(self, now: float) -> None:
        """Offer the evaluator the shared model every ``--eval-interval`` seconds (taken
        only when it has a free slot: training never waits for it)."""
        if self.evaluator is None or now - self.last_eval < self.cfg.eval_interval:
            return
        if self.evaluator.offer(
            self.shared.flat, self.steps.total, self.shared.buffers, keep=self._offered_state
        ):
            self.last_eval = now

    def _offered_state(self) -> dict[str, Any]:
        """What ``best.pt`` keeps beside an offered snapshot (copied only when the evaluator
        takes one: a busy evaluator costs no optimizer copy per tick). One read of the
        statistics for both: the scored model normalises with exactly those it keeps."""
        state = self._run_state()
        self.shared.sync_obs_stats(state)
        return state

    def _check_solved(self, now: float) -> str | None:
        steps = self.steps.total
        if not self.stop_rules.solved_now(self.stats, self._run_seconds(now), steps):
            return None
        solved = self.history.solved_at  # set by solved_now
        if solved is not None:
            self.logger.solved(solved.seconds, steps)
        return self.stop_rules.train_reason(self.stats)

    def _log(self, now: float) -> str | None:
        """Log when due; a reason to stop if a callback asked for one."""
        if not self.logger.due(now):
            return None
        for warning in self.health.warnings(self.stats, now, self.stop_rules.solved):
            self.progress.print(warning)
        steps = self.steps.total
        written = self.logger.write(self.stats, steps, now)
        self.logger.status(self.stats, steps, now - self.t0, self.steps.start)
        return None if self._call_back("log", now, written) else STOPPED

    def _call_back(
        self,
        kind: Literal["log", "eval", "end"],
        now: float,
        stats: dict[str, float] | None = None,
        eval_mean_return: float | None = None,
    ) -> bool:
        """Call the callbacks with the run's figures; False if one asked to stop."""
        if not self.logger.wants_events():
            return True
        history, best_100 = self.history, self.history.best_100
        event = RunEvent(
            kind=kind,
            env_steps=self.steps.total,
            seconds=self._run_seconds(now),
            episodes=self.stats.episodes,
            mean_return_100=self.stats.mean_100 if self.stats.recent else None,
            progress=self.stats.progress,
            best_mean_100=best_100.mean if best_100 else None,
            eval_mean_return=eval_mean_return,
            best_eval=finite_or_none(history.best_eval),
            stats=dict(stats or {}),
            run_dir=self._dir.path,
            _writer=self.logger.scalar,
        )
        try:
            return self.logger.call_back(event)
        except Exception as e:  # stops the run as False does; train() raises the first
            if self.callback_error is None:
                self.callback_error = e
                self.progress.print(f"a callback raised {type(e).__name__}: {e}; stopping")
            return False

    def checkpoint_state(self, snapshot: Snapshot | None = None, **extra: Any) -> dict[str, Any]:
        """What a checkpoint holds: the live model and run, or an evaluated ``snapshot``
        with what was kept when it was offered (optimizer, statistics, steps, history)."""
        if snapshot is None:
            self._count_steps()
            state = self._run_state()
            self.shared.sync_obs_stats(state)  # the statistics saved beside it, read once
            return {"model": self.model.state_dict(), **state, **extra}
        return {"model": self.shared.snapshot_model(snapshot), **snapshot.kept, **extra}

    def _run_state(self) -> dict[str, Any]:
        """Everything a checkpoint holds but the model, as of now (copies, not views)."""
        now = time.monotonic()
        self.stop_rules.track_best_100(self.stats, self._run_seconds(now), self.steps.total)
        self.history.recent = list(self.stats.recent)
        self.history.episodes = self.stats.episodes
        return {
            **self.shared.state(),
            "config": self._dir.config,
            "env_id": self.cfg.env,
            "env_kwargs": self.cfg.env_options(),
            "env_steps": self.steps.total,
            "wall_time": self._run_seconds(time.monotonic()),
            "history": self.history.state(),
            "rng": rng_state(),
        }

    @property
    def t0(self) -> float:
        """When this session's workers started (the engine's loop keeps it)."""
        return self.loop.t0

    def _run_seconds(self, now: float) -> float:
        """Seconds of the whole run, earlier sessions included."""
        return self.resumed.elapsed + now - self.t0


def worker_seed(seed: int, rank: int, start_steps: int) -> int:
    """The first worker's seed on node ``rank``; a resumed run (``start_steps`` > 0) draws
    fresh seeds from its step count, so it replays none of the randomness it already
    saw, yet resuming one checkpoint twice (one worker) gives the same run twice."""
    if start_steps == 0:
        return seed + 100_003 * rank
    return int(np.random.SeedSequence([seed, rank, start_steps]).generate_state(1)[0])


def run_config(cfg: A3CConfig, learner_device: str, horizon: Horizon) -> A3CConfig:
    """The config the run goes by and records (config.json, checkpoints): ``cfg`` with what
    is resolved once it starts. A new, checked config: ``cfg`` stays as the caller gave it.

    ``target_return`` none is the env's reward threshold; ``start_method`` is one this
    machine has, and spawn for a CUDA learner (CUDA does not survive fork); ``decay_start_*``
    record where this session's decays start, for a later resume (:mod:`a3c.run.resume`).
    """
    start_method = resolve_start_method(cfg.start_method)
    if ALGORITHMS[cfg.algo].decoupled:
        check_amp(cfg.amp, learner_device, why_cpu="the learner is on the CPU")
        if learner_device == "cuda":
            start_method = "spawn"
    target = _reward_threshold(cfg.env) if cfg.target_return is None else cfg.target_return
    metric = cfg.target_metric
    if self_play(cfg.env, cfg.env_options()):  # the training mean is 0: the target is the eval's
        metric = "eval" if metric == "train" else metric
        if target is not None and metric == "eval" and cfg.eval_interval <= 0:
            raise UsageError(
                f"--target-return {target:g}: in {cfg.env}, a zero-sum game one policy plays in "
                "every seat, it is read against the evaluation's return against a random "
                "player; give --eval-interval"
            )
    return dataclasses.replace(
        cfg,
        target_return=target,
        target_metric=metric,
        start_method=start_method,
        decay_start_steps=horizon.start_steps,
        decay_start_done=horizon.start_done,
    )


def _reward_threshold(env_id: str) -> float | None:
    try:
        threshold = gym.spec(env_id.rpartition(":")[2]).reward_threshold
    except gym.error.Error:
        return None
    return None if threshold is None else float(threshold)
