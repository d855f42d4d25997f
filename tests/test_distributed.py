"""Several nodes on one machine: torchrun over loopback, real gloo collectives.

NodeSync's own test forks its two nodes from this process with torchrun's variables set:
it is about the averaging, not the launcher, and each torchrun node costs two interpreters
importing torch (~4 s each here).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import dist_node
import pytest
import torch
from proc_helpers import (
    catches,
    child_pids,
    descendants,
    finish,
    folder_state,
    free_port,
    join_all,
    kill_tree,
    pid_gone,
    torchrun,
    wait_until,
)
from tb_helpers import scalar_values

from hogwild.checkpoint import load_checkpoint


def a3c_node(tmp_path: Path, *extra: str) -> list[str]:
    """The arguments of one A3C node, one worker, no evaluator, logging under ``tmp_path``."""
    return [
        "-m", "a3c.train", "--workers", "1", "--eval-interval", "0", "--logdir", str(tmp_path),
        *extra,
    ]  # fmt: skip


def _fork_node(rank: int, port: int, out_dir: str) -> None:
    """One node of :mod:`dist_node`, with the variables torchrun would give it."""
    os.environ.update(
        RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    torch.set_num_threads(1)
    dist_node.main(out_dir, 5, rank)


def test_node_sync_averages_and_ends_identical(tmp_path):
    port = free_port()
    ctx = mp.get_context("fork")
    nodes = [ctx.Process(target=_fork_node, args=(r, port, str(tmp_path))) for r in (0, 1)]
    for node in nodes:
        node.start()
    join_all(nodes, 90, "node")
    a, b = (torch.load(tmp_path / f"node{r}.pt", weights_only=True) for r in (0, 1))
    assert torch.equal(a["broadcast"], b["broadcast"]), "all nodes start from rank 0's model"
    assert torch.equal(a["final"], b["final"]), "after the final round the models are identical"
    assert not torch.equal(a["final"], a["broadcast"]), "the workers' updates were kept"
    assert a["rounds"] == b["rounds"] == 6


@pytest.mark.slow
def test_a3c_two_nodes_learn_one_run(tmp_path):
    port = free_port()
    args = a3c_node(
        tmp_path, "--total-steps", "30000", "--target-return", "1e9", "--sync-every", "1",
        "--log-interval", "0.1",
    )  # fmt: skip
    procs = [torchrun(port, *args) for _ in range(2)]
    results = finish(procs, 240)
    for code, _, err in results:
        assert code == 0, err
    runs = list(tmp_path.iterdir())
    assert len(runs) == 1, "rank 0 alone writes the run folder"
    ckpt = load_checkpoint(runs[0] / "checkpoint.pt")
    assert ckpt["env_steps"] >= 30_000, "step counts are summed over the nodes"
    returns = scalar_values(runs[0])["charts/episodic_return"]
    # Random: ~22. The preset passes 150 after ~8k steps (2 nodes, sync every 1 s).
    assert returns[0] < 100 and max(returns) > 150, returns


def test_a_dead_node_makes_the_other_exit(tmp_path):
    port = free_port()
    # No target return: CartPole is solved in seconds, which would end both nodes first.
    args = a3c_node(
        tmp_path, "--total-steps", "100000000", "--target-return", "1e9", "--sync-every", "0.5",
        "--dist-timeout", "20",
    )  # fmt: skip
    victim = torchrun(port, *args)
    survivor = torchrun(port, *args)
    wait_until(
        lambda: list(tmp_path.glob("*/events.out.tfevents.*")),
        what="the nodes never started training",
        progress=lambda: folder_state(tmp_path),
        procs=[victim, survivor],
    )
    time.sleep(2)
    # A machine that dies takes its whole process tree with it. torchrun starts the
    # trainer in a session of its own, so kill the launcher's descendants explicitly.
    kill_tree(victim.pid)
    t = time.monotonic()
    ((code, _, err),) = finish([survivor], 60)
    victim.wait()
    assert code != 0
    assert time.monotonic() - t < 45
    lines = [line for line in err.splitlines() if line.startswith("a3c.train: error:")]
    assert len(lines) == 1, err
    assert re.fullmatch(
        r"a3c\.train: error: node [01]: lost contact with the other nodes \(.+\)", lines[0]
    ), lines[0]


@contextlib.contextmanager
def two_a3c_nodes(tmp_path: Path, *extra: str) -> Iterator[dict[int, subprocess.Popen]]:
    """Two A3C nodes that train until stopped, by rank, once both are training; whatever
    is left of them is killed at the end."""
    args = a3c_node(tmp_path, "--total-steps", "100000000", "--target-return", "1e9", *extra)
    port = free_port()
    launchers = [torchrun(port, *args) for _ in range(2)]
    try:
        wait_until(
            lambda: list(tmp_path.glob("*/events.out.tfevents.*")),
            what="the nodes never started training",
            progress=lambda: folder_state(tmp_path),
            procs=launchers,
        )
        yield {node_rank(p): p for p in launchers}
    finally:
        for p in launchers:
            if p.poll() is None:
                kill_tree(p.pid)
                p.wait()


def trainer_pid(launcher: subprocess.Popen) -> int:
    """The node's main process: the one child of its torchrun agent."""
    (pid,) = child_pids(launcher.pid)
    return pid


def node_rank(launcher: subprocess.Popen) -> int:
    env = Path(f"/proc/{trainer_pid(launcher)}/environ").read_bytes().split(b"\0")
    return int(next(v for v in env if v.startswith(b"RANK="))[5:])


def signal_node(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        os.kill(pid, sig)


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("a3c.train: error:")]


def test_a_stopped_node_ends_the_run_with_a_checkpoint_and_no_orphan(tmp_path):
    """A frozen node (SIGSTOP: no error, no closed socket) is noticed within --dist-timeout
    past its next round; rank 0 stops with a checkpoint, and the frozen node, continued,
    exits with all its processes."""
    with two_a3c_nodes(tmp_path, "--sync-every", "0.5", "--dist-timeout", "5") as nodes:
        survivor, victim = nodes[0], nodes[1]
        # The node's main process and its workers freeze; its torchrun agent stays up, as a
        # launcher would on a machine whose job was stopped.
        frozen = [trainer_pid(victim), *descendants(trainer_pid(victim))]
        signal_node(frozen, signal.SIGSTOP)
        t = time.monotonic()
        try:
            ((code, _, err),) = finish([survivor], 60)
            waited = time.monotonic() - t
        finally:
            signal_node([pid for pid in frozen if not pid_gone(pid)], signal.SIGCONT)
        assert code != 0
        assert waited < 40, f"rank 0 took {waited:.0f} s to give up on a stopped node"
        assert error_lines(err) == [
            "a3c.train: error: node 0: lost contact with the other nodes "
            "(no answer in 5.5 s: stopped, hung or unreachable)"
        ], err
        (run,) = tmp_path.iterdir()
        assert f"checkpoint {run / 'checkpoint.pt'}" in err
        assert load_checkpoint(run / "checkpoint.pt")["env_steps"] > 0

        ((code, _, err),) = finish([victim], 60)  # continued: its peer is gone, it ends too
        assert code != 0
        (line,) = error_lines(err)
        assert line.startswith("a3c.train: error: node 1: lost contact with the other nodes ("), err
        deadline = time.monotonic() + 10
        while not all(pid_gone(pid) for pid in frozen):
            assert time.monotonic() < deadline, "a process of the stopped node outlived it"
            time.sleep(0.1)


def test_a_stop_on_one_node_waits_for_a_slow_node_and_ends_every_node_alike(tmp_path):
    """A stop vote starts a round at once; the other node joins at its next due round, so
    --sync-every is waited for beyond --dist-timeout: a node paused for longer than
    --dist-timeout but back by then is slow, not dead. The interrupted run ends with 143 on
    both nodes: one that succeeded beside one that did not would keep its torchrun
    launcher waiting 5 minutes for the other."""
    with two_a3c_nodes(tmp_path, "--sync-every", "8", "--dist-timeout", "3") as nodes:
        # Its events file can come before its SIGTERM handler: a signal then ended it as -15
        # and the other node lost contact (1 run in ~5 here).
        wait_until(
            lambda: catches(trainer_pid(nodes[0]), signal.SIGTERM),
            what="node 0 never took over SIGTERM",
            procs=list(nodes.values()),
        )
        paused = [trainer_pid(nodes[1]), *descendants(trainer_pid(nodes[1]))]
        signal_node(paused, signal.SIGSTOP)
        try:
            os.kill(trainer_pid(nodes[0]), signal.SIGTERM)  # rank 0 votes to stop, now
            time.sleep(5)
        finally:
            signal_node(paused, signal.SIGCONT)
        (code0, _, err0), (code1, _, err1) = finish([nodes[0], nodes[1]], 60)
    assert error_lines(err0) == error_lines(err1) == [], err0 + err1
    assert "SIGTERM: stopping workers and saving a checkpoint" in err0
    assert code0 == code1 == 1, err0 + err1  # torchrun's code for a failed trainer
    # Node 1's launcher reports its trainer's 143, unless node 0's launcher, which hosts
    # the rendezvous, left first: then it fails on the lost rendezvous before it reads it.
    reported = r"failed \(exitcode: 143\) local_rank: 0|RendezvousConnectionError"
    assert re.search(reported, err1), err1
    assert re.search(r"^another node stopped: \d+ env steps", err1, re.MULTILINE), err1
    (run,) = tmp_path.iterdir()
    assert load_checkpoint(run / "checkpoint.pt")["env_steps"] > 0
