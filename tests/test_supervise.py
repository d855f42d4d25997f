"""The engine's Supervisor with real worker processes: every message read, failures handled."""

from __future__ import annotations

import multiprocessing as mp
import time

import pytest
import torch
from engine_helpers import send_then_maybe_die

from hogwild.pool import BufferPool
from hogwild.procs import FailurePolicy, WorkerFailure, WorkerGroup
from hogwild.supervise import Supervisor

LAYOUT = {k: ((), torch.int64) for k in ("rank", "seq", "incarnation")}


def supervised(workers: int, count: int, die: bool, policy: FailurePolicy):
    pool = BufferPool(LAYOUT, producers=workers, slots=2, ctx=mp.get_context("fork"))
    seen: list[tuple[int, int, int]] = []
    sup = Supervisor(pool, lambda v: seen.append(tuple(int(v[k]) for k in LAYOUT)))
    group = WorkerGroup(
        send_then_maybe_die,
        (pool, count, die),
        workers,
        seed=0,
        policy=policy,
        on_restart=sup.restarted,
    )
    return pool, sup, group, seen


def run_until_done(sup: Supervisor, group: WorkerGroup, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    sup.start(group)
    try:
        while not group.finished:
            assert time.monotonic() < deadline, "workers did not finish"
            sup.wait(timeout=0.1)
        sup.drain()
    finally:
        sup.stop_workers(timeout=5)


def test_every_message_of_every_worker_is_handed_to_the_app():
    pool, sup, group, seen = supervised(2, 50, die=False, policy=FailurePolicy())
    try:
        run_until_done(sup, group)
    finally:
        pool.close()
    for rank in (0, 1):
        assert [s for r, s, _ in seen if r == rank] == list(range(50))
    assert sup.group is None  # stopped


def test_a_dead_worker_is_restarted_and_its_pending_messages_are_read():
    pool, sup, group, seen = supervised(2, 5, die=True, policy=FailurePolicy("restart", 3))
    try:
        run_until_done(sup, group)
    finally:
        pool.close()
    first = [s for r, s, inc in seen if r == 0 and inc == 0]
    again = [s for r, s, inc in seen if r == 0 and inc == 1]
    assert first == list(range(5)), "what the dead worker sent is not lost"
    assert again == list(range(5)), "its successor ran"
    assert [s for r, s, _ in seen if r == 1] == list(range(5))


def test_abort_policy_raises_and_stop_leaves_no_worker():
    pool, sup, group, _ = supervised(1, 3, die=True, policy=FailurePolicy("abort"))
    try:
        with pytest.raises(WorkerFailure, match="exited with code 3; aborting"):
            run_until_done(sup, group)
        assert all(not s.process.is_alive() for s in group.slots)
    finally:
        pool.close()
