"""The tests' progress-based wait: a slow but working child is waited for, a stuck or dead
one fails the test soon with what it said, and no child is left behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from proc_helpers import folder_state, pid_gone, wait_until


def child(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)


def test_a_child_that_works_without_writing_is_waited_for(tmp_path: Path) -> None:
    """Its CPU time is progress: it writes its file only after more than ``stall_s``."""
    done = tmp_path / "done"
    proc = child(
        "import time\n"
        "start = time.monotonic()\n"
        "while time.monotonic() - start < 1.5: pass\n"
        f"open({str(done)!r}, 'w').close()\n"
        "time.sleep(60)"
    )
    try:
        wait_until(done.exists, what="the file", procs=[proc], stall_s=0.5, interval=0.05)
    finally:
        proc.kill()
        proc.communicate()


def test_a_stuck_child_fails_after_the_stall_window_and_is_killed(tmp_path: Path) -> None:
    proc = child("import time; time.sleep(60)")
    with pytest.raises(pytest.fail.Exception, match=r"the file: nothing progressed for 1 s"):
        wait_until(
            (tmp_path / "never").exists,
            what="the file",
            progress=lambda: folder_state(tmp_path),
            procs=[proc],
            stall_s=1.0,
        )
    assert pid_gone(proc.pid)


def test_a_child_that_dies_fails_at_once_with_its_stderr(tmp_path: Path) -> None:
    proc = child("import sys; sys.exit('boom: bad flag')")
    with pytest.raises(pytest.fail.Exception) as failed:
        wait_until((tmp_path / "never").exists, what="the file", procs=[proc], stall_s=60)
    assert f"pid {proc.pid} exited with code 1" in str(failed.value)
    assert "boom: bad flag" in str(failed.value)
