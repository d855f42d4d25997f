"""``python -m hogwild.train``: Hogwild! training of your own model on your own data.

``--model mypkg.models:make_model --data mypkg.data:make_data`` name a function that
returns the ``nn.Module`` and one that returns ``(train, val)`` Datasets; every other
setting is a flag (``--help``), a key of a ``--config`` TOML file, or comes from the run
being resumed.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from hogwild.cli import exit_code_of, run_cli
from hogwild.config import (
    ENGINE,
    EVAL,
    add_flags,
    overrides_from_args,
    overrides_from_mapping,
    settings_from_file,
)
from hogwild.errors import UsageError
from hogwild.refs import resolve
from hogwild.supervised.api import preflight, run
from hogwild.supervised.checkpoints import read
from hogwild.supervised.config import PROG, TASK, TRAIN, FitConfig
from hogwild.supervised.report import App
from hogwild.supervised.task import (
    Objective,
    Task,
    build_model,
    call_factory,
    check_dataset,
    resolve_loss,
    resolve_metric,
)

#: Settings of a resumed run that its resume does not inherit.
NOT_INHERITED = ("resume", "checkpoint", "run_name")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Hogwild! training of your own model: --workers processes update one shared\n"
            "model in place, without locks; embeddings with sparse=True are written only in\n"
            "the rows a batch touched. Each epoch every worker trains on its own shard of a\n"
            "fresh shuffle; then the validation set is scored, a checkpoint saved (and\n"
            "best.pt when --monitor improves). Ctrl-C or SIGTERM saves a checkpoint and\n"
            "exits (130/143). --strategy ddp trains synchronously for comparison."
        ),
        epilog=(
            "examples:\n"
            f"  {PROG} --model mypkg.models:make_model --data mypkg.data:make_data \\\n"
            "      --metric accuracy --workers 4 --epochs 5 --lr 0.05\n"
            f"  {PROG} --config my.toml --lr 0.1    # settings from a TOML file, a flag over them\n"
            f"  {PROG} --resume runs/<run>/checkpoint.pt --epochs 10\n"
            f"  {PROG} --model ... --data ... --strategy ddp   # the synchronous baseline\n"
            "from Python: from hogwild import fit; fit(model, train_set, val_data=val_set, ...)\n"
            "then: tensorboard --logdir runs"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument(
        "--config", metavar="FILE", help="a TOML file of settings (keys as in config.json)"
    )
    add_flags(p, FitConfig, groups_order=(TASK, TRAIN, ENGINE, EVAL))
    return p


def config_from_args(args: argparse.Namespace) -> FitConfig:
    """Defaults <- the resumed run's settings <- the --config file <- the flags."""
    given = overrides_from_args(args, FitConfig)
    from_file = settings_from_file(FitConfig, args.config) if args.config else {}
    resume = given.get("resume") or from_file.get("resume")
    base: dict[str, Any] = {}
    if resume:
        saved = read(resume, App())["config"]
        inherited = {k: v for k, v in saved.items() if k not in NOT_INHERITED}
        base = overrides_from_mapping(FitConfig, inherited, f"{resume}'s settings")
    return FitConfig(**{**base, **from_file, **given})


def task_from_config(cfg: FitConfig) -> Task:
    """The live objects the config's references name; each failure is one line."""
    if cfg.model is None or cfg.data is None:
        missing = " and ".join(
            f for f, v in (("--model", cfg.model), ("--data", cfg.data)) if v is None
        )
        raise UsageError(f"{missing} required: module:function references to your code")
    model = build_model(resolve(cfg.model, "--model"), f"--model {cfg.model}")
    data = call_factory(resolve(cfg.data, "--data"), f"--data {cfg.data}")
    train, val = data if isinstance(data, tuple) and len(data) == 2 else (data, None)
    objective = (
        Objective(step=resolve(cfg.step, "--step"))
        if cfg.step is not None
        else Objective(loss=resolve_loss(cfg.loss))
    )
    return Task(
        model,
        check_dataset(train, f"the training set of --data {cfg.data}"),
        None if val is None else check_dataset(val, f"the validation set of --data {cfg.data}"),
        objective,
        dict(resolve_metric(m) for m in cfg.metrics),
    )


def _main(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    preflight(cfg, App())  # before your code is imported and your data made
    return exit_code_of(PROG, lambda: run(cfg, task_from_config(cfg)).exit_code)


def main(argv: list[str] | None = None) -> int:
    """Console entry point (``hogwild-train``); returns the exit code."""
    return run_cli(build_parser(), _main, argv)


if __name__ == "__main__":
    sys.exit(main())
