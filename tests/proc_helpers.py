"""Process helpers shared by the tests: /proc inspection, a child Python run as a user
would run it, and torchrun "machines" on loopback.

Read through /proc rather than psutil so the suite needs nothing beyond the project's own
dependencies (Linux only, as the engine itself).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


# -- /proc ------------------------------------------------------------------------------


def proc_stat(pid: int) -> tuple[str, int] | None:
    """``(state, ppid)`` of ``pid``, or ``None`` when it no longer exists."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[1])


def cmdline(pid: int) -> bytes:
    """The raw command line of ``pid`` (NUL-separated), or ``b""`` once it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _parents() -> dict[int, int]:
    """pid -> ppid of every process now."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = proc_stat(int(name))
            if st is not None:
                out[int(name)] = st[1]
    return out


def child_pids(parent: int | None = None) -> set[int]:
    """Every process (zombies included) whose parent is ``parent`` (default: this one).

    multiprocessing's resource tracker (a helper the ``spawn`` context starts once and
    keeps for the life of the interpreter) is not counted.
    """
    parent = os.getpid() if parent is None else parent
    return {
        pid
        for pid, ppid in _parents().items()
        if ppid == parent and b"resource_tracker" not in cmdline(pid)
    }


def descendants(pid: int) -> list[int]:
    """Children, grandchildren and so on of ``pid``, parents before their children."""
    children: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def pid_gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie waiting to be reaped counts as gone)."""
    st = proc_stat(pid)
    return st is None or st[0] in ("Z", "X")


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and all its descendants, as when a machine dies."""
    for p in [*descendants(pid), pid]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)


# -- a child Python, as a user starts it ------------------------------------------------

#: A child's environment: it imports the checkout's packages, whichever folder it runs in.
CHILD_ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
}


def run_python(
    argv: Sequence[str], cwd: Path = ROOT, timeout: float = 120, **env: str
) -> subprocess.CompletedProcess:
    """``python argv...`` to its end in a real child process, as a user would start it
    (``env`` laid over :data:`CHILD_ENV`), its output captured as text."""
    return subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**CHILD_ENV, **env},
    )


# -- torchrun on loopback ---------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@functools.cache
def torchrun_log_dir() -> str:
    """Where the session's torchrun agents keep their logs: left to itself, each agent
    leaves a folder of its own in /tmp."""
    path = tempfile.mkdtemp(prefix="torchrun-logs-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def torchrun(port: int, *args: str, **popen) -> subprocess.Popen:
    """One "machine" of a two-node job: torchrun's agent plus one process running ``args``."""
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node",
        "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
        "--max-restarts", "0", "--log-dir", torchrun_log_dir(), *args,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{TESTS}"}
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen
    )


def finish(procs: list[subprocess.Popen], timeout: float) -> list[tuple[int, str, str]]:
    """``(returncode, stdout, stderr)`` of each; past ``timeout`` in all, kill every process
    tree and fail the test."""
    import pytest  # not at the top: spawned workers import this module (via engine_helpers)

    out = []
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            stdout, stderr = p.communicate(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            for q in procs:
                kill_tree(q.pid)
            pytest.fail("a process did not finish in time")
        out.append((p.returncode, stdout, stderr))
    return out
