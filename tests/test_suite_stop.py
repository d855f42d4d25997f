"""The learning suite stops at Ctrl-C/SIGTERM instead of starting its next run.

``train()`` turns the signal into a clean end of the run (exit code 143); a caller that
ignored the code went on to the next seed, so a suite needed one signal per run.
"""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_sigterm_stops_the_suite_not_just_the_run(tmp_path):
    cmd = [sys.executable, str(ROOT / "benchmarks" / "suite.py"), "--envs", "CartPole-v1"]
    cmd += ["--seeds", "1", "2", "3", "--budget", "4", "--logdir", str(tmp_path)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while len(list(tmp_path.glob("*/events.out.tfevents.*"))) < 2:  # seed 1 done, 2 running
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.fail(f"the second run did not start: {proc.communicate()}")
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the suite did not exit within 30 s of SIGTERM")
    assert proc.returncode == 143, err
    assert "Traceback" not in err
    assert "CartPole-v1 seed 2 ended with exit code 143; the suite stops" in err
    assert (out + err).count("run folder:") == 2, out  # seed 3 never started
    assert len(list(tmp_path.iterdir())) == 2
    # The finished seed is still summarised, the cut-short one is not.
    row = next(line for line in out.splitlines() if line.startswith("| CartPole-v1 |"))
    assert "/1 |" in row, row
