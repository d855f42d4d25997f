"""Tests for the Hogwild! MNIST application: real processes, real data, the real CLI."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import warm_python
from proc_helpers import child_pids, cmdline, folder_state, pid_gone, run_python, wait_until
from tb_helpers import scalar_values

from hogwild.flat import flatten_parameters
from hogwild.mnist import ConvNet, main
from hogwild.optim import SharedSGD
from hogwild.procs import WorkerContext, WorkerGroup
from hogwild.supervised.data import shard_indices
from hogwild.supervised.trainer import SampleCount

REPO = Path(__file__).resolve().parents[1]


def quick_args(mnist_dir: Path, tmp_path: Path, *extra: str) -> list[str]:
    return [
        "--data-dir", str(mnist_dir), "--no-download", "--logdir", str(tmp_path / "runs"),
        "--workers", "2", "--max-batches-per-epoch", "150", "--seed", "3", *extra,
    ]  # fmt: skip


def only_run_dir(tmp_path: Path) -> Path:
    (run,) = (tmp_path / "runs").iterdir()
    return run


# ---------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_trains_to_95_percent_logs_checkpoints_and_resumes(mnist_dir, tmp_path, capsys):
    assert main(quick_args(mnist_dir, tmp_path, "--epochs", "1")) == 0
    out = capsys.readouterr().out
    assert "epoch 1: test loss" in out

    run = only_run_dir(tmp_path)
    config = json.loads((run / "config.json").read_text())
    assert config["workers"] == 2 and config["optimizer"] == "sgd"
    ckpt = torch.load(run / "checkpoint.pt", weights_only=True)
    assert ckpt["epoch"] == 1
    assert ckpt["test_accuracy"] >= 95.0
    dense = ckpt["optimizers"]["dense"]  # [worker][parameter group]
    assert len(dense) == 2  # one per worker, each with its own momentum
    assert all(w[0]["state"]["momentum_buffer"].abs().sum() > 0 for w in dense)
    first_samples = ckpt["samples"]
    assert first_samples == 2 * 150 * 64

    values = scalar_values(run)
    for tag in ("test/accuracy", "test/loss", "train/loss", "perf/samples_per_sec"):
        assert tag in values, f"{tag} missing from {sorted(values)}"
    assert values["test/accuracy"][-1] >= 95.0
    assert values["perf/samples_per_sec"][-1] > 0

    # --resume continues in the same run folder: epoch 2, same weights to start from,
    # and the evaluator process scores snapshots on the side.
    argv = quick_args(mnist_dir, tmp_path, "--epochs", "2", "--resume", str(run / "checkpoint.pt"))
    assert main([*argv, "--eval-interval", "0.5", "--eval-device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "epoch 2: test loss" in out and "epoch 1:" not in out
    ckpt2 = torch.load(run / "checkpoint.pt", weights_only=True)
    assert ckpt2["epoch"] == 2
    assert ckpt2["samples"] == 2 * first_samples
    assert ckpt2["test_accuracy"] >= 95.0
    values = scalar_values(run)
    assert len(values["test/accuracy"]) == 2
    assert "eval/accuracy" in values and values["eval/accuracy"][-1] > 90.0

    # Resuming a finished run trains nothing; resuming with another optimizer is refused.
    argv = quick_args(mnist_dir, tmp_path, "--epochs", "2", "--resume", str(run / "checkpoint.pt"))
    assert main(argv) == 0
    assert "nothing to train" in capsys.readouterr().out
    argv = quick_args(mnist_dir, tmp_path, "--epochs", "3", "--resume", str(run / "checkpoint.pt"))
    assert main([*argv, "--optimizer", "adam"]) == 2
    assert "trained with --optimizer sgd" in capsys.readouterr().err
    assert torch.load(run / "checkpoint.pt", weights_only=True)["epoch"] == 2


@pytest.mark.parametrize("policy", ["restart", "abort"])
def test_killed_worker_is_restarted_or_aborts_the_run(mnist_dir, tmp_path, caplog, capsys, policy):
    """SIGKILL one worker mid-epoch: restarted on its shard (run finishes) or exit 1."""
    me = Path("/proc/self/cmdline").read_bytes()
    killed: list[int] = []

    def kill_one_worker() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            for child in child_pids():
                # Forked workers share our command line; spawned ones (the engine spawns
                # after a backward in this process with a GPU present) run spawn_main.
                if cmdline(child) == me or b"spawn_main" in cmdline(child):
                    time.sleep(0.2)  # let it train a little first
                    try:
                        os.kill(child, signal.SIGKILL)
                    except ProcessLookupError:
                        continue
                    killed.append(child)
                    return
            time.sleep(0.02)

    killer = threading.Thread(target=kill_one_worker, daemon=True)
    killer.start()
    argv = quick_args(mnist_dir, tmp_path, "--epochs", "1", "--max-batches-per-epoch", "300")
    # The abort run also covers Adam and a training subset.
    extra = ["--optimizer", "adam", "--lr", "1e-3", "--train-subset", "40000"]
    code = main([*argv, "--on-worker-failure", policy, *(extra if policy == "abort" else [])])
    killer.join(5)
    assert killed, "never saw a worker to kill"
    ckpt = torch.load(only_run_dir(tmp_path) / "checkpoint.pt", weights_only=True)
    if policy == "restart":
        assert code == 0
        assert "restarting worker" in caplog.text
        assert ckpt["epoch"] == 1
        # The restarted worker redid its whole shard: at least one epoch's worth was trained.
        assert ckpt["samples"] >= 2 * 300 * 64
    else:
        assert code == 1
        assert "was killed by SIGKILL; aborting" in capsys.readouterr().err
        assert ckpt["epoch"] == 0  # a checkpoint is still written, for --resume
        assert ckpt["optimizers"]["dense"][0][0]["type"] == "SharedAdam"


def test_spawned_workers_train_the_shared_model(mnist_dir, tmp_path, capsys):
    """--start-method spawn: the model, optimizers, pool and data are pickled, not inherited."""
    argv = quick_args(mnist_dir, tmp_path, "--epochs", "1", "--max-batches-per-epoch", "40")
    assert main([*argv, "--start-method", "spawn", "--train-subset", "10000"]) == 0
    ckpt = torch.load(only_run_dir(tmp_path) / "checkpoint.pt", weights_only=True)
    assert ckpt["samples"] == 2 * 40 * 64
    assert ckpt["test_accuracy"] > 80.0  # 5k samples: far from chance, so updates landed


def test_sigterm_stops_workers_saves_checkpoint_and_exits_143(mnist_dir, tmp_path):
    cmd = [
        sys.executable, "-m", "hogwild.mnist", "--data-dir", str(mnist_dir),
        "--no-download", "--logdir", str(tmp_path / "runs"), "--epochs", "50",
    ]  # fmt: skip
    proc = warm_python.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_until(
            lambda: len(child_pids(proc.pid)) >= 2,
            what="workers never started",
            progress=lambda: folder_state(tmp_path),
            procs=[proc],
            interval=0.05,
        )
        workers = sorted(child_pids(proc.pid))
        time.sleep(0.5)
        t = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert time.monotonic() - t < 15
    finally:
        proc.kill()
    assert proc.returncode == 143, err.decode()
    assert b"Traceback" not in err
    ckpt = torch.load(only_run_dir(tmp_path) / "checkpoint.pt", weights_only=True)
    assert ckpt["epoch"] == 0 and ckpt["position"]["epoch"] == 0  # a resume goes on inside it
    for pid in workers:  # no orphans
        assert pid_gone(pid)


# ------------------------------------------------------------------- shared model


def _add_known_delta(ctx: WorkerContext, model: torch.nn.Module, optimizers: list) -> None:
    """Worker r adds r + 1 to every parameter through its own optimizer (SGD, lr 1).

    Worker 1 first waits until it sees worker 0's update, so the two writes never race
    (Hogwild! would tolerate a lost update; this test wants an exact sum).
    """
    opt = optimizers[ctx.rank]
    if ctx.rank == 1:
        deadline = time.monotonic() + 30
        while float(model.conv1.weight[0, 0, 0, 0]) != 1.0:
            if time.monotonic() > deadline:
                raise TimeoutError("worker 0's update never became visible")
            time.sleep(0.001)
    opt.step(torch.full_like(opt.params, -(ctx.rank + 1.0)), 0)


def test_workers_update_the_one_shared_model_in_place():
    model = ConvNet()
    flat = flatten_parameters(model).share_memory_()
    flat.zero_()
    optimizers = [SharedSGD(flat, lr=1.0, momentum=0.9).share_memory() for _ in range(2)]
    group = WorkerGroup(_add_known_delta, (model, optimizers), num_workers=2, seed=0).start()
    deadline = time.monotonic() + 60
    while not group.finished and time.monotonic() < deadline:
        group.check()
        time.sleep(0.01)
    group.stop()
    assert group.finished
    # Both updates landed in the parent's parameters (views of the shared flat tensor).
    assert torch.equal(flat, torch.full_like(flat, 3.0))
    assert torch.equal(model.fc2.bias.detach(), torch.full((10,), 3.0))
    # Each worker's optimizer state is its own and visible here (it goes into checkpoints).
    for rank, opt in enumerate(optimizers):
        assert opt.total_steps == 1
        assert torch.equal(opt.state["momentum_buffer"], torch.full_like(flat, -(rank + 1.0)))


def test_shards_are_disjoint_cover_the_data_and_follow_the_seed():
    shards = [shard_indices(100, 11, rank, 3, seed=rank) for rank in range(3)]
    assert sorted(torch.cat(shards).tolist()) == list(range(100))
    # A restarted worker (new seed) gets the same shard in a new order.
    again = shard_indices(100, 11, 1, 3, seed=999)
    assert sorted(again.tolist()) == sorted(shards[1].tolist())
    assert not torch.equal(again, shards[1])
    # The next epoch (another shuffle seed) reshuffles the shards.
    assert set(shard_indices(100, 12, 0, 3, seed=0).tolist()) != set(shards[0].tolist())


# ------------------------------------------------------------------------ bad input


def test_bad_input_is_one_line_and_exit_code_2(tmp_path, capsys):
    truncated = tmp_path / "truncated"
    truncated.mkdir()
    for name in ("train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        (truncated / f"{name}.gz").write_bytes(gzip.compress(b"\0\0\x08\x01\0\0\0\0"))
    # Header says 60000 x 28 x 28, but the data stops after 100 bytes.
    header = b"\0\0\x08\x03" + (60000).to_bytes(4, "big") + (28).to_bytes(4, "big") * 2
    (truncated / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(header + b"\0" * 100))
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"this is not a checkpoint")
    # The checkpoint is read before any data: this case needs no real MNIST.
    nowhere = str(tmp_path / "nowhere")
    data = ["--data-dir", nowhere, "--no-download", "--logdir", str(tmp_path / "runs")]
    cases = {
        "--workers": ["--workers", "0"],
        "--batch-size": ["--batch-size", "-1"],
        "--amp fp16 runs on CUDA only": ["--amp", "fp16"],  # a CPU device, in any case
        "MNIST files missing": ["--data-dir", nowhere, "--no-download"],
        "not a readable checkpoint": [*data, "--resume", str(corrupt)],
    }
    # The case that gets furthest (its data is read) runs as a user runs it, exit code and
    # all; the others through main() here (a child interpreter takes ~4 s to import torch).
    proc = run_python(["-m", "hogwild.mnist", "--data-dir", str(truncated)], timeout=120)
    results = {"truncated": (proc.returncode, proc.stdout, proc.stderr)}
    for expected, argv in cases.items():
        code = main(argv)
        results[expected] = (code, *capsys.readouterr())
    for expected, (code, out, err) in results.items():
        lines = err.strip().splitlines()
        assert code == 2, (expected, err)
        assert len(lines) == 1, (expected, err)
        assert lines[0].startswith("hogwild-mnist: error: ") and expected in lines[0], err
        assert "Traceback" not in err + out
    assert not (tmp_path / "runs").exists()  # nothing half-made is left behind


def test_samples_count_once_across_nodes():
    count = SampleCount(start=100)  # a resumed run's samples
    count.add(30, 3.0)
    sent = count.start_round()  # this node's 30 go into the round
    count.add(5, 0.5)  # and its workers go on meanwhile
    count.end_round(sent + 50)  # the round's sum: another node trained 50
    assert (count.total, count.epoch) == (185, 85)
    assert count.start_round() == 5  # only what was not sent before
