"""Make the repository's packages and the tests' helper modules importable without an install.

CI installs the project (``pip install -e .``); a bare checkout running ``pytest`` does not,
so the repository root goes on ``sys.path``. ``tests/`` goes there too, for the helper
modules (``engine_helpers``) that spawned child processes must be able to import by name.

The real MNIST files are found here, in one place (:func:`locate_mnist`, the ``mnist_dir``
fixture): ``$HOGWILD_DATA`` (the trainer's own default data folder) if it holds them, else
``../shared/data/mnist`` beside the checkout. Without them the MNIST tests skip, saying
where they looked; under CI (``CI`` set and not false) they fail instead, so a CI run
without the data cannot pass unseen.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import sys
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

# train() drops the process to one thread while it forks workers and then restores the
# count; after that switch OpenMP's spinning threads made a [1, 128] tanh take ~5.8 ms
# instead of ~3 us on a busy 2-core machine (19 us with passive waiting), slowing every
# in-process test that runs after a train(). Set before torch starts OpenMP.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

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


@contextlib.contextmanager
def _abort_after(seconds: float, config: pytest.Config) -> Iterator[None]:
    """Past ``seconds``, dump every thread's stack to the terminal and exit."""
    faulthandler.dump_traceback_later(seconds, exit=True, file=_real_stderr(config))
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def hang_guard(request):
    """Opt-in (``pytest.mark.usefixtures("hang_guard")``): a hung test aborts the run."""
    with _abort_after(HANG_TIMEOUT_S, request.config):
        yield


#: Every test's own bound, over 4x the slowest learning run's time in the suite on the slowest
#: host seen (66 s): a refusal that stopped refusing once trained for 674 s instead.
ANY_TEST_TIMEOUT_S = 300.0


@pytest.fixture(autouse=True)
def _runaway_guard(request):
    """Every test: past :data:`ANY_TEST_TIMEOUT_S`, abort (``hang_guard`` sets a tighter
    bound inside it, for its own test)."""
    with _abort_after(ANY_TEST_TIMEOUT_S, request.config):
        yield


# ------------------------------------------------------------------------ real MNIST

#: The sibling folder CI provides (``../shared`` beside the checkout).
SIBLING_MNIST = ROOT.parent / "shared" / "data" / "mnist"
#: The standard distribution's four files, as ``hogwild.mnist.data.MD5`` names them.
MNIST_FILES = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)


def under_ci(environ: Mapping[str, str] = os.environ) -> bool:
    """``CI`` is set to something other than empty, 0, false, no or off."""
    return environ.get("CI", "").strip().lower() not in ("", "0", "false", "no", "off")


def locate_mnist(
    environ: Mapping[str, str] = os.environ, sibling: Path = SIBLING_MNIST
) -> tuple[Path | None, str]:
    """The first of ``$HOGWILD_DATA`` and ``sibling`` that holds the four MNIST ``.gz``
    files, and ``""``; or None and why not (every place looked at, and how to fix it)."""
    places = []
    if environ.get("HOGWILD_DATA"):
        places.append((Path(environ["HOGWILD_DATA"]), "$HOGWILD_DATA"))
    places.append((sibling, "shared/data/mnist beside the checkout"))
    tried = []
    for path, what in places:
        if not path.is_dir():
            tried.append(f"{path} ({what}): no such folder")
            continue
        missing = [name for name in MNIST_FILES if not (path / name).is_file()]
        if not missing:
            return path, ""
        tried.append(f"{path} ({what}): no {', '.join(missing)}")
    return None, (
        f"real MNIST not found; looked in {'; '.join(tried)}. Point HOGWILD_DATA at a folder "
        f"holding {', '.join(MNIST_FILES)} (python -m hogwild.mnist downloads them into "
        f"its --data-dir), or put them in {sibling}"
    )


def require_mnist(environ: Mapping[str, str] = os.environ, sibling: Path = SIBLING_MNIST) -> Path:
    """The MNIST folder, or skip the test saying why; under CI, fail it instead."""
    path, why = locate_mnist(environ, sibling)
    if path is None:
        if under_ci(environ):
            pytest.fail(f"CI={environ['CI']}: the MNIST tests must run, but {why}", pytrace=False)
        pytest.skip(why)
    return path


@pytest.fixture(scope="session")
def mnist_dir() -> Path:
    """The folder of the real MNIST files (see :func:`locate_mnist`); skips or fails without."""
    return require_mnist()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files of learning runs first: ``--dist loadfile`` hands files out in this order,
    so the last to finish is a short one rather than a worker's lone 2-minute file while
    the other waits. A stable sort: each file's tests stay together and in order."""
    slow = Counter(item.path for item in items if item.get_closest_marker("slow"))
    items.sort(key=lambda item: -slow[item.path])


def pytest_report_header(config: pytest.Config) -> str:
    path, why = locate_mnist()
    return (
        f"MNIST: {path}" if path else f"MNIST: tests will {'FAIL' if under_ci() else 'skip'}: {why}"
    )


# ----------------------------------------------------------------- this machine's speed

#: One CartPole-v1 agent step (SyncVectorEnv of 8, per env) on the machine of
#: docs/benchmarks.md's per-step costs (benchmarks/costs.py, 2026-11-26).
REFERENCE_CARTPOLE_STEP_US = 8.4


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """How fast this machine was, under how long the suite took: hosts here differ 2-4x
    (a CartPole step 8.4 us on one, 20.4 us on another), and so do the suite's minutes."""
    if hasattr(config, "workerinput") or config.option.collectonly:
        return
    try:
        from script_helpers import load_benchmark

        from a3c.envs.make import make_vector_env

        costs = load_benchmark("costs")
        envs = make_vector_env("CartPole-v1", costs.ENV_BATCH, seed=0)
        try:
            step_us = costs.vector_step_ms(envs, 200, 3) / costs.ENV_BATCH * 1e3
        finally:
            envs.close()
    except Exception as e:  # noqa: BLE001 (a figure about the machine must not fail the run)
        terminalreporter.write_line(f"this machine: speed not measured ({e})")
        return
    ratio = step_us / REFERENCE_CARTPOLE_STEP_US
    terminalreporter.write_line(
        f"this machine: a CartPole-v1 step {step_us:.1f} us, {ratio:.1f}x the "
        f"{REFERENCE_CARTPOLE_STEP_US} us of docs/benchmarks.md's per-step costs"
    )
