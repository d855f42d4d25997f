"""Shared command-line plumbing: argument types, and one-line errors with exit code 2."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from typing import NoReturn

from hogwild.distributed import NodeFailure
from hogwild.errors import UsageError


def positive_int(text: str) -> int:
    value = _parse(int, text, "an integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _parse(kind: type, text: str, what: str):
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None


def setup_logging() -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )


def run_cli(
    parser: argparse.ArgumentParser,
    main: Callable[[argparse.Namespace], int],
    argv: list[str] | None = None,
) -> int:
    """Parse ``argv`` and run ``main``; a UsageError becomes ``prog: error: msg`` and exit 2."""
    _one_line_errors(parser)
    args = parser.parse_args(argv)
    setup_logging()
    try:
        return main(args)
    except UsageError as e:
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        return 2


def exit_code_of(prog: str, run: Callable[[], int]) -> int:
    """``run()``'s exit code; a node lost while joining is 1, Ctrl-C outside the run's own
    handling (before it, after it) 130, each with one line."""
    try:
        return run()
    except NodeFailure as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


def _one_line_errors(parser: argparse.ArgumentParser) -> None:
    """argparse's exit code 2, without the usage block that buries the one line that matters."""

    def error(message: str) -> NoReturn:
        parser.exit(2, f"{parser.prog}: error: {message} (see --help)\n")

    parser.error = error  # type: ignore[method-assign]
