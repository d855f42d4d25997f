"""Train an actor-critic with A3C or asynchronous PPO: ``python -m a3c.train --workers 8``.

The command around :func:`a3c.run.trainer.train` (``--help`` lists every setting).
"""

from __future__ import annotations

import argparse
import sys

from a3c.run.cli import build_parser, config_from_args
from a3c.run.trainer import train
from hogwild.cli import run_cli


def _main(args: argparse.Namespace) -> int:
    return train(config_from_args(args)).exit_code


def main(argv: list[str] | None = None) -> int:
    return run_cli(build_parser(), _main, argv)


if __name__ == "__main__":
    sys.exit(main())
