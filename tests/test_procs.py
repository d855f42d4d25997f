"""hogwild.procs: supervised worker processes (real ones), failures, stop, die-with-parent."""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import re
import signal
import subprocess
import sys
import time
from multiprocessing.connection import wait

import pytest
import torch
from engine_helpers import (
    ROOT,
    ignore_stop,
    read_line,
    report_memory_kept,
    report_then_maybe_raise,
    run_for,
    spin_on_should_stop,
    subprocess_env,
    until_stopped,
    wait_for,
)
from proc_helpers import child_pids, pid_gone

from hogwild.errors import UsageError
from hogwild.heap import keep_freed_memory
from hogwild.pool import get_with_timeout
from hogwild.procs import (
    FailurePolicy,
    WorkerFailure,
    WorkerGroup,
    forked_child_can_backward,
    resolve_start_method,
)
from hogwild.shutdown import GracefulShutdown

pytestmark = pytest.mark.usefixtures("hang_guard")

CTX = mp.get_context("fork")


@pytest.fixture
def no_leftover_children():
    """Every test here must end with no child process of ours left, alive or zombie."""
    before = child_pids()
    yield
    assert mp.active_children() == []
    assert wait_for(lambda: not (child_pids() - before), 2.0), child_pids() - before


@pytest.fixture
def caplog_procs(caplog):
    caplog.set_level(logging.INFO, logger="hogwild.procs")
    return caplog


def supervise(group: WorkerGroup, timeout: float, on_ready=None, poll: float = 0.5) -> list[int]:
    """The main loop of a trainer, minus the training: wait on sentinels (at most ``poll``
    seconds), check, repeat."""
    restarted: list[int] = []
    deadline = time.monotonic() + timeout
    while not group.finished:
        assert time.monotonic() < deadline, f"group not finished after {timeout} s"
        ready = wait(group.sentinels(), timeout=poll)
        got = group.check(ready)
        restarted += got
        if on_ready is not None:
            on_ready(got)
    return restarted


def drain(queue, n: int, timeout: float = 10.0) -> list:
    return [get_with_timeout(queue, timeout) for _ in range(n)]


def error_records(caplog, text: str) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "hogwild.procs" and r.levelno >= logging.ERROR and text in r.getMessage()
    ]


@pytest.mark.usefixtures("no_leftover_children")
def test_raising_worker_is_logged_once_and_restarted_with_a_new_seed(caplog_procs):
    results = CTX.SimpleQueue()
    group = WorkerGroup(
        report_then_maybe_raise,
        (results, {1}, 1, 0.05),
        num_workers=2,
        seed=123,
        policy=FailurePolicy("restart", max_restarts=5),
    )
    group.start()
    try:
        restarted = supervise(group, timeout=30)
    finally:
        group.stop(timeout=2)
    assert restarted == [1]
    assert group.policy.restarts == 1
    reports = {(r[0], r[1]): r for r in drain(results, 3)}
    assert sorted(reports) == [(0, 0), (1, 0), (1, 1)]
    for _rank, _inc, seed, torch_seed, _rnd, _pid in reports.values():
        assert torch_seed == seed  # every RNG seeded from the worker's seed
    assert len({r[2] for r in reports.values()}) == 3, "seeds must differ by rank and incarnation"
    assert reports[(1, 1)][4] != reports[(1, 0)][4], "the restart replayed the same random stream"
    assert reports[(1, 1)][5] != reports[(1, 0)][5]
    # The traceback is logged once, with the worker and the exception.
    logged = error_records(caplog_procs, "boom from rank 1")
    assert len(logged) == 1, [r.getMessage() for r in logged]
    text = logged[0].getMessage()
    assert text.startswith(f"worker 1 (pid {reports[(1, 0)][5]}) exited with code 1")
    assert "Traceback (most recent call last)" in text and "ValueError: boom from rank 1" in text
    assert sum("restarting worker 1" in r.getMessage() for r in caplog_procs.records) == 1


@pytest.mark.usefixtures("no_leftover_children")
def test_raising_worker_with_policy_abort_raises_worker_failure(caplog_procs):
    results = CTX.SimpleQueue()
    group = WorkerGroup(
        report_then_maybe_raise,
        (results, {1}, 1, 5.0),
        num_workers=2,
        seed=0,
        policy=FailurePolicy("abort"),
    )
    group.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(WorkerFailure) as info:
            supervise(group, timeout=30)
    finally:
        group.stop(timeout=1)
    assert time.monotonic() - t0 < 10
    message = str(info.value)
    assert re.fullmatch(
        r"worker 1 \(pid \d+\) exited with code 1: ValueError: boom from rank 1; aborting", message
    ), message
    assert len(error_records(caplog_procs, "boom from rank 1")) == 1


@pytest.mark.usefixtures("no_leftover_children")
def test_restarts_are_capped_then_the_group_aborts(caplog_procs):
    results = CTX.SimpleQueue()
    group = WorkerGroup(
        report_then_maybe_raise,
        (results, {0}, 99),  # rank 0 fails in every incarnation
        num_workers=1,
        seed=0,
        policy=FailurePolicy("restart", max_restarts=2),
    )
    group.start()
    try:
        with pytest.raises(WorkerFailure, match=r"boom from rank 0; aborting after 2 restarts"):
            supervise(group, timeout=30)
    finally:
        group.stop(timeout=1)
    assert len(error_records(caplog_procs, "boom from rank 0")) == 3  # once per incarnation


def published_pids(pids, count: int, timeout: float = 10.0) -> dict[tuple[int, int], int]:
    assert wait_for(lambda: sum(p != 0 for p in pids) >= count, timeout), list(pids)
    return {(i // 4, i % 4): p for i, p in enumerate(pids) if p}


@pytest.mark.usefixtures("no_leftover_children")
def test_kill_minus_9_is_noticed_at_once_and_the_worker_restarted(caplog_procs):
    pids = CTX.Array("i", 8, lock=False)
    group = WorkerGroup(
        run_for,
        (pids, 1.5),
        num_workers=2,
        seed=0,
        policy=FailurePolicy("restart", max_restarts=3),
    )
    group.start()
    try:
        victim = published_pids(pids, 2)[(1, 0)]
        os.kill(victim, signal.SIGKILL)
        t_kill = time.monotonic()
        noticed: list[float] = []
        restarted = supervise(
            group,
            timeout=60,
            on_ready=lambda got: got and noticed.append(time.monotonic()),
            poll=30,
        )
    finally:
        group.stop(timeout=2)
    assert restarted == [1]
    # Each wait would time out only after 30 s: noticing sooner means the dead worker's
    # sentinel woke it (an event, not a poll). 15 s leaves a busy machine room.
    delay = noticed[0] - t_kill
    assert delay < 15, f"death noticed after {delay:.2f} s"
    reborn = published_pids(pids, 3)[(1, 1)]
    assert reborn != victim
    assert all(s.process.exitcode == 0 for s in group.slots)
    assert group.slots[1].process.pid == reborn and group.slots[1].incarnation == 1
    logged = error_records(caplog_procs, f"worker 1 (pid {victim}) was killed by SIGKILL")
    assert len(logged) == 1


@pytest.mark.usefixtures("no_leftover_children")
def test_kill_minus_9_with_policy_abort_raises_within_seconds(caplog_procs):
    pids = CTX.Array("i", 8, lock=False)
    group = WorkerGroup(run_for, (pids, 20.0), num_workers=2, seed=0, policy=FailurePolicy("abort"))
    group.start()
    try:
        victim = published_pids(pids, 2)[(0, 0)]
        os.kill(victim, signal.SIGKILL)
        t_kill = time.monotonic()
        with pytest.raises(WorkerFailure) as info:
            supervise(group, timeout=60, poll=30)
        # Woken by the sentinel, not by the 30 s poll, nor after the survivor's 20 s.
        assert time.monotonic() - t_kill < 15
    finally:
        group.stop(timeout=0.3)  # the survivor ignores the stop event: terminated
    assert str(info.value) == f"worker 0 (pid {victim}) was killed by SIGKILL; aborting"
    assert group.slots[1].process.exitcode == -signal.SIGTERM
    said = "worker 1 did not stop within 0.3 s of the request: terminating"
    assert [r.getMessage() for r in caplog_procs.records if r.levelname == "WARNING"] == [said]


@pytest.mark.usefixtures("no_leftover_children")
def test_kill_minus_9_while_checking_the_stop_flag_wedges_nothing():
    """Killing a worker inside ``should_stop()`` must not block the others, or ``stop()``."""
    pids = CTX.Array("i", 2, lock=False)
    group = WorkerGroup(
        spin_on_should_stop,
        (pids,),
        num_workers=2,
        seed=0,
        policy=FailurePolicy("restart", max_restarts=100),
    )
    group.start()
    try:
        last = 0
        for _ in range(15):
            assert wait_for(lambda last=last: pids[0] not in (0, last), 10), "no new worker 0"
            last = pids[0]
            os.kill(last, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while not group.check(wait(group.sentinels(), timeout=0.5)):
                assert time.monotonic() < deadline, "the kill was not noticed"
        assert wait_for(lambda: pids[0] != last, 10)
    finally:
        group.stop(timeout=30)  # generous: the exit codes below say whether it was needed
    assert [s.process.exitcode for s in group.slots] == [0, 0]  # both saw the flag
    assert group.policy.restarts == 15


@pytest.mark.usefixtures("no_leftover_children")
@pytest.mark.parametrize(
    ("target", "args", "exitcode", "timeout"),
    [
        (until_stopped, (), 0, 30.0),  # honours the stop event: needs none of the 30 s
        (ignore_stop, (False,), -signal.SIGTERM, 0.3),  # needs SIGTERM
        (ignore_stop, (True,), -signal.SIGKILL, 0.3),  # needs SIGKILL
    ],
    ids=["cooperative", "ignores-stop-event", "ignores-sigterm-too"],
)
def test_stop_ends_every_worker_within_the_timeout(target, args, exitcode, timeout):
    results = CTX.SimpleQueue()
    group = WorkerGroup(target, (results, *args), num_workers=2, seed=0)
    group.start()
    pids = [pid for _, pid in drain(results, 2)]
    t0 = time.monotonic()
    group.stop(timeout=timeout)
    elapsed = time.monotonic() - t0
    # The exit codes say which step ended the workers. Idle, stop() takes the timeout plus
    # up to 1 s per escalation; the bound only has to be far below the 60 s the workers
    # would run on their own, with room for a busy machine.
    assert elapsed < 15, f"stop took {elapsed:.2f} s"
    assert [s.process.exitcode for s in group.slots] == [exitcode, exitcode]
    assert all(pid_gone(pid) for pid in pids)
    assert group.finished and group.sentinels() == []


@pytest.mark.usefixtures("no_leftover_children")
def test_a_worker_that_returns_on_the_stop_flag_has_not_completed_its_work():
    """Both exit 0, but only the worker that finished its work counts: an MNIST epoch cut
    short by SIGTERM once counted as done (its checkpoint said epoch 1; resume skipped it)."""
    done = WorkerGroup(run_for, (CTX.Array("i", 8, lock=False), 0.0), num_workers=2, seed=0)
    done.start()
    supervise(done, timeout=30)
    assert [s.process.exitcode for s in done.slots] == [0, 0] and done.completed
    results = CTX.SimpleQueue()
    cut = WorkerGroup(until_stopped, (results,), num_workers=2, seed=0)
    cut.start()
    drain(results, 2)
    cut.stop_event.set()
    supervise(cut, timeout=30)
    assert [s.process.exitcode for s in cut.slots] == [0, 0]
    assert cut.finished and not cut.completed


@pytest.mark.usefixtures("no_leftover_children")
def test_stop_terminates_workers_forked_under_graceful_shutdown():
    """A worker must not inherit the main process's SIGTERM handler (it would only set a flag)."""
    results = CTX.SimpleQueue()
    group = WorkerGroup(ignore_stop, (results, False), num_workers=1, seed=0)
    with GracefulShutdown():
        group.start()
        drain(results, 1)
        t0 = time.monotonic()
        group.stop(timeout=0.3)
    # With the inherited handler SIGTERM would only set a flag: SIGKILL, not SIGTERM, would
    # end it. The time bound only rules out waiting the worker's own 60 s.
    assert group.slots[0].process.exitcode == -signal.SIGTERM
    assert time.monotonic() - t0 < 15


@pytest.mark.usefixtures("no_leftover_children")
def test_worker_dies_with_its_parent():
    intermediate = subprocess.Popen(
        [sys.executable, "-c", "import engine_helpers; engine_helpers.intermediate_parent()"],
        cwd=ROOT,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
    )
    worker = None
    try:
        worker = int(read_line(intermediate, timeout=30))
        assert not pid_gone(worker)
        intermediate.kill()
        intermediate.wait(10)
        assert wait_for(lambda: pid_gone(worker), 5.0), f"worker {worker} outlived its parent"
    finally:
        if intermediate.poll() is None:
            intermediate.kill()
            intermediate.wait(10)
        if worker is not None and not pid_gone(worker):
            os.kill(worker, signal.SIGKILL)
        intermediate.stdout.close()


BIG = 200 << 20  # above glibc's largest dynamic mmap threshold (32 MiB): mmapped by default


@pytest.mark.usefixtures("no_leftover_children")
def test_workers_keep_freed_memory_for_reuse_a_plain_process_does_not():
    results = CTX.SimpleQueue()
    plain = CTX.Process(target=report_memory_kept, args=(None, results, BIG))
    plain.start()
    plain.join(30)
    given_back_plain = get_with_timeout(results, 10)
    group = WorkerGroup(report_memory_kept, (results, BIG), num_workers=1, seed=0)
    group.start()
    try:
        supervise(group, timeout=30)
    finally:
        group.stop(timeout=2)
    given_back_worker = get_with_timeout(results, 10)
    assert given_back_plain > BIG // 2  # glibc's default: the pages go back at once
    assert given_back_worker < BIG // 10  # a worker keeps them for its next step


def test_a_users_own_malloc_settings_are_left_alone(monkeypatch):
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    assert keep_freed_memory() is False


def _backward_here() -> None:
    torch.ones(1, requires_grad=True).sum().backward()


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA present, see the next test")
def test_without_an_accelerator_a_backward_here_leaves_fork_usable():
    _backward_here()
    assert forked_child_can_backward()
    assert resolve_start_method("fork") == "fork"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: autograd's device threads")
def test_after_a_backward_with_a_gpu_present_workers_are_spawned(caplog):
    _backward_here()
    assert not forked_child_can_backward()  # what a forked worker's first update would meet
    with caplog.at_level(logging.WARNING, logger="hogwild.procs"):
        assert resolve_start_method("fork") == "spawn"
    assert "spawn, not fork" in caplog.text


def test_start_methods_are_checked_and_spawn_is_kept(monkeypatch):
    monkeypatch.setattr("hogwild.procs.autograd_survives_fork", lambda: False)
    assert resolve_start_method("spawn") == "spawn"
    assert resolve_start_method("fork") == "spawn"
    with pytest.raises(UsageError, match="'threads' is not available"):
        resolve_start_method("threads")


def test_torch_threads_sets_the_count_for_a_block_and_restores_it_after_a_raise():
    from hogwild.procs import torch_threads

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with pytest.raises(RuntimeError), torch_threads(1):
            assert torch.get_num_threads() == 1
            raise RuntimeError("the block failed")
        assert torch.get_num_threads() == 2
        with torch_threads():
            torch.set_num_threads(1)  # what a forking run does to its caller
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
