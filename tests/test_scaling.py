"""``benchmarks/scaling.py``: it runs end to end on a small env, its model's arithmetic is
the one its docstring states, and bad input is one line and exit code 2."""

import re
from pathlib import Path

import pytest
from proc_helpers import run_python
from script_helpers import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(ROOT / "benchmarks" / "scaling.py")


def test_cartpole_prints_a_prediction_for_every_core_count():
    proc = run_python([SCRIPT, "--env", "CartPole-v1", "--rounds", "1"], timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {
        int(m[1]): [float(x.replace(",", "")) for x in re.findall(r"\| ([\d,.]+)", m[2])]
        for m in re.finditer(r"^\| (\d+) (\|.*)$", proc.stdout, re.MULTILINE)
    }
    assert sorted(rows) == [2, 4, 8, 16, 32], proc.stdout
    # Hogwild's ideal line is linear in the cores.
    assert rows[32][0] == pytest.approx(16 * rows[2][0], rel=1e-3), proc.stdout
    assert "learning per sample" in proc.stdout and "Assumed, not measured" in proc.stdout


def test_the_model_takes_the_slower_side_and_the_best_split():
    scaling = load_benchmark("scaling")
    c = scaling.Costs(
        collect=100.0, env=60.0, act=30.0, learn={1: 100.0, 2: 50.0}, learn_cuda=None,
        learn_cuda_bf16=None,
        publish=0.0, publish_cuda=None, handoff=0.0, samples=1, updates=1, params=1,
        no_cuda="none here",
    )  # fmt: skip
    assert scaling.hogwild(c, 4) == pytest.approx(4 * 1e6 / 200)
    # 4 cores: a 1-thread learner (10k/s) under 3 actors (30k/s), or 2 threads (20k/s)
    # beside 2 actors (20k/s): the second.
    assert scaling.decoupled_cpu(c, 4, c.learn) == (pytest.approx(20_000), 2, "actors")
    assert scaling.decoupled_cpu(c, 2, c.learn) == (pytest.approx(10_000), 1, "actors")
    assert scaling.decoupled_gpu(c, 4) is None
    c.learn_cuda, c.publish_cuda = 10.0, 0.0
    assert scaling.decoupled_gpu(c, 4) == (pytest.approx(30_000), "actors")


@pytest.mark.parametrize(
    "args, message",
    [(["--rounds", "0"], "--rounds must be at least 1"), (["--env", "NoSuchEnv-v0"], "NoSuchEnv")],
)
def test_bad_input_is_one_line_and_exit_code_2(args, message):
    proc = run_python([SCRIPT, *args], timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
