"""The benchmarks that loop over runs stop at Ctrl-C/SIGTERM instead of starting the next;
the suite scores the policy an env without a threshold ends with.

``train()`` turns the signal into a clean end of the run (exit code 143); a caller that
ignored the code went on to the next seed, so a suite needed one signal per run.
"""

import importlib.util
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from a3c.use.saved import evaluate

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
    assert out.rstrip().endswith("only the runs that finished before the stop"), out


def test_sigterm_stops_the_throughput_benchmark():
    """a3c_bench keeps its runs in a temporary folder: its console says when one starts."""
    cmd = [sys.executable, str(ROOT / "benchmarks" / "a3c_bench.py"), "--only", "workers"]
    cmd += ["--seconds", "3", "--rounds", "2"]  # four runs
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)  # end of output

    threading.Thread(target=read, daemon=True).start()
    out: list[str] = []
    deadline = time.monotonic() + 90
    while sum(line.startswith("run folder:") for line in out) < 2:  # run 1 done, 2 going
        try:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            line = None
        if line is None:
            proc.kill()
            pytest.fail(f"the second run did not start: {out}")
        out.append(line)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the benchmark did not exit within 30 s of SIGTERM")
    while (line := lines.get(timeout=10)) is not None:
        out.append(line)
    text = "".join(out)
    assert proc.returncode == 143, text
    assert "Traceback" not in text
    assert "a run ended with exit code 143; the benchmark stops" in text
    assert text.count("run folder:") == 2, text


def _load_suite():
    if str(ROOT / "benchmarks") not in sys.path:  # suite.py imports its neighbour families.py
        sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("suite", ROOT / "benchmarks" / "suite.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["suite"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_envs_without_a_threshold_report_the_final_policys_greedy_return(
    tmp_path, monkeypatch, capsys
):
    """The agent a run ends with, scored without exploration noise: the same figure as
    ``a3c.evaluate CHECKPOINT --episodes 10`` of the run's checkpoint."""
    suite = _load_suite()
    monkeypatch.setattr(suite, "by_return", lambda env_id: env_id == "CartPole-v1")
    row = suite.run_env("CartPole-v1", [1], suite.Budget(3.0), 1, {}, str(tmp_path)).row()
    (run,) = tmp_path.glob("*CartPole-v1_s1")
    want = evaluate(run / "checkpoint.pt", suite.GREEDY_EPISODES).mean()
    assert row.endswith(f" | greedy: {want:.0f} |"), row
    assert f"; greedy {want:.1f}" in capsys.readouterr().out
