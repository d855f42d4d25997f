"""hogwild.pool: many producer processes, one consumer, fixed shared buffers, no leaks."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from multiprocessing.connection import wait

import pytest
import torch
from engine_helpers import (
    check_message,
    fd_count,
    pool_layout,
    produce,
    returns_within,
    shm_entries,
    take_and_hold,
    wait_for,
)
from proc_helpers import child_pids

from hogwild.pool import BufferPool, PoolTimeout, get_with_timeout

pytestmark = pytest.mark.usefixtures("hang_guard")

CTX = mp.get_context("fork")


def _start(pool: BufferPool, index: int, count: int, generation: int = 0, out=None):
    proc = CTX.Process(
        target=produce, args=(pool.producer(index), index, count, generation, out), daemon=True
    )
    proc.start()
    return proc


def _reap(procs) -> None:
    for p in procs:
        if p.is_alive():
            p.kill()
        p.join(5)


def test_many_producers_lose_nothing_duplicate_nothing_allocate_nothing():
    producers, per_producer, slots = 4, 5_000, 4  # each slot is reused 5,000 times
    total = producers * per_producer
    pool = BufferPool(pool_layout(), producers=producers, slots=slots, ctx=CTX)
    buffers_before = {k: v.data_ptr() for k, v in pool.buffers.items()}
    out = CTX.SimpleQueue()
    shm_before = shm_entries()
    procs = [_start(pool, i, per_producer, out=out) for i in range(producers)]
    expected = [0] * producers
    fds_early = None
    received = 0
    deadline = time.monotonic() + 60
    try:
        while received < total:
            assert time.monotonic() < deadline, f"only {received} of {total} messages arrived"
            # As a trainer's main loop does: wait on every producer, drain the ready ones.
            ready = wait(pool.readers(), timeout=10)
            assert ready, f"no message for 10 s after {received} of {total}"
            for reader in ready:
                while (slot := pool.take(pool.owner(reader), 0)) is not None:
                    index, seq, _ = check_message(pool.view(slot), slots, slot)
                    assert seq == expected[index], (
                        f"producer {index}: got seq {seq}, not {expected[index]}"
                    )
                    expected[index] += 1
                    pool.release(slot)
                    received += 1
            if fds_early is None and received >= 2_000:
                fds_early = fd_count()
        fds_late = fd_count()
        for p in procs:
            p.join(20)
            assert p.exitcode == 0, f"producer exited with {p.exitcode}"
        reports = sorted(out.get() for _ in range(producers))
    finally:
        _reap(procs)
    assert expected == [per_producer] * producers
    assert pool.receive(timeout=0.05) is None, "a message too many"
    # Nothing allocated per message: the same buffers, no new descriptors or shm files.
    assert {k: v.data_ptr() for k, v in pool.buffers.items()} == buffers_before
    assert fds_late - fds_early <= 2, f"consumer fds grew from {fds_early} to {fds_late}"
    for index, early, late in reports:
        assert late - early <= 2, f"producer {index} fds grew from {early} to {late}"
    ours = {str(os.getpid()), *(str(p.pid) for p in procs)}
    new_shm = [e for e in shm_entries() - shm_before if any(pid in e for pid in ours)]
    assert len(new_shm) <= 2, new_shm
    pool.close()


def test_get_with_timeout_times_out_on_an_empty_queue():
    q = CTX.SimpleQueue()
    for timeout in (0.0, 0.3):
        t0 = time.monotonic()
        with pytest.raises(PoolTimeout):
            get_with_timeout(q, timeout)
        elapsed = time.monotonic() - t0
        # It waited the timeout; the upper bound only rules out waiting for ever (generous
        # for a busy machine).
        assert timeout - 0.01 <= elapsed < timeout + 10, (timeout, elapsed)
    q.put(("x", 1))
    assert get_with_timeout(q, 0.5) == ("x", 1)
    q.close()


def test_get_without_timeout_waits_for_a_reader_holding_the_lock():
    """``timeout=None`` blocks, also while another reader holds the queue's read lock."""
    q = CTX.SimpleQueue()
    q._rlock.acquire()  # as if another consumer were inside get()
    got: list[object] = []

    def reader():
        try:
            got.append(get_with_timeout(q, None))
        except BaseException as e:  # noqa: BLE001 - reported below
            got.append(e)

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    time.sleep(0.2)
    assert not got, f"get_with_timeout(None) returned at once: {got}"
    q.put(42)
    q._rlock.release()
    t.join(5)
    assert got == [42]
    q.close()


def test_acquire_times_out_and_try_message_yields_none_when_all_slots_are_taken():
    pool = BufferPool({"x": ((3,), torch.float32)}, producers=2, slots=2, ctx=CTX)
    prod = pool.producer(1)
    held = [prod.acquire(0), prod.acquire(0)]
    assert sorted(held) == [2, 3]  # producer 1 owns slots 2 and 3
    t0 = time.monotonic()
    with pytest.raises(PoolTimeout):
        prod.acquire(timeout=0.2)
    assert 0.19 <= time.monotonic() - t0 < 10  # it waited; the bound only rules out for ever

    def try_one():
        with prod.try_message() as msg:
            return msg

    # Every slot is held by this test, so a blocking try_message would wait for ever.
    assert returns_within(try_one, 10) == (True, None), "try_message blocked"
    assert pool.take(1, 0) is None, "try_message sent something"
    # Producer 0's slots are its own: unaffected.
    with pool.producer(0).try_message() as msg:
        assert msg is not None
        msg["x"].fill_(1.0)
    assert pool.take(0, 1.0) in (0, 1)

    prod.submit(held[0])
    slot = pool.take(1, 1.0)
    assert slot == held[0]
    pool.release(slot)
    with prod.try_message() as msg:
        assert msg is not None
        msg["x"].fill_(7.0)
    slot = pool.take(1, 1.0)
    assert slot == held[0] and pool.view(slot)["x"].tolist() == [7.0] * 3
    pool.close()


def test_a_failing_message_block_gives_its_slot_back():
    pool = BufferPool({"x": ((2,), torch.float32)}, producers=1, slots=1, ctx=CTX)
    prod = pool.producer(0)
    for _ in range(3):  # with one slot, a leak would make the second round time out
        with pytest.raises(RuntimeError, match="fill failed"), prod.message(timeout=1.0):
            raise RuntimeError("fill failed")
    assert pool.take(0, 0) is None, "a failed message was sent"
    with prod.message(timeout=1.0) as msg:
        msg["x"].fill_(3.0)
    assert pool.view(pool.take(0, 1.0))["x"].tolist() == [3.0, 3.0]
    pool.close()


def test_reset_producer_after_kill_minus_9_mid_run():
    slots = 3
    pool = BufferPool(pool_layout(), producers=2, slots=slots, ctx=CTX)
    victim = _start(pool, 0, 10**9)  # would run for ever
    steady = _start(pool, 1, 4_000)
    procs = [victim, steady]
    expected = {(0, 0): 0, (1, 0): 0}
    fds_before = fd_count()
    children_before = child_pids()

    def consume(slot: int) -> None:
        index, seq, gen = check_message(pool.view(slot), slots, slot)
        key = (index, gen)
        assert seq == expected.get(key, 0), f"producer {key}: seq {seq}, wanted {expected[key]}"
        expected[key] = seq + 1

    try:
        deadline = time.monotonic() + 40
        while expected[(0, 0)] < 500:
            assert time.monotonic() < deadline, f"victim sent only {expected[(0, 0)]}"
            slot = pool.receive(timeout=10)
            assert slot is not None
            consume(slot)
            pool.release(slot)
        os.kill(victim.pid, signal.SIGKILL)  # mid-run: it is busy filling and submitting
        victim.join(5)
        assert victim.exitcode == -signal.SIGKILL
        pending = pool.reset_producer(0)
        assert len(pending) <= slots
        for slot in pending:  # sent before the kill: still readable, in order
            consume(slot)
            pool.release(slot)  # not needed after a reset, and harmless
        sent_by_victim = expected[(0, 0)]
        # A new incarnation of producer 0 gets fresh, working slots.
        reborn = _start(pool, 0, 2_000, generation=1)
        procs.append(reborn)
        while expected.get((0, 1), 0) < 2_000 or expected[(1, 0)] < 4_000:
            assert time.monotonic() < deadline, f"stuck at {expected}"
            slot = pool.receive(timeout=10)
            assert slot is not None, f"no message for 10 s at {expected}"
            consume(slot)
            pool.release(slot)
        for p in (reborn, steady):
            p.join(10)
            assert p.exitcode == 0
    finally:
        _reap(procs)
    assert expected[(0, 0)] == sent_by_victim  # nothing more from the dead one
    assert pool.receive(timeout=0.05) is None
    # Each reset replaces one pair of queues: no descriptors pile up.
    assert fd_count() - fds_before <= 4
    assert child_pids() <= children_before
    pool.close()


@pytest.mark.parametrize("release_pending", [False, True], ids=["read-only", "released"])
def test_reset_producer_frees_each_slot_exactly_once(release_pending):
    """Pending slots are readable and free again; a release of one (or of a slot taken
    before the reset) must not put it on the free list a second time."""
    pool = BufferPool({"x": ((1,), torch.int64)}, producers=2, slots=4, ctx=CTX)
    prod = pool.producer(1)
    for value in (10, 11, 12):
        with prod.message(timeout=1) as msg:
            msg["x"].fill_(value)
    held = pool.take(1, 1.0)  # the consumer is still reading this one
    pending = pool.reset_producer(1)
    assert [int(pool.view(s)["x"]) for s in pending] == [11, 12]
    if release_pending:
        for slot in pending:
            pool.release(slot)
    pool.release(held)
    prod = pool.producer(1)
    free = []
    with pytest.raises(PoolTimeout):
        while True:
            free.append(prod.acquire(0))
    assert sorted(free) == [4, 5, 6, 7]
    # After the reset, the slots cycle normally again: take, release, acquire.
    for slot in free:
        prod.submit(slot)
    for _ in free:
        pool.release(pool.take(1, 1.0))
    assert sorted(prod.acquire(0) for _ in free) == [4, 5, 6, 7]
    with pytest.raises(PoolTimeout):
        prod.acquire(0)
    # Producer 0 never noticed any of this.
    assert sorted(pool.producer(0).acquire(0) for _ in range(4)) == [0, 1, 2, 3]
    pool.close()


def _drain_free(prod) -> list[int]:
    free = []
    with pytest.raises(PoolTimeout):
        while True:
            free.append(prod.acquire(0))
    return sorted(free)


def test_reset_producer_keeps_a_slot_being_read_out_until_it_is_released():
    """A slot the consumer still reads is not handed to the successor: it could overwrite
    it, and taking it again before the old release would free it twice."""
    pool = BufferPool({"x": ((1,), torch.int64)}, producers=1, slots=3, ctx=CTX)
    prod = pool.producer(0)
    for value in (10, 11, 12):
        with prod.message(timeout=1) as msg:
            msg["x"].fill_(value)
    held = pool.take(0, 1.0)
    pending = pool.reset_producer(0)
    assert [int(pool.view(s)["x"]) for s in pending] == [11, 12]
    prod = pool.producer(0)
    free = _drain_free(prod)
    assert free == sorted(pending), "the slot being read was handed out"
    for slot in free:  # the successor sends on every slot it has
        prod.view(slot)["x"].fill_(20 + slot)
        prod.submit(slot)
    assert int(pool.view(held)["x"]) == 10, "overwritten while being read"
    pool.release(held)
    pool.release(held)  # a second release frees nothing
    for _ in free:
        pool.release(pool.take(0, 1.0))
    assert _drain_free(prod) == [0, 1, 2]
    pool.close()


def test_reset_producer_after_its_consumer_dies_frees_every_slot():
    """The evaluator's case: this process produces, a child consumes and is killed -9
    holding one slot, with the others pending. After the reset all of them are free."""
    slots = 3
    pool = BufferPool({"x": ((1,), torch.int64)}, producers=1, slots=slots, ctx=CTX)
    prod = pool.producer(0)
    took = CTX.RawValue("q", -2)
    child = CTX.Process(target=take_and_hold, args=(pool, took), daemon=True)
    child.start()
    try:
        with prod.message(timeout=1) as msg:
            msg["x"].fill_(1)
        assert wait_for(lambda: took.value != -2, 30), "the consumer took nothing"
        held = took.value
        for value in range(2, slots + 1):  # the rest stay pending
            with prod.message(timeout=1) as msg:
                msg["x"].fill_(value)
        with pytest.raises(PoolTimeout):
            prod.acquire(0)
        os.kill(child.pid, signal.SIGKILL)
        child.join(5)
    finally:
        _reap([child])
    pending = pool.reset_producer(0)
    assert held not in pending and sorted([held, *pending]) == list(range(slots))
    prod = pool.producer(0)
    free = _drain_free(prod)
    assert free == list(range(slots)), "none lost, none doubled"
    for slot in free:
        prod.give_back(slot)
    for _ in range(2 * slots):  # and the slots cycle as before
        with prod.message(timeout=1) as msg:
            msg["x"].fill_(7)
        slot = pool.take(0, 1.0)
        assert int(pool.view(slot)["x"]) == 7
        pool.release(slot)
    assert _drain_free(prod) == list(range(slots))
    pool.close()


def test_receive_serves_waiting_producers_in_turn():
    """A consumer slower than its producers serves each in turn, never the first alone
    (a decoupled learner starved one actor into a lag of 1,000 updates)."""
    pool = BufferPool({"x": ((1,), torch.int64)}, producers=3, slots=3)
    try:
        for p in (0, 1, 2):
            producer = pool.producer(p)
            for _ in range(3):
                producer.submit(producer.acquire(timeout=1))
        order = []
        for _ in range(9):
            slot = pool.receive(timeout=1)
            assert slot is not None
            order.append(slot // pool.slots)
            pool.release(slot)
        assert order == [0, 1, 2] * 3
    finally:
        pool.close()
