"""``benchmarks/dead_starts.py``: a start's first-layer figure, read from a real run."""

import re
from pathlib import Path

import pytest
from proc_helpers import run_python

SCRIPT = str(Path(__file__).resolve().parents[1] / "benchmarks" / "dead_starts.py")


def test_a_short_minatar_start_reports_its_first_layer():
    pytest.importorskip("minatar", reason='needs the minatar extra: pip install -e ".[minatar]"')
    args = [SCRIPT, "--env", "MinAtar/Breakout-v1", "--seeds", "1", "--steps", "5000"]
    proc = run_python([*args, "--workers", "1"], timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seed = re.search(r"seed 1: (alive|DEAD); dead units last ([\d.]+), max ([\d.]+)", proc.stdout)
    assert seed, proc.stdout[-2000:]
    assert 0.0 <= float(seed[2]) <= float(seed[3]) <= 1.0
    assert "MinAtar/Breakout-v1: " in proc.stdout and "dead of 1 starts" in proc.stdout


def test_a_setting_the_script_owns_is_refused():
    proc = run_python([SCRIPT, "--set", "seed=3"], timeout=120)
    assert proc.returncode == 2 and "use --seeds instead" in proc.stderr
