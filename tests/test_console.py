"""The console: a bar on a terminal with log lines above it, plain lines elsewhere."""

from __future__ import annotations

import io
import logging
import sys

import pytest

from a3c.train import main as train_main
from hogwild.cli import setup_logging
from hogwild.console import Progress, Status


class Terminal(io.StringIO):
    """A captured stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def terminal(monkeypatch):
    """A fake terminal as stderr, with the commands' logging set up on it.

    Installed inside the test's call phase (``attach``): pytest swaps ``sys.stderr`` for
    its own capture between a fixture's setup and the call.
    """
    root = logging.getLogger()
    saved = root.handlers[:]
    stream = Terminal()

    def attach() -> Terminal:
        monkeypatch.setattr(sys, "stderr", stream)
        root.handlers.clear()
        setup_logging()
        return stream

    yield attach
    root.handlers[:] = saved


def test_bar_on_a_terminal_with_log_lines_above_it(terminal):
    terminal = terminal()
    p = Progress()
    for i in range(4):
        p.update(Status("plain line", i * 1000, 5000, f"mean return(100) {i}.0 / target 475"))
        if i == 2:
            logging.getLogger("hogwild.evaluator").info("evaluator running on cpu")
            p.print("a permanent line")
    p.close()
    out = terminal.getvalue()
    assert "2.00k/5.00k" in out and "|" in out and "step/s" in out  # a real bar
    assert "mean return(100) 3.0 / target 475" in out  # how close to solved
    assert "plain line" not in out
    # Each log or permanent line starts on a cleared line and ends its own line.
    for text in ("INFO hogwild.evaluator: evaluator running on cpu", "a permanent line"):
        before, after = out.split(text)
        assert before.endswith("\r") and after.startswith("\n"), repr(out)
    # The logging handler is back once the bar is gone.
    logging.getLogger("x").warning("after")
    assert out + "WARNING x: after\n" == terminal.getvalue()


def test_plain_lines_off_a_terminal():
    stream = io.StringIO()
    p = Progress(every=0.0, stream=stream)
    p.update(Status("steps 1,000/5,000", 1000, 5000, "mean 1.0"))
    p.print("permanent")
    p.update("another line")
    p.close()
    assert stream.getvalue() == "steps 1,000/5,000\npermanent\nanother line\n"


def test_a_run_off_a_terminal_prints_status_lines_without_carriage_returns(tmp_path, capsys):
    code = train_main(
        ["--env", "CartPole-v1", "--workers", "1", "--total-steps", "30000"]
        + ["--target-return", "1e9", "--eval-interval", "0", "--log-interval", "0.2"]
        + ["--logdir", str(tmp_path)]
    )
    assert code == 0
    err = capsys.readouterr().err
    assert "\r" not in err
    status = [line for line in err.splitlines() if line.startswith("steps ")]
    assert status and "/30,000" in status[0] and "mean return(100)" in status[0], err
