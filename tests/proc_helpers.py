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
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import warm_python

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


def catches(pid: int, sig: int) -> bool:
    """Whether ``pid`` has a handler of its own for ``sig`` now (``SigCgt`` in its status):
    before that, the signal ends it the default way, e.g. SIGTERM as -15, not 143."""
    try:
        with open(f"/proc/{pid}/status") as f:
            caught = next(line for line in f if line.startswith("SigCgt:"))
    except (FileNotFoundError, ProcessLookupError, StopIteration):
        return False
    return bool(int(caught.split()[1], 16) >> (sig - 1) & 1)


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
    keeps for the life of the interpreter) is not counted, nor is the tests' warm server.
    """
    parent = os.getpid() if parent is None else parent
    return {
        pid
        for pid, ppid in _parents().items()
        if ppid == parent
        and b"resource_tracker" not in cmdline(pid)
        and pid != warm_python.server_pid()
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


def cpu_ticks(pid: int) -> int:
    """CPU time ``pid`` and its reaped children have used, in clock ticks (0 once gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return 0
    fields = text[text.rindex(")") + 2 :].split()
    return sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime


def tree_cpu_ticks(pid: int) -> int:
    """CPU time of ``pid`` and all its descendants: it grows while any of them works."""
    return sum(cpu_ticks(p) for p in [pid, *descendants(pid)])


def pid_gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie waiting to be reaped counts as gone)."""
    st = proc_stat(pid)
    return st is None or st[0] in ("Z", "X")


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and all its descendants, as when a machine dies."""
    for p in [*descendants(pid), pid]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)


# -- waiting on progress, not on the clock ---------------------------------------------


def folder_state(folder: Path) -> tuple[int, int, int]:
    """``(files, bytes, newest mtime)`` of the files under ``folder``: changes as a run
    writes into it."""
    count = size = newest = 0
    # os.walk, not rglob: a folder removed while rglob walked it raised (FileNotFoundError,
    # a run's checkpoint folder moved away by its test); os.walk skips it.
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                st = os.stat(os.path.join(root, name))
            except OSError:  # replaced or removed while we looked
                continue
            count, size, newest = count + 1, size + st.st_size, max(newest, st.st_mtime_ns)
    return count, size, newest


def _stderr_of(proc: subprocess.Popen, timeout: float = 10) -> str:
    """What an ended ``proc`` wrote to its piped stderr (the end of it), without waiting
    for ever on a pipe some orphan still holds."""
    if proc.stderr is None or proc.stderr.closed:
        return ""
    box: list = []
    reader = threading.Thread(target=lambda: box.append(proc.stderr.read()), daemon=True)
    reader.start()
    reader.join(timeout)
    text = box[0] if box else ""
    text = text.decode(errors="replace") if isinstance(text, bytes) else text
    return text[-4000:]


T = TypeVar("T")


def wait_until(
    done: Callable[[], T],
    *,
    what: str | Callable[[], str],
    progress: Callable[[], Hashable] | None = None,
    procs: Sequence[subprocess.Popen] = (),
    stall_s: float = 60,
    cap_s: float = 600,
    interval: float = 0.2,
) -> T:
    """Poll ``done()`` until it is truthy, and return it.

    On a loaded machine a step takes as long as it takes: the test fails when nothing moved
    for ``stall_s`` s, not after a fixed time. A change of ``progress()`` counts as a move,
    and so does CPU time used by ``procs`` or their descendants (a child importing torch
    writes nothing for a while, yet works). It also fails at once when one of ``procs``
    exits (its stderr shown), and after ``cap_s`` s in all, so a test never hangs. On a
    failure every process tree in ``procs`` is killed, then ``what`` (or ``what()``, which
    can show output gathered so far) heads the message.
    """
    import pytest  # not at the top: spawned workers import this module (via engine_helpers)

    def signal_now() -> tuple:
        return (
            progress() if progress is not None else None,
            *(tree_cpu_ticks(p.pid) for p in procs),
        )

    start = last_move = time.monotonic()
    last = signal_now()
    while not (result := done()):
        now = time.monotonic()
        ended = [p for p in procs if p.poll() is not None]
        if ended or now - last_move > stall_s or now - start > cap_s:
            for p in procs:
                if p.poll() is None:  # a reaped one's pid may be another process's by now
                    kill_tree(p.pid)
            for p in procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=10)
            if ended:
                why = f"pid {ended[0].pid} exited with code {ended[0].returncode}"
            elif now - last_move > stall_s:
                why = f"nothing progressed for {stall_s:g} s"
            else:
                why = f"not done in {cap_s:g} s, though it kept progressing"
            errs = "".join(
                f"\n--- stderr of pid {p.pid}:\n{e}" for p in procs if (e := _stderr_of(p))
            )
            head = what() if callable(what) else what
            pytest.fail(f"{head}: {why} (after {now - start:.0f} s){errs}")
        time.sleep(interval)
        if (now_signal := signal_now()) != last:
            last, last_move = now_signal, time.monotonic()
    return result


# -- a child Python, as a user starts it ------------------------------------------------

#: A child's environment: it imports the checkout's packages, whichever folder it runs in.
CHILD_ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
}


def under_load(seconds: float) -> float:
    """A promised wall-clock bound, stretched by how many runnable processes each core has
    now (the 1-min load average per CPU): a stop within 10 s of a signal took 9.3-10.1 s
    with two CPU hogs beside the suite on 2 cores (load ~12), where it takes ~2 s alone."""
    per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
    return seconds * max(1.0, per_core)


def run_python(
    argv: Sequence[str], cwd: Path = ROOT, timeout: float = 120, *, warm: bool = True, **env: str
) -> subprocess.CompletedProcess:
    """``python argv...`` to its end in a real child process, as a user would start it
    (``env`` laid over :data:`CHILD_ENV`), its output captured as text. ``warm``: forked
    from :mod:`warm_python`'s server, its imports done; else a fresh interpreter."""
    return (warm_python.run if warm else subprocess.run)(
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
    return warm_python.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen
    )


def join_all(procs: list[Any], timeout: float, what: str) -> None:
    """Join every started ``multiprocessing`` process, each within ``timeout``, asserting
    it exited 0; any still alive afterwards is killed and reaped."""
    try:
        for p in procs:
            p.join(timeout)
            assert p.exitcode == 0, f"{what} exited with {p.exitcode}"
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)


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
