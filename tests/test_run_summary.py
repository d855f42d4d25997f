"""``benchmarks/run_summary.py``: a run folder's figures in a few lines, read from its
TensorBoard events as a run writes them."""

from script_helpers import load_benchmark
from torch.utils.tensorboard import SummaryWriter

run_summary = load_benchmark("run_summary")


def test_updates_per_env_step_by_fifths_and_the_return_curve(tmp_path):
    run = tmp_path / "20261129-000000_appo_Hopper-v5_s1"
    with SummaryWriter(run) as writer:
        for i in range(10):
            step = (i + 1) * 1000
            writer.add_scalar("perf/env_steps_per_sec", 1000.0, step)
            # A cap stopping epochs from halfway on: 0.2 updates per step, then 0.1.
            writer.add_scalar("perf/updates_per_sec", 200.0 if i < 5 else 100.0, step)
            writer.add_scalar("charts/mean_return_100", float(i), step)
    lines = run_summary.summary(run)
    (updates,) = [line for line in lines if line.startswith("updates per env step")]
    assert updates.endswith(": 0.2, 0.2, 0.15, 0.1, 0.1"), updates
    (curve,) = [line for line in lines if line.startswith("mean return(100)")]
    assert curve.endswith("10k 9.0"), curve
