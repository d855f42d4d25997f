"""A child forked from the warm server is what a fresh ``python`` would have been: the same
argv, folder, environment, ``sys.path`` and ``__main__``, the same exit codes and output."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import warm_python
from proc_helpers import CHILD_ENV, catches, wait_until

#: What a child reports of itself.
SELF_REPORT = """
import json, os, sys
main = sys.modules["__main__"]
print(json.dumps({
    "argv": sys.argv, "cwd": os.getcwd(), "path": sys.path, "marker": os.environ.get("MARKER"),
    "name": __name__, "spec": getattr(main.__spec__, "name", None), "file": main.__file__,
}))
print("to stderr", file=sys.stderr)
"""

#: (what the program does, the return code Python ends it with, what its stderr holds)
ENDINGS = [
    ("sys.exit(3)", 3, ""),
    ("sys.exit('a message')", 1, "a message"),
    ("raise ValueError('boom')", 1, "ValueError: boom"),
    ("raise KeyboardInterrupt", -signal.SIGINT, "KeyboardInterrupt"),
    ("import atexit; atexit.register(print, 'at exit', file=sys.stderr)", 0, "at exit"),
    ("import threading, time; threading.Thread(target=lambda: (time.sleep(0.3), "
     "print('joined', file=sys.stderr))).start()", 0, "joined"),
]  # fmt: skip


@pytest.fixture
def package(tmp_path: Path) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "report.py").write_text(SELF_REPORT)
    (tmp_path / "report.py").write_text(SELF_REPORT)
    return tmp_path


@pytest.mark.parametrize("how", [["-m", "pkg.report"], ["report.py"]], ids=["module", "script"])
def test_a_warm_child_sees_what_a_fresh_one_sees(package: Path, how: list[str]) -> None:
    env = {**CHILD_ENV, "MARKER": "m", "PYTHONPATH": f"{package}{os.pathsep}/nowhere"}
    runs = {}
    for name, run in (("warm", warm_python.run), ("fresh", subprocess.run)):
        proc = run([sys.executable, *how, "--flag", "x"], cwd=package, env=env,
                   capture_output=True, text=True, timeout=60)  # fmt: skip
        assert proc.returncode == 0 and proc.stderr == "to stderr\n", proc.stderr
        runs[name] = json.loads(proc.stdout)
    assert runs["warm"] == runs["fresh"]


@pytest.mark.parametrize(("code", "returncode", "stderr"), ENDINGS)
def test_a_warm_child_ends_as_python_ends(tmp_path: Path, code, returncode, stderr) -> None:
    (tmp_path / "end.py").write_text(f"import sys\n{code}\n")
    proc = warm_python.run([sys.executable, "end.py"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=60)  # fmt: skip
    assert proc.returncode == returncode, proc.stderr
    assert stderr in proc.stderr
    assert warm_python.server_pid() is not None, "not forked warm: the test proves nothing"


def test_a_warm_child_is_a_process_that_takes_signals(tmp_path: Path) -> None:
    (tmp_path / "wait.py").write_text(
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))\n"
        "time.sleep(60)\n"
    )
    proc = warm_python.Popen([sys.executable, "wait.py"], cwd=tmp_path)
    wait_until(lambda: catches(proc.pid, signal.SIGTERM), what="no handler", procs=[proc])
    assert proc.poll() is None
    t = time.monotonic()
    proc.terminate()
    assert proc.wait(timeout=30) == 143
    assert time.monotonic() - t < 10
