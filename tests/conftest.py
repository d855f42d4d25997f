"""Make the repository's packages and the tests' helper modules importable without an install.

CI installs the project (``pip install -e .``); a bare checkout running ``pytest`` does not,
so the repository root goes on ``sys.path``. ``tests/`` goes there too, for the helper
modules (``engine_helpers``) that spawned child processes must be able to import by name.
"""

from __future__ import annotations

import faulthandler
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

for path in (str(ROOT), str(TESTS)):
    if path not in sys.path:
        sys.path.insert(0, path)

# No single engine test should take more than this; past it, dump every thread's stack
# and exit, so a deadlock fails CI loudly instead of hanging it.
HANG_TIMEOUT_S = 90.0


def _real_stderr(config: pytest.Config) -> int:
    """The terminal's stderr: fd 2 is a capture file while a test runs, lost on ``_exit``."""
    try:
        from _pytest.faulthandler import fault_handler_stderr_fd_key

        return config.stash[fault_handler_stderr_fd_key]
    except (ImportError, KeyError):
        return sys.__stderr__.fileno()


@pytest.fixture
def hang_guard(request):
    """Opt-in (``pytest.mark.usefixtures("hang_guard")``): a hung test aborts the run."""
    faulthandler.dump_traceback_later(HANG_TIMEOUT_S, exit=True, file=_real_stderr(request.config))
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
