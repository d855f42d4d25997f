"""``python -m a3c.tune``: real short trials, the best settings as a file ``--config`` takes."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("optuna", reason='a3c.tune needs the tune extra (pip install -e ".[tune]")')

from a3c.tune import CurveScore, main, space  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CHILD_ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
}


def tune(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "a3c.tune", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=CHILD_ENV,
    )


def test_a_search_writes_settings_that_a_run_takes(tmp_path):
    proc = tune(
        "--env", "CartPole-v1", "--trials", "3", "--budget", "3", "--workers", "1",
        "--jobs", "2", "--out", "best.toml", "--logdir", "study", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [
        line for line in proc.stdout.splitlines() if line.startswith("| ") and "trial" not in line
    ]
    assert len(rows) == 3, proc.stdout  # every trial, from both processes
    assert any("the preset" in row for row in rows), proc.stdout
    best = tomllib.loads((tmp_path / "best.toml").read_text())
    assert best["env"] == "CartPole-v1" and best["algo"] == "a3c"
    runs = sorted((tmp_path / "study" / "trials").iterdir())
    assert len(runs) == 3 and all((r / "checkpoint.pt").exists() for r in runs)
    # The file is what a3c.train --config takes.
    train = subprocess.run(
        [sys.executable, "-m", "a3c.train", "--config", "best.toml", "--total-steps", "2000",
         "--eval-interval", "0", "--workers", "1"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=CHILD_ENV,
    )  # fmt: skip
    assert train.returncode == 0, train.stderr


def test_bad_arguments_are_one_line(tmp_path, capsys):
    assert main(["--env", "NoSuchEnv-v0", "--logdir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("a3c.tune: error:"), err
    assert main(["--env", "CartPole-v1", "--trials", "0", "--logdir", str(tmp_path)]) == 2


def test_the_space_stays_inside_the_declared_ranges():
    for algo in ("a3c", "appo"):
        dims = space(algo)
        assert dims["gamma"].values and all(0 <= g <= 1 for g in dims["gamma"].values)
        assert dims["lr"].low > 0
    assert "epochs" in space("appo") and "epochs" not in space("a3c")


class FakeTrial:
    """Records reports; prunes once told to."""

    def __init__(self, prune_after: int) -> None:
        self.reports: list[tuple[float, int]] = []
        self.prune_after = prune_after

    def report(self, value: float, step: int) -> None:
        self.reports.append((value, step))

    def should_prune(self) -> bool:
        return len(self.reports) >= self.prune_after


def event(seconds: float, mean: float | None, kind: str = "log") -> SimpleNamespace:
    return SimpleNamespace(kind=kind, seconds=seconds, mean_return_100=mean)


def test_the_score_is_the_time_average_of_the_curve_and_a_lagging_run_is_stopped():
    trial = FakeTrial(prune_after=10)
    score = CurveScore(trial)
    assert score(event(0.5, None)) is None  # no episode yet: nothing to score
    for t, mean in [(1, 10.0), (2, 30.0), (4, 30.0)]:
        assert score(event(t, mean)) is None
    assert score(event(5, 0.0, kind="eval")) is None  # only log points count
    # Trapezoids: (1 s x 20 + 2 s x 30) / 3 s.
    assert score.value == pytest.approx(80 / 3)
    assert [step for _, step in trial.reports] == [2, 4]
    lagging = CurveScore(FakeTrial(prune_after=1))
    lagging(event(1, 5.0))
    assert lagging(event(2, 5.0)) is False and lagging.pruned
