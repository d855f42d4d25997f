"""Search settings with Optuna: ``python -m a3c.tune --env ID --trials N --budget SECONDS``.

Each trial is a real run of ``--budget`` seconds (no target: it runs the whole budget),
scored by the **time-average of the 100-episode mean** over the run, which rewards
learning soon *and* keeping it, the two things the presets are chosen for. A trial whose
curve lags the median of earlier trials at the same time is pruned (stopped early, from a
run callback). The algorithm and worker count are the env's preset's, as ``a3c.train``
takes them, unless ``--algo`` or ``--workers`` says otherwise, and the first trial is that
preset as it is, so the table shows what the search found against it. The best settings
are written as a TOML file that ``a3c.train --config`` takes, with the algorithm and
worker count the trials ran at. A preset whose rate, entropy or clip range decays keeps its
``total_steps`` in every trial (the decay's horizon; the budget stops the run), so a
trial scores the schedule that the file, which records it, runs.

Ranges come from :data:`COMMON_SPACE` and the algorithm's own (its ``tuning_space``), each
clipped to the range its setting declares (:mod:`a3c.run.config`), less what the env's
policy cannot take or ignores (a conv net on images or a board: no separate networks, MLP
sizes or observation normalisation), so a search rarely proposes a value a run would
refuse; a trial that is refused anyway is pruned with its reason, and the search goes on.
Only the trials that ran their whole budget are ranked: Optuna keeps a pruned one's last
report as its value, which scores a part of a run. ``--jobs J`` runs J trials at once,
each in its own process (Optuna's journal file keeps the study), with ``--workers`` each:
give J x workers <= your cores. SIGINT or SIGTERM stops every job's trial (each run
saves its checkpoint) and the search, which exits 130 or 143; the finished trials stay
in the study. A ``--logdir`` holds one search: run again with the same env (and env
settings), algorithm, budget and workers, it continues it (as Optuna resumes a named
study); with others it is refused, as their scores do not compare.

The env is given as to ``a3c.train``, with the same flags (``--env-kwargs``,
``--wrapper``, ``--agent-groups``); a ``--config`` file's settings are what every trial
starts from, under its suggestions, and the written file keeps them.

Needs the optional extra: ``pip install "hogwild-a3c[tune]"`` (Optuna).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import multiprocessing as mp
import os
import signal
import sys
import time
from collections.abc import Collection, Iterator
from pathlib import Path
from types import FrameType
from typing import Any, NamedTuple

from a3c.envs.make import env_spaces
from a3c.learning.algorithm import Choice, Range
from a3c.learning.algorithms import ALGORITHMS
from a3c.policy import ModelSpec
from a3c.run.callbacks import RunEvent
from a3c.run.cli import add_config_flag, some_settings
from a3c.run.config import NO_STEP_BUDGET, RUN, A3CConfig
from a3c.run.presets import config_for, measured_workers, read_config_file
from hogwild.cli import run_cli
from hogwild.config import add_flags, overrides_from_args
from hogwild.errors import UsageError

PROG = "a3c.tune"
STUDY = "a3c-tune"  # one study a --logdir: its user attributes say what it searched
INSTALL_HINT = 'pip install "hogwild-a3c[tune]" (or, from a checkout, pip install -e ".[tune]")'
#: The env as ``a3c.train`` takes it, with its flags: every trial runs it so.
ENV_SETTINGS = some_settings(("env", "env_kwargs", "wrappers", "agent_groups"))
#: Seconds the jobs get to stop after a signal (each run stops its workers, saves a
#: checkpoint), and on top of each trial's budget before a job counts as hung.
STOP_GRACE_S = 60.0
TRIAL_SLACK_S = 300.0


#: What a search varies for every algorithm; each algorithm adds its own
#: (:attr:`~a3c.learning.algorithm.Algorithm.tuning_space`), and each setting's declared
#: range bounds it further.
COMMON_SPACE: dict[str, Choice | Range] = {
    "lr": Range(1e-5, 3e-3, log=True),
    "gamma": Choice((0.9, 0.95, 0.98, 0.99, 0.995, 0.999)),
    "gae_lambda": Choice((0.8, 0.9, 0.92, 0.95, 0.98, 1.0)),
    "entropy_coef": Choice((0.0, 1e-4, 1e-3, 0.01, 0.05)),
    "max_grad_norm": Choice((0.3, 0.5, 1.0, 5.0)),
    "value_coef": Choice((0.25, 0.5, 1.0)),
    "hidden": Choice(((64, 64), (128, 128), (256, 256))),
    "separate_networks": Choice((False, True)),
    "normalize_obs": Choice((False, True)),
    "optimizer": Choice(("rmsprop", "adam")),
}


def space(algo: str, drop: Collection[str] = ()) -> dict[str, Choice | Range]:
    """The search space of ``algo`` less ``drop``, each range clipped to its setting's
    declared one."""
    rules = {f.name: f.metadata.get("rule") for f in dataclasses.fields(A3CConfig)}
    out: dict[str, Choice | Range] = {}
    for name, dim in {**COMMON_SPACE, **ALGORITHMS[algo].tuning_space}.items():
        if name in drop:
            continue
        rule = rules[name]
        assert rule is not None, f"{name}: a tuned setting is declared with setting()"
        if isinstance(dim, Range):
            low = max(dim.low, rule.min if rule.min is not None else -math.inf)
            high = min(dim.high, rule.max if rule.max is not None else math.inf)
            dim = dataclasses.replace(dim, low=low, high=high)
        elif rule.choices is not None:
            dim = Choice(tuple(v for v in dim.values if v in rule.choices))
        out[name] = dim
    return out


def unusable(spec: ModelSpec) -> set[str]:
    """Settings the env's policy refuses or ignores, which a search would spend trials on
    for nothing: a conv net, on images or on a board (connect four's), is one shared net
    (no separate networks, no MLP sizes, pixels scaled and cells read raw instead of
    normalised), an LSTM policy one shared trunk."""
    conv = spec.image or bool(spec.grid)
    out = {"separate_networks", "hidden", "normalize_obs"} if conv else set()
    return out | ({"separate_networks"} if spec.lstm else set())


def schedule(cfg: A3CConfig) -> dict[str, Any]:
    """The settings of ``cfg``'s decay with its horizon (``total_steps``), or none if
    nothing decays; the written file records them, so it runs what the trial scored."""
    if not cfg.decays():
        return {}
    names = ("lr_schedule", "entropy_coef_final", "clip_range_final", "total_steps")
    return {n: getattr(cfg, n) for n in names if getattr(cfg, n) is not None}


def suggest(trial: Any, dims: dict[str, Choice | Range]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name, dim in dims.items():
        if isinstance(dim, Choice):
            # Optuna stores choices as JSON-able scalars: tuples go by their text.
            labels = [_label(v) for v in dim.values]
            label = trial.suggest_categorical(name, labels)
            values[name] = dim.values[labels.index(label)]
        elif dim.integer:
            values[name] = trial.suggest_int(name, int(dim.low), int(dim.high), log=dim.log)
        else:
            values[name] = trial.suggest_float(name, dim.low, dim.high, log=dim.log)
    return values


def _label(value: Any) -> Any:
    return ",".join(map(str, value)) if isinstance(value, tuple) else value


class CurvePoint(NamedTuple):
    """One logged point of a run's learning curve."""

    seconds: float  # into the run
    mean: float  # the 100-episode mean return then


class CurveScore:
    """A run callback: the time-average of the 100-episode mean, reported to the trial,
    which stops the run (returns False) when the pruner says its curve lags."""

    def __init__(self, trial: Any) -> None:
        self.trial = trial
        self.area = 0.0
        self.seconds = 0.0
        self.last: CurvePoint | None = None  # the curve's last logged point
        self.reported = 0  # the last step (whole second) reported: Optuna takes one each
        self.pruned = False

    def __call__(self, event: RunEvent) -> bool | None:
        late = event.kind == "end" and self.last is None  # self-play scored at the end alone
        if event.progress is None or not (event.kind == "log" or late):  # self-play: the eval's
            return None
        now, mean = float(event.seconds), float(event.progress)
        if self.last is not None:
            then, before = self.last
            self.area += (now - then) * (before + mean) / 2
            self.seconds += now - then
        self.last = CurvePoint(now, mean)
        step = int(now)
        if self.seconds > 0 and step > self.reported:
            self.reported = step
            self.trial.report(self.value, step)
            if self.trial.should_prune():
                self.pruned = True
                return False
        return None

    @property
    def value(self) -> float:
        if self.seconds > 0:
            return self.area / self.seconds
        return self.last.mean if self.last else -math.inf


class Stop:
    """A job's stop on SIGINT or SIGTERM: no trial starts after it, and the main job sends
    SIGTERM on to the helper jobs, which a signal to the main process alone (a
    scheduler's, ``kill``) would leave running their trials. While a trial's run is on,
    the run catches the signal itself, stops with a checkpoint and says so in its exit
    code (:meth:`ended`); a second Ctrl-C exits at once, as a run's does."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.helpers: list[Any] = []  # the main job's helper processes

    def __call__(self, event: RunEvent) -> bool | None:
        """A run callback: a signal caught just before the run took over stops it."""
        return False if self.signum is not None else None

    def ended(self, signum: int) -> None:
        if self.signum is None:
            self.signum = signum
            self._send(signal.SIGTERM)  # not SIGINT: a second Ctrl-C is "exit at once"

    def _send(self, sig: int) -> None:
        for p in self.helpers:
            if p.pid is not None and p.exitcode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, sig)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            print(f"\n{PROG}: second interrupt: exiting now", file=sys.stderr, flush=True)
            self._send(signal.SIGKILL)
            os._exit(130)
        if self.signum is None:
            name = "interrupt" if signum == signal.SIGINT else signal.Signals(signum).name
            print(f"\n{PROG}: {name}: stopping the search", file=sys.stderr, flush=True)
        self.ended(signum)

    @contextlib.contextmanager
    def caught(self) -> Iterator[Stop]:
        previous = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)


STOP = Stop()  # this process's: each job is a process of its own


def _pruned(trial: Any, why: str) -> Exception:
    """Optuna's prune of ``trial``, its reason kept for the table."""
    import optuna

    trial.set_user_attr("pruned", why)
    return optuna.TrialPruned(why)


def objective(args: argparse.Namespace, trial: Any) -> float:
    from a3c.run.trainer import train
    from a3c.scoring import self_play

    if STOP.signum is not None:  # caught between trials
        trial.study.stop()
        raise _pruned(trial, "interrupted")
    preset = trial.number == 0 and args.preset_first
    settings = {} if preset else suggest(trial, args.dims)
    score = CurveScore(trial)
    try:
        cfg = config_for(
            args.env,
            config_file=args.config,
            **args.env_settings,
            algo=args.algo,
            workers=args.workers,
            time_limit=args.budget,
            target_return=1e18,  # none: the whole budget
            eval_interval=max(args.budget / 10, 1.0)
            if self_play(args.env, args.env_options)
            else 0,
            seed=args.seed + trial.number,
            logdir=str(Path(args.logdir) / "trials"),
            run_name=f"trial{trial.number:03d}",
            **settings,
        )
        if not cfg.decays():
            cfg.total_steps = NO_STEP_BUDGET  # the budget stops it; a decay keeps its horizon
        for name, value in settings.items():
            trial.set_user_attr(name, value if not isinstance(value, tuple) else list(value))
        result = train(cfg, callbacks=[score, STOP])
    except UsageError as e:  # settings a run refuses (e.g. more minibatches than samples)
        trial.set_user_attr("refused", str(e))
        print(f"{PROG}: trial {trial.number} pruned, its settings refused: {e}", file=sys.stderr)
        raise _pruned(trial, "refused") from None
    if result.exit_code in (130, 143):
        STOP.ended(result.exit_code - 128)
    if STOP.signum is not None:
        trial.study.stop()
        raise _pruned(trial, "interrupted")
    if result.exit_code != 0:
        raise _pruned(trial, f"the run failed (exit code {result.exit_code})")
    if score.pruned and score.last is not None:  # pruned only after a logged point
        raise _pruned(trial, f"lagged at {score.last.seconds:.0f} s")
    return score.value


def _helper_job(args: argparse.Namespace, trials: int, job: int) -> None:
    """A helper job's process: its share of the trials, stopped as the main job is."""
    with STOP.caught():
        _optimize(args, trials, job)


def _optimize(args: argparse.Namespace, trials: int, job: int = 0) -> None:
    import optuna

    if STOP.signum is not None:
        return
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(
        study_name=STUDY,
        storage=_storage(args),
        sampler=optuna.samplers.TPESampler(seed=args.seed + job),  # jobs propose apart
        pruner=_pruner(args),
    )
    study.optimize(lambda t: objective(args, t), n_trials=trials, catch=())


def _pruner(args: argparse.Namespace) -> Any:
    """The median pruner, after 5 trials and 30% of the budget: a study loaded in each job
    takes it (and the seeded sampler) anew, as a loaded study keeps neither."""
    import optuna

    return optuna.pruners.MedianPruner(
        n_startup_trials=5, n_warmup_steps=max(1, int(args.budget * 0.3))
    )


def _storage(args: argparse.Namespace) -> Any:
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    return JournalStorage(JournalFileBackend(str(Path(args.logdir) / "study.journal")))


def toml_text(values: dict[str, Any], header: str) -> str:
    def fmt(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (tuple, list)):
            return "[" + ", ".join(fmt(x) for x in v) + "]"
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(v, dict):  # an inline table: env_kwargs
            return "{" + ", ".join(f"{fmt(str(k))} = {fmt(x)}" for k, x in v.items()) + "}"
        if v is None:
            return '"none"'  # as a config file says it
        return repr(v)

    lines = [f"# {line}" for line in header.splitlines()]
    lines += [f"{k} = {fmt(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


def completed(study: Any) -> list[Any]:
    """The trials that ran their whole budget: a pruned one's value (Optuna keeps its last
    report) scores part of a run, an interrupted or lagging one's, so it is not ranked."""
    from optuna.trial import TrialState

    return [t for t in study.trials if t.state == TrialState.COMPLETE and t.value is not None]


def table(study: Any, first: str = "the preset") -> str:
    rows = ["| trial | state | score | settings |", "|---|---|---|---|"]
    done = completed(study)
    ranked = sorted(done, key=lambda t: -t.value)
    ranked += [t for t in study.trials if t not in done]
    for t in ranked:
        score = f"{t.value:.1f}" if t in done else ""
        state = t.state.name.lower()
        if "pruned" in t.user_attrs:
            state += f": {t.user_attrs['pruned']}"
        what = (
            first
            if t.number == 0 and not t.params
            else ", ".join(
                f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in t.params.items()
            )
        )
        rows.append(f"| {t.number} | {state} | {score} | {what} |")
    return "\n".join(rows)


def run(args: argparse.Namespace) -> int:
    try:
        import optuna
    except ImportError:
        raise UsageError(f"a3c.tune needs Optuna: {INSTALL_HINT}") from None
    from a3c.run.shared_model import model_spec

    if args.trials < 1 or args.jobs < 1 or not 0 < args.budget < math.inf:
        raise UsageError("--trials and --jobs must be at least 1, --budget a number above 0")
    # A bad env or setting: one line before anything starts. The env is made as a run
    # makes it (the preset's wrappers: MiniGrid's drops its text mission), and the
    # policy it takes decides what the search leaves out.
    cfg = _preset(args)
    args.dims = space(
        args.algo, drop=unusable(model_spec(cfg, env_spaces(cfg.env, **cfg.env_options())))
    )
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    _open_study(args)
    t0 = time.monotonic()
    STOP.signum = None  # a search of its own (main() called again in one process)
    with STOP.caught():
        _search(args)
    study = optuna.load_study(study_name=STUDY, storage=_storage(args))
    first = "the preset" + (f" with {args.config}" if args.config else "")
    print(f"\n{table(study, first)}\n", flush=True)
    finished = completed(study)
    refused = [t.user_attrs["refused"] for t in study.trials if "refused" in t.user_attrs]
    if not finished and len(refused) == len(study.trials):
        raise UsageError(
            f"{args.env} refused every trial's settings; nothing written ({refused[-1]})"
        )
    stopped = STOP.signum
    if stopped is not None:
        print(
            f"{PROG}: interrupted; the {len(finished)} finished trial(s) stay in the study in "
            f"{args.logdir}: the same command continues it",
            file=sys.stderr,
        )
    if not finished:
        print(f"{PROG}: no trial finished; nothing written", file=sys.stderr)
        return 128 + stopped if stopped is not None else 1
    best = max(finished, key=lambda t: t.value)
    settings = _settings_of(best, args)
    scored = schedule(
        config_for(
            args.env, config_file=args.config, **args.env_settings, algo=args.algo, **settings
        )  # fmt: skip
    )
    values = {
        "env": args.env,
        "algo": args.algo,
        "workers": args.workers,
        **{k: v for k, v in args.env_settings.items() if k != "env"},
        **args.from_file,
        **scored,
        **settings,
    }
    header = (
        f"python -m a3c.tune {' '.join(sys.argv[1:])}\n"
        f"trial {best.number}: time-averaged 100-episode mean {best.value:.1f} over "
        f"{args.budget:g} s ({len(finished)} of {len(study.trials)} trials finished, "
        f"{time.monotonic() - t0:.0f} s{', interrupted' if stopped is not None else ''})"
    )
    Path(args.out).write_text(toml_text(values, header))
    print(f"best: trial {best.number}, score {best.value:.1f}; settings in {args.out}")
    print(f"use them: python -m a3c.train --config {args.out}")
    return 128 + stopped if stopped is not None else 0


def _search(args: argparse.Namespace) -> None:
    """The trials, ``--jobs`` at once: this process runs a share, each helper job another;
    a signal (:class:`Stop`) stops them all, and a helper that outlives the grace after
    it (or its trials' budgets by far) is killed, so the search always ends."""
    share = [args.trials // args.jobs + (i < args.trials % args.jobs) for i in range(args.jobs)]
    helpers = [
        mp.get_context("spawn").Process(target=_helper_job, args=(args, n, i), name=f"tune-job{i}")
        for i, n in enumerate(share[1:], start=1)
        if n
    ]
    STOP.helpers = helpers
    for p in helpers:
        p.start()
    try:
        _optimize(args, share[0])
    except BaseException:
        STOP.ended(signal.SIGTERM)  # the helpers' trials go with this one
        raise
    finally:
        deadline = time.monotonic() + max(share) * (args.budget + TRIAL_SLACK_S)
        for p in helpers:
            while p.exitcode is None:
                if STOP.signum is not None:
                    deadline = min(deadline, time.monotonic() + STOP_GRACE_S)
                if time.monotonic() > deadline:
                    print(f"{PROG}: {p.name} did not stop; killing it", file=sys.stderr)
                    p.kill()
                p.join(timeout=1.0)
        STOP.helpers = []
    failed = [p for p in helpers if p.exitcode not in (0, None)]
    if failed and STOP.signum is None:
        codes = ", ".join(f"{p.name} exit code {p.exitcode}" for p in failed)
        print(f"{PROG}: a job failed ({codes}); its trials are missing", file=sys.stderr)


def _preset(args: argparse.Namespace) -> A3CConfig:
    """The env's preset with ``--config``, the env settings, ``--algo`` and ``--workers``
    where given, as ``a3c.train`` resolves them; ``args`` takes its env, algorithm and
    worker count, which every trial runs and the file records. Unset, the workers are the
    config file's, else the preset's (Atari's APPO: 2), else the cores shared among the
    jobs."""
    args.from_file = read_config_file(args.config) if args.config else {}
    if "resume" in args.from_file:
        raise UsageError(f"--config {args.config}: a search's trials start afresh (resume)")
    args.env = args.env_settings.pop("env", None) or args.from_file.get("env") or A3CConfig.env
    asked = {k: v for k in ("algo", "workers") if (v := getattr(args, k)) is not None}
    cfg = config_for(args.env, config_file=args.config, **args.env_settings, **asked)
    args.algo, args.env_options = cfg.algo, cfg.env_options()
    if args.workers is None:
        args.workers = (
            args.from_file.get("workers")
            or measured_workers(cfg)
            or max(1, (os.cpu_count() or 1) // args.jobs)
        )
    return cfg


def _open_study(args: argparse.Namespace) -> None:
    """Starts the search in ``--logdir``, or continues the one there if it searched the
    same; another env's (or env settings'), algorithm's, budget's or worker count's trials
    would mix into the table and the best, their scores not comparable, so that is refused."""
    import optuna

    search: dict[str, Any] = {
        "env": args.env,
        "algo": args.algo,
        "budget": args.budget,
        "workers": args.workers,
    }
    for name, given in (("env_settings", args.env_settings), ("config", args.from_file)):
        if given:  # as the journal keeps them (lists, not tuples); unset, as before these
            search[name] = json.loads(json.dumps(given))
    if (Path(args.logdir) / "study.journal").exists():
        try:
            held = optuna.load_study(study_name=STUDY, storage=_storage(args))
        except KeyError:  # a journal of some other study
            held = None
        if held is None or held.user_attrs != search:
            what = ", ".join(f"{k} {v}" for k, v in held.user_attrs.items()) if held else ""
            raise UsageError(
                f"--logdir {args.logdir} holds another search ({what or 'not of a3c.tune'}); "
                "give a new --logdir, or that search's settings to continue it"
            )
        print(f"{PROG}: continuing the search in {args.logdir} ({len(held.trials)} trials so far)")
        return
    try:
        Path(args.logdir).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot make --logdir {args.logdir}: {e.strerror or e}") from None
    study = optuna.create_study(study_name=STUDY, storage=_storage(args), direction="maximize")
    for name, value in search.items():
        study.set_user_attr(name, value)


def _settings_of(trial: Any, args: argparse.Namespace) -> dict[str, Any]:
    if not trial.params:  # the preset's own trial: nothing to change
        return {}
    dims = args.dims
    out = {}
    for name, value in trial.params.items():
        dim = dims[name]
        if isinstance(dim, Choice):
            value = dim.values[[_label(v) for v in dim.values].index(value)]
        out[name] = value
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Search A3C/APPO settings for an env with Optuna; write the best as TOML.",
        allow_abbrev=False,
    )
    add_flags(p, ENV_SETTINGS, groups_order=(RUN,))  # --env ... as a3c.train takes them
    add_config_flag(p)
    p.add_argument(
        "--algo", choices=tuple(ALGORITHMS), default=None, help="default: the env's preset's"
    )
    p.add_argument("--trials", type=int, default=20, help="runs in all (default 20)")
    p.add_argument("--budget", type=float, default=30.0, help="seconds per run (default 30)")
    p.add_argument("--jobs", type=int, default=1, help="trials at once, one process each")
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="per trial (default: the preset's, else the cores / --jobs)",
    )
    p.add_argument("--seed", type=int, default=0, help="the sampler's; trial i runs seed+i")
    p.add_argument("--out", default="best.toml", help="the TOML file of the best settings")
    p.add_argument(
        "--logdir",
        default=None,
        help="trials' runs and the study (default: runs/tune_<env>_<time>); an existing "
        "one's search is continued if it searched the same env (and env settings, "
        "--config), algo, budget and workers",
    )
    p.add_argument(
        "--no-preset-first",
        dest="preset_first",
        action="store_false",
        help="do not spend the first trial on the preset as it is",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    def go(args: argparse.Namespace) -> int:
        args.env_settings = overrides_from_args(args, ENV_SETTINGS)
        if args.logdir is None:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            env = args.env_settings.get("env", "search").replace("/", "-").replace(":", "-")
            args.logdir = str(Path("runs") / f"tune_{env}_{stamp}")
        return run(args)

    return run_cli(build_parser(), go, argv)


if __name__ == "__main__":
    sys.exit(main())
