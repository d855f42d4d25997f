"""Several nodes on one machine: torchrun over loopback, real gloo collectives."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from hogwild.checkpoint import load_checkpoint

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(port: int, *args: str, **popen) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "2",
        "--nproc-per-node",
        "1",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
        "--max-restarts",
        "0",
        *args,
    ]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{TESTS}"}
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen
    )


def finish(procs: list[subprocess.Popen], timeout: float) -> list[tuple[int, str]]:
    out = []
    for p in procs:
        try:
            _, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("a node did not finish in time")
        out.append((p.returncode, err))
    return out


def test_node_sync_averages_and_ends_identical(tmp_path):
    port = free_port()
    procs = [
        torchrun(port, str(TESTS / "dist_node.py"), str(tmp_path), "5", str(i)) for i in range(2)
    ]
    for code, err in finish(procs, 90):
        assert code == 0, err
    a, b = (torch.load(tmp_path / f"node{r}.pt", weights_only=True) for r in (0, 1))
    assert torch.equal(a["broadcast"], b["broadcast"]), "all nodes start from rank 0's model"
    assert torch.equal(a["final"], b["final"]), "after the final round the models are identical"
    assert not torch.equal(a["final"], a["broadcast"]), "the workers' updates were kept"
    assert a["rounds"] == b["rounds"] == 6


def test_a3c_two_nodes_learn_one_run(tmp_path):
    port = free_port()
    args = [
        "-m",
        "a3c.train",
        "--workers",
        "1",
        "--total-steps",
        "200000",
        "--eval-interval",
        "0",
        "--target-return",
        "1e9",
        "--sync-every",
        "1",
        "--logdir",
        str(tmp_path),
    ]
    procs = [torchrun(port, *args) for _ in range(2)]
    results = finish(procs, 240)
    for code, err in results:
        assert code == 0, err
    runs = list(tmp_path.iterdir())
    assert len(runs) == 1, "rank 0 alone writes the run folder"
    ckpt = load_checkpoint(runs[0] / "checkpoint.pt")
    assert ckpt["env_steps"] >= 200_000, "step counts are summed over the nodes"
    acc = EventAccumulator(str(runs[0]))
    acc.Reload()
    returns = [e.value for e in acc.Scalars("charts/episodic_return")]
    assert returns[0] < 50 and max(returns) > 150, returns


def test_a_dead_node_makes_the_other_exit(tmp_path):
    port = free_port()
    args = [
        "-m",
        "a3c.train",
        "--workers",
        "1",
        "--total-steps",
        "100000000",
        "--eval-interval",
        "0",
        "--sync-every",
        "0.5",
        "--dist-timeout",
        "20",
        "--logdir",
        str(tmp_path),
    ]
    victim = torchrun(port, *args)
    survivor = torchrun(port, *args)
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob("*/events.out.tfevents.*")):
        assert time.monotonic() < deadline, "the nodes never started training"
        assert survivor.poll() is None and victim.poll() is None
        time.sleep(0.2)
    time.sleep(2)
    # A machine that dies takes its whole process tree with it. torchrun starts the
    # trainer in a session of its own, so kill the launcher's descendants explicitly.
    for pid in [*descendants(victim.pid), victim.pid]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    t = time.monotonic()
    ((code, err),) = finish([survivor], 60)
    victim.wait()
    assert code != 0
    assert time.monotonic() - t < 45
    assert "lost contact with the other nodes" in err or "error" in err.lower(), err
