"""The ``a3c.train`` command line: every A3CConfig field as a flag, plus --preset and --config."""

from __future__ import annotations

import argparse
import dataclasses
import typing
from collections.abc import Collection

from a3c.run.config import ALGO, NET, PPO, RUN, A3CConfig
from a3c.run.presets import AUTO, config_for
from hogwild.config import add_flags, overrides_from_args

EPILOG = """\
settings are applied in this order, each over the last: defaults, the preset (by default
the env's own, from a3c/run/presets.toml), a --config file, flags. config.json in the run
folder records what the run used.

examples:
  a3c.train --env Acrobot-v1 --workers 2          # its preset: solved in seconds
  a3c.train --env LunarLander-v3 --preset none    # the plain defaults
  a3c.train --config my.toml --lr 3e-4            # a TOML file of settings, then a flag
  a3c.train --resume runs/<run>/checkpoint.pt
then: tensorboard --logdir runs"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="a3c.train",
        description="Train an actor-critic on a Gymnasium environment with "
        "A3C or asynchronous PPO: N worker processes update one shared model lock-free.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # --n-step would silently be --n-steps
    )
    g = p.add_argument_group("presets and config files")
    g.add_argument(
        "--preset",
        default=AUTO,
        metavar="NAME",
        help="a table of a3c/run/presets.toml (default: auto, the env's own or [default]); "
        "none: no preset; with --resume, the resumed run's settings take its place",
    )
    add_config_flag(g)
    add_flags(p, A3CConfig, groups_order=(RUN, ALGO, PPO, NET))
    return p


def add_config_flag(group: argparse._ActionsContainer) -> None:
    group.add_argument(
        "--config", metavar="FILE", help="a TOML file of settings (keys as in config.json)"
    )


def some_settings(names: Collection[str]) -> type:
    """A dataclass of the :class:`A3CConfig` fields ``names``, each as declared there:
    :func:`~hogwild.config.add_flags` and :func:`~hogwild.config.overrides_from_args`
    on it give a command that takes only those (``a3c.tune``) ``a3c.train``'s flags."""
    hints = typing.get_type_hints(A3CConfig)
    unknown = set(names) - hints.keys()
    assert not unknown, f"not settings: {sorted(unknown)}"
    fields = [
        (
            f.name,
            hints[f.name],
            dataclasses.field(
                default=f.default, default_factory=f.default_factory, metadata=f.metadata
            ),
        )
        for f in dataclasses.fields(A3CConfig)
        if f.name in names
    ]
    return dataclasses.make_dataclass("SomeSettings", fields)


def config_from_args(args: argparse.Namespace) -> A3CConfig:
    given = overrides_from_args(args, A3CConfig)
    return config_for(preset=args.preset, config_file=args.config, **given)
