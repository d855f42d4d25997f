"""The benchmarks that loop over runs stop at Ctrl-C/SIGTERM instead of starting the next;
the suite scores the policy an env without a threshold ends with; its runs resume, and
``--set`` wins over its defaults or says which flag sets the setting.

``train()`` turns the signal into a clean end of the run (exit code 143); a caller that
ignored the code went on to the next seed, so a suite needed one signal per run.
"""

import json
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import warm_python
from proc_helpers import folder_state, wait_until
from script_helpers import load_benchmark

from a3c.use.saved import evaluate

ROOT = Path(__file__).resolve().parents[1]


def test_sigterm_stops_the_suite_not_just_the_run(tmp_path):
    cmd = [sys.executable, str(ROOT / "benchmarks" / "suite.py"), "--envs", "CartPole-v1"]
    cmd += ["--seeds", "1", "2", "3", "--budget", "4", "--logdir", str(tmp_path)]
    proc = warm_python.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(
        lambda: len(list(tmp_path.glob("*/events.out.tfevents.*"))) >= 2,  # seed 1 done, 2 on
        what="the second run did not start",
        progress=lambda: folder_state(tmp_path),
        procs=[proc],
    )
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
    proc = warm_python.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out: list[str] = []

    def read() -> None:
        for line in proc.stdout:
            out.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    wait_until(
        lambda: sum(line.startswith("run folder:") for line in out) >= 2,  # run 1 done, 2 on
        what=lambda: f"the second run did not start: {out}",
        progress=lambda: len(out),
        procs=[proc],
    )
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the benchmark did not exit within 30 s of SIGTERM")
    reader.join(10)
    text = "".join(out)
    assert proc.returncode == 143, text
    assert "Traceback" not in text
    assert "a run ended with exit code 143; the benchmark stops" in text
    assert text.count("run folder:") == 2, text


def test_envs_without_a_threshold_report_the_final_policys_greedy_return(
    tmp_path, monkeypatch, capsys
):
    """The agent a run ends with, scored without exploration noise: the same figure as
    ``a3c.evaluate CHECKPOINT --episodes 10`` of the run's checkpoint."""
    suite = load_benchmark("suite")
    monkeypatch.setattr(suite, "by_return", lambda env_id: env_id == "CartPole-v1")
    row = suite.run_env("CartPole-v1", [1], suite.Budget(3.0), 1, {}, str(tmp_path)).row()
    (run,) = tmp_path.glob("*CartPole-v1_s1")
    want = evaluate(run / "checkpoint.pt", suite.GREEDY_EPISODES).mean()
    assert row.endswith(f" | greedy: {want:.0f} |"), row
    assert f"; greedy {want:.1f}" in capsys.readouterr().out


def _strict_json(text: str) -> dict:
    """JSON as strict parsers read it: no Infinity or NaN."""

    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_a_run_without_a_target_records_strict_json_and_resumes(tmp_path, monkeypatch, capsys):
    """A by-return run trains its whole budget by ``target_metric none``, not by an infinite
    target that config.json could only write as ``Infinity`` and a resume refused."""
    from a3c.train import main as train_main

    suite = load_benchmark("suite")
    monkeypatch.setattr(suite, "by_return", lambda env_id: env_id == "CartPole-v1")
    monkeypatch.setattr(suite, "GREEDY_EPISODES", 1)
    (ran,) = suite.run_env("CartPole-v1", [1], suite.Budget(2.0), 1, {}, str(tmp_path)).runs
    (run,) = tmp_path.glob("*CartPole-v1_s1")
    cfg = _strict_json((run / "config.json").read_text())
    assert cfg["target_metric"] == "none"
    assert ran.solved_at is None  # no target given: none reported
    steps = ran.env_steps + 500
    argv = ["--resume", str(run / "checkpoint.pt"), "--total-steps", str(steps)]
    assert train_main([*argv, "--time-limit", "120"]) == 0
    out, err = capsys.readouterr()
    reached = re.search(r"step budget reached: (\d+) env steps", out + err)
    assert reached and int(reached[1]) >= steps, err


def test_set_wins_over_the_suites_defaults(tmp_path, monkeypatch):
    """``--set`` of a setting the suite only defaults: the user's value, not a TypeError
    (eval_interval) nor a silent replacement (total_steps, a by-return env's target)."""
    suite = load_benchmark("suite")
    monkeypatch.setattr(suite, "by_return", lambda env_id: env_id == "CartPole-v1")
    monkeypatch.setattr(suite, "GREEDY_EPISODES", 1)
    extra = suite.parse_set(["eval_interval=300", "total_steps=3000", "target_return=20"])
    done = suite.run_env("CartPole-v1", [1], suite.Budget(300.0), 1, extra, str(tmp_path))
    (run,) = tmp_path.glob("*CartPole-v1_s1")
    cfg = _strict_json((run / "config.json").read_text())
    assert (cfg["eval_interval"], cfg["total_steps"], cfg["target_return"]) == (300, 3000, 20)
    assert 3000 <= done.runs[0].env_steps < 4000  # the step budget ended it, not the time


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--envs", "CartPole-v1", "--set", "env=Acrobot-v1"], "--set env: use --envs"),
        (["--envs", "CartPole-v1", "--set", "target_metric=train"], "whole budget"),
        (
            ["--family", "atari", "--envs", "BreakoutNoFrameskip-v4", "--set", "total_steps=9"],
            "--set total_steps: the atari family's budget sets the steps; --budget",
        ),
        (
            ["--family", "minatar", "--set", "target_return=5"],
            "--set target_return: the minatar family's targets set it",
        ),
    ],
)
def test_set_of_a_setting_the_suite_owns_is_one_line_and_exit_2(
    args, says, tmp_path, monkeypatch, capsys
):
    suite = load_benchmark("suite")
    monkeypatch.setattr(sys, "argv", ["suite.py", *args, "--logdir", str(tmp_path / "runs")])
    with pytest.raises(SystemExit) as exited:
        suite.main()
    out, err = capsys.readouterr()
    assert exited.value.code == 2, out + err
    assert err.count("\n") == 1 and says in err, err
    assert not (tmp_path / "runs").exists()
