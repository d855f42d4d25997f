"""MNIST beyond one process group: ``--mode ddp`` and Hogwild! nodes under torchrun.

Real processes and real MNIST, kept short with --max-batches-per-epoch: DDP ranks
spawned by the app itself, and two torchrun "machines" over loopback.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import warm_python
from proc_helpers import (
    cmdline,
    descendants,
    finish,
    folder_state,
    free_port,
    kill_tree,
    pid_gone,
    torchrun,
    wait_until,
)
from tb_helpers import scalar_values

from hogwild.flat import flatten_parameters
from hogwild.mnist import ConvNet, main, params_digest

REPO = Path(__file__).resolve().parents[1]

DIGEST = re.compile(r"final parameters identical on all 2 nodes \(sha256 ([0-9a-f]{16})\)")


def common(mnist_dir: Path, tmp_path: Path, *extra: str) -> list[str]:
    return [
        "--data-dir", str(mnist_dir), "--no-download", "--logdir", str(tmp_path / "runs"),
        "--seed", "3", *extra,
    ]  # fmt: skip


def event_writers(tmp_path: Path) -> set[tuple[Path, str]]:
    """(folder, pid) of every TensorBoard events file: who wrote TensorBoard, and where."""
    return {(p.parent, p.name.split(".")[-2]) for p in tmp_path.rglob("events.out.tfevents.*")}


# ----------------------------------------------------------------------------- DDP


def test_ddp_two_ranks_learn_and_rank0_alone_writes(mnist_dir, tmp_path, capsys):
    argv = common(
        mnist_dir, tmp_path, "--mode", "ddp", "--workers", "2", "--max-batches-per-epoch", "150"
    )
    assert main([*argv, "--epochs", "1"]) == 0
    out = capsys.readouterr().out
    assert "2 DDP rank(s) (gloo)" in out
    assert out.count("epoch 1: test loss") == 1, out  # rank 0's lines, relayed once

    (run,) = (tmp_path / "runs").iterdir()
    assert sorted(p.name for p in tmp_path.rglob("*.pt")) == ["best.pt", "checkpoint.pt"]
    assert [folder for folder, _ in event_writers(tmp_path)] == [run]  # one writer process
    ckpt = torch.load(run / "checkpoint.pt", weights_only=True)
    assert ckpt["config"]["strategy"] == "ddp" and ckpt["epoch"] == 1
    assert ckpt["samples"] == 2 * 150 * 64  # both ranks' batches
    assert ckpt["test_accuracy"] >= 95.0
    ConvNet().load_state_dict(ckpt["model"])  # the plain model's keys, no "module."
    values = scalar_values(run)
    for tag in ("train/loss", "test/loss", "test/accuracy", "perf/samples_per_sec"):
        assert tag in values, f"{tag} missing from {sorted(values)}"
    assert values["test/accuracy"] == [pytest.approx(ckpt["test_accuracy"])]

    # A DDP checkpoint resumes in ddp mode only; bad input is one line and exit 2.
    resume = ["--resume", str(run / "checkpoint.pt")]
    assert main([*argv, "--epochs", "1", *resume]) == 0
    assert "nothing to train" in capsys.readouterr().out
    assert main([*argv, "--epochs", "2", *resume, "--mode", "hogwild"]) == 2
    assert "was trained with --strategy ddp, not hogwild" in capsys.readouterr().err
    for bad, expected in (
        (["--eval-interval", "1"], "--eval-interval is for the hogwild strategy"),
        (["--data-dir", str(tmp_path / "nowhere")], "MNIST files missing"),
    ):
        assert main([*argv, *bad]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and expected in err[0], err
    assert len(list((tmp_path / "runs").iterdir())) == 1


def test_ddp_sigterm_stops_every_rank_and_saves(mnist_dir, tmp_path):
    cmd = [sys.executable, "-m", "hogwild.mnist", "--mode", "ddp", "--workers", "2"]
    cmd += common(mnist_dir, tmp_path, "--epochs", "50")
    proc = warm_python.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_until(
            lambda: list((tmp_path / "runs").glob("*/events.out.tfevents.*")),
            what="the ranks never started training",
            progress=lambda: folder_state(tmp_path),
            procs=[proc],
        )
        time.sleep(1.0)
        children = {pid: cmdline(pid) for pid in descendants(proc.pid)}
        # multiprocessing's resource tracker is no rank: it exits by itself once the parent
        # has gone (end of file on its pipe), so it may outlive the parent for a moment.
        ranks = [pid for pid, cmd in children.items() if b"resource_tracker" not in cmd]
        assert len(ranks) >= 2, children
        t = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert time.monotonic() - t < 20
    finally:
        proc.kill()
    assert proc.returncode == 143, err.decode()
    assert b"Traceback" not in err
    (run,) = (tmp_path / "runs").iterdir()
    ckpt = torch.load(run / "checkpoint.pt", weights_only=True)
    assert ckpt["epoch"] == 0 and ckpt["samples"] > 0
    assert ckpt["position"]["samples"] == ckpt["samples"]  # mid-epoch: a resume goes on there
    assert all(pid_gone(pid) for pid in ranks), "a rank outlived the parent"
    deadline = time.monotonic() + 10
    while not all(pid_gone(pid) for pid in children):
        assert time.monotonic() < deadline, "a helper process outlived the parent by 10 s"
        time.sleep(0.1)


# ------------------------------------------------------------------- torchrun nodes


def test_two_nodes_learn_one_run_identical_models(mnist_dir, tmp_path):
    port = free_port()
    args = common(
        mnist_dir, tmp_path, "--workers", "1", "--epochs", "1", "--max-batches-per-epoch", "150"
    )
    procs = [torchrun(port, "-m", "hogwild.mnist", *args, "--sync-every", "0.5") for _ in range(2)]
    results = finish(procs, 120)
    for code, _, err in results:
        assert code == 0, err
    (run,) = (tmp_path / "runs").iterdir()  # rank 0 alone writes the run folder
    assert [folder for folder, _ in event_writers(tmp_path)] == [run]  # one writer process
    ckpt = torch.load(run / "checkpoint.pt", weights_only=True)
    assert ckpt["samples"] == 2 * 150 * 64, "sample counts are summed over the nodes"
    assert ckpt["test_accuracy"] >= 95.0
    assert scalar_values(run)["test/accuracy"] == [pytest.approx(ckpt["test_accuracy"])]
    # Both nodes ended with the same parameters, and they are rank 0's checkpoint.
    digests = {m[1] for _, out, _ in results for m in DIGEST.finditer(out)}
    model = ConvNet()
    model.load_state_dict(ckpt["model"])
    assert digests == {params_digest(flatten_parameters(model))}, [r[1] for r in results]
    assert sum(out.count("epoch 1: test loss") for _, out, _ in results) == 1


def test_a_dead_node_makes_the_other_exit_with_one_clear_line(mnist_dir, tmp_path):
    port = free_port()
    args = common(mnist_dir, tmp_path, "--workers", "1", "--epochs", "50", "--sync-every", "0.5")
    args = ["-m", "hogwild.mnist", *args, "--dist-timeout", "20"]
    victim = torchrun(port, *args)
    survivor = torchrun(port, *args)
    try:
        wait_until(
            lambda: list((tmp_path / "runs").glob("*/events.out.tfevents.*")),
            what="the nodes never started training",
            progress=lambda: folder_state(tmp_path),
            procs=[victim, survivor],
        )
        time.sleep(2)
        # A machine that dies takes its whole process tree with it (torchrun starts the
        # trainer in a session of its own, so kill the launcher's descendants explicitly).
        kill_tree(victim.pid)
        t = time.monotonic()
        ((code, _, err),) = finish([survivor], 60)
        assert time.monotonic() - t < 45
    finally:
        for p in (victim, survivor):
            p.kill()
            p.wait()
    assert code != 0
    lines = [line for line in err.splitlines() if line.startswith("hogwild-mnist: error:")]
    assert len(lines) == 1 and "lost contact with the other nodes" in lines[0], err
