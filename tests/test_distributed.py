"""Several nodes on one machine: torchrun over loopback, real gloo collectives."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import torch
from proc_helpers import TESTS, finish, free_port, kill_tree, torchrun
from tb_helpers import scalar_values

from hogwild.checkpoint import load_checkpoint


def a3c_node(tmp_path: Path, *extra: str) -> list[str]:
    """The arguments of one A3C node, one worker, no evaluator, logging under ``tmp_path``."""
    return [
        "-m", "a3c.train", "--workers", "1", "--eval-interval", "0", "--logdir", str(tmp_path),
        *extra,
    ]  # fmt: skip


def test_node_sync_averages_and_ends_identical(tmp_path):
    port = free_port()
    procs = [
        torchrun(port, str(TESTS / "dist_node.py"), str(tmp_path), "5", str(i)) for i in range(2)
    ]
    for code, _, err in finish(procs, 90):
        assert code == 0, err
    a, b = (torch.load(tmp_path / f"node{r}.pt", weights_only=True) for r in (0, 1))
    assert torch.equal(a["broadcast"], b["broadcast"]), "all nodes start from rank 0's model"
    assert torch.equal(a["final"], b["final"]), "after the final round the models are identical"
    assert not torch.equal(a["final"], a["broadcast"]), "the workers' updates were kept"
    assert a["rounds"] == b["rounds"] == 6


@pytest.mark.slow
def test_a3c_two_nodes_learn_one_run(tmp_path):
    port = free_port()
    args = a3c_node(
        tmp_path, "--total-steps", "100000", "--target-return", "1e9", "--sync-every", "1",
        "--log-interval", "0.1",
    )  # fmt: skip
    procs = [torchrun(port, *args) for _ in range(2)]
    results = finish(procs, 240)
    for code, _, err in results:
        assert code == 0, err
    runs = list(tmp_path.iterdir())
    assert len(runs) == 1, "rank 0 alone writes the run folder"
    ckpt = load_checkpoint(runs[0] / "checkpoint.pt")
    assert ckpt["env_steps"] >= 100_000, "step counts are summed over the nodes"
    returns = scalar_values(runs[0])["charts/episodic_return"]
    assert returns[0] < 100 and max(returns) > 150, returns  # random: ~22


def test_a_dead_node_makes_the_other_exit(tmp_path):
    port = free_port()
    # No target return: CartPole is solved in seconds, which would end both nodes first.
    args = a3c_node(
        tmp_path, "--total-steps", "100000000", "--target-return", "1e9", "--sync-every", "0.5",
        "--dist-timeout", "20",
    )  # fmt: skip
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
