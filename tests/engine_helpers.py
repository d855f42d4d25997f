"""Helpers for the engine tests: hang guard, fd/process accounting, and process targets.

Everything a child process runs lives here, at module level, so that a ``spawn``ed child
(the evaluator) or a ``python -c`` subprocess can import it by name.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import wait
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from proc_helpers import (
    child_pids,  # noqa: F401 (test_engine_misc imports it from here)
    tree_cpu_ticks,
    wait_until,
)
from torch import nn

if TYPE_CHECKING:
    from hogwild.evaluator import Evaluator

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

# -- accounting -------------------------------------------------------------------------


def fd_count() -> int:
    """Open file descriptors of this process."""
    return len(os.listdir("/proc/self/fd"))


def shm_entries() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def wait_for(predicate: Callable[[], bool], timeout: float, interval: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def collect_scores(ev: Evaluator, until: Callable[[list], bool], what: str) -> list:
    """Run a trainer's evaluator part until ``until(scores)``. It fails once neither a
    score nor the evaluator's CPU time moved for a while: its spawned process imports torch
    first, which a busy machine makes slow."""
    scores: list = []

    def done() -> bool:
        if not until(scores):
            scores.extend(ev.collect(wait(ev.waitables(), timeout=0.5)))
        return until(scores)

    def progress() -> tuple[int, int, int]:
        pid = ev.group.slots[0].process.pid
        return len(scores), pid, tree_cpu_ticks(pid)

    wait_until(
        done, what=lambda: f"{what} (scores so far: {scores})", progress=progress, interval=0
    )
    return scores


def returns_within(call: Callable[[], object], timeout: float) -> tuple[bool, object]:
    """``(True, call())`` as soon as it returns, or ``(False, None)`` if it still runs
    after ``timeout`` s (in a daemon thread, which a call that blocks for ever leaves).
    For "does not block": no wall-clock bound to trip on a busy machine, yet a blocked
    call fails the test in ``timeout`` s instead of hanging it."""
    outcome: list[tuple[bool, object]] = []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as e:  # noqa: BLE001 - raised again below, in the test
            outcome.append((False, e))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    if not outcome:
        return False, None
    returned, value = outcome[0]
    if not returned:
        raise value  # type: ignore[misc]
    return True, value


def subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), str(TESTS), *filter(None, [env.get("PYTHONPATH")])]
    )
    return env


def read_line(proc: subprocess.Popen, timeout: float) -> str:
    """The next line ``proc`` writes to stdout, or ``TimeoutError`` (never hangs)."""
    import select

    deadline = time.monotonic() + timeout
    buf = b""
    fd = proc.stdout.fileno()
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise TimeoutError(f"no line from pid {proc.pid} in {timeout} s (got {buf!r})")
        chunk = os.read(fd, 1)
        if not chunk:
            raise EOFError(f"pid {proc.pid} closed stdout (got {buf!r})")
        buf += chunk
    return buf.decode().strip()


# -- BufferPool producers ---------------------------------------------------------------

PAYLOAD = 256  # int64 elements: 2 KB per message


def pool_layout() -> dict:
    return {
        "header": ((4,), torch.int64),  # producer, seq, checksum, generation
        "payload": ((PAYLOAD,), torch.int64),
    }


def message_base(index: int, seq: int, generation: int) -> int:
    return (generation * 16 + index) * 10_000_000 + seq


def message_checksum(base: int) -> int:
    return PAYLOAD * base + PAYLOAD * (PAYLOAD - 1) // 2


def produce(producer, index: int, count: int, generation: int, out) -> None:
    """Send ``count`` messages ``(index, seq)``; report this process's fd counts on ``out``."""
    torch.set_num_threads(1)
    ramp = np.arange(PAYLOAD, dtype=np.int64)
    fds_early = None
    for seq in range(count):
        base = message_base(index, seq, generation)
        with producer.message(timeout=30) as msg:
            # numpy views of the shared slot: the cheapest way to fill it in place.
            np.add(ramp, base, out=msg["payload"].numpy())
            msg["header"].numpy()[:] = (index, seq, message_checksum(base), generation)
        if seq == min(100, count - 1):
            fds_early = fd_count()
    if out is not None:
        out.put((index, fds_early, fd_count()))


def check_message(view: dict[str, torch.Tensor], slots: int, slot: int) -> tuple[int, int, int]:
    """Validate one received message; return ``(producer, seq, generation)``."""
    index, seq, checksum, generation = view["header"].tolist()
    assert slot // slots == index, f"slot {slot} carries producer {index}'s message"
    base = message_base(index, seq, generation)
    assert checksum == message_checksum(base), f"bad checksum in {(index, seq)}"
    payload = view["payload"].numpy()
    assert payload[0] == base and payload[-1] == base + PAYLOAD - 1, (index, seq)
    assert int(payload.sum()) == checksum, f"payload of {(index, seq)} is torn"
    return index, seq, generation


def take_and_hold(pool, took) -> None:
    """A consumer that takes one slot, publishes it in ``took.value`` and never releases it.

    ``took`` is a lock-free shared value (a queue would not do: this process is killed).
    """
    slot = pool.receive(timeout=30)
    took.value = -1 if slot is None else slot
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.05)


# -- WorkerGroup targets (first argument: hogwild.procs.WorkerContext) ------------------


def report_then_maybe_raise(
    ctx, results, fail_ranks, fail_times: int = 1, seconds: float = 0.0
) -> None:
    """Report seeds and pid; ranks in ``fail_ranks`` raise in their first ``fail_times`` lives."""
    results.put(
        (ctx.rank, ctx.incarnation, ctx.seed, torch.initial_seed(), random.random(), os.getpid())
    )
    if ctx.rank in fail_ranks and ctx.incarnation < fail_times:
        raise ValueError(f"boom from rank {ctx.rank}")
    time.sleep(seconds)


def resident_bytes() -> int:
    """This process's resident set size."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def report_memory_kept(ctx, results, size: int) -> None:
    """Fill and free a ``size``-byte tensor; report the resident bytes that freeing gave
    back to the kernel. (Also a plain process target: ``ctx`` unused.)"""
    big = torch.ones(size // 4)
    with_it = resident_bytes()
    del big
    results.put(with_it - resident_bytes())


def run_for(ctx, pids, seconds: float) -> None:
    """Publish the pid, then work (sleep) for ``seconds`` and finish normally.

    ``pids`` is a lock-free shared array (``pids[4 * rank + incarnation]``): a queue would
    not do, since a worker killed right after ``put`` may still hold the queue's write lock.
    """
    pids[4 * ctx.rank + min(ctx.incarnation, 3)] = os.getpid()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.01)


def spin_on_should_stop(ctx, pids) -> None:
    """Publish the pid at ``pids[rank]``, then check the stop flag in a hot loop."""
    pids[ctx.rank] = os.getpid()
    deadline = time.monotonic() + 60
    n = 0
    while not ctx.should_stop():
        n += 1
        if n % 10_000 == 0 and time.monotonic() > deadline:
            raise TimeoutError("never told to stop")


def ignore_stop(ctx, results, ignore_sigterm: bool) -> None:
    """Never look at the stop event (and, if asked, ignore SIGTERM as well)."""
    if ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    results.put((ctx.rank, os.getpid()))
    deadline = time.monotonic() + 60  # bounded, in case stop() is broken
    while time.monotonic() < deadline:
        time.sleep(0.02)


def until_stopped(ctx, results) -> None:
    results.put((ctx.rank, os.getpid()))
    deadline = time.monotonic() + 60
    while not ctx.should_stop() and time.monotonic() < deadline:
        time.sleep(0.01)


def intermediate_parent() -> None:
    """Run as ``python -c``: start a WorkerGroup, print the worker's pid, then wait to be killed."""
    from hogwild.procs import WorkerGroup

    group = WorkerGroup(_sleep_a_minute, (), num_workers=1, seed=0, start_method="fork")
    group.start()
    print(group.slots[0].process.pid, flush=True)
    time.sleep(60)
    group.stop(1.0)


def _sleep_a_minute(ctx) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.05)


# -- evaluator model and score functions (imported by the spawned evaluator) ------------


def build_probe() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2))


def score_probe(model: nn.Module, device: torch.device, step: int) -> dict[str, float]:
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    out = model(torch.ones(1, 4, device=device))
    return {
        "param_sum": float(flat.sum()),
        "param_first": float(flat[0]),
        "output_sum": float(out.sum()),
        "pid": float(os.getpid()),
        "step": float(step),
    }


SLOW_FROM_STEP = 1000
SLOW_SCORE_S = 10.0


def score_slow_late(model: nn.Module, device: torch.device, step: int) -> dict[str, float]:
    """``score_probe``, taking ``SLOW_SCORE_S`` for steps from ``SLOW_FROM_STEP`` on (a busy
    evaluator)."""
    if step >= SLOW_FROM_STEP:
        time.sleep(SLOW_SCORE_S)
    return score_probe(model, device, step)


class ProbeWithBuffers(nn.Module):
    """A probe whose output depends on two float buffers (as observation statistics do)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(4, 2)
        self.register_buffer("shift", torch.zeros(4))
        self.register_buffer("scale", torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin((x - self.shift) * self.scale)


def build_probe_with_buffers() -> nn.Module:
    return ProbeWithBuffers()


def score_probe_buffers(model: nn.Module, device: torch.device, step: int) -> dict[str, float]:
    """``score_probe`` plus what the evaluator's copy of the buffers holds."""
    return {
        **score_probe(model, device, step),
        "shift_sum": float(model.shift.sum()),
        "scale_first": float(model.scale[0]),
    }


def send_then_maybe_die(ctx, pool, count: int, die_first_time: bool) -> None:
    """A worker for the Supervisor tests: ``count`` numbered messages; the first incarnation
    of rank 0 then dies with exit code 3 (if asked), leaving its messages in the pool."""
    producer = pool.producer(ctx.rank)
    for i in range(count):
        slot = producer.acquire(timeout=10)
        view = producer.view(slot)
        view["rank"].fill_(ctx.rank)
        view["seq"].fill_(i)
        view["incarnation"].fill_(ctx.incarnation)
        producer.submit(slot)
    if die_first_time and ctx.rank == 0 and ctx.incarnation == 0:
        os._exit(3)


def count_up(ctx, pool, count: int | None, die: bool) -> None:
    """A worker for the RunLoop tests: numbered messages until ``count`` (None: until told
    to stop); rank 0 then dies with exit code 3 if asked."""
    producer = pool.producer(ctx.rank)
    i = 0
    while (count is None or i < count) and not ctx.should_stop():
        slot = producer.acquire(timeout=10)
        view = producer.view(slot)
        view["rank"].fill_(ctx.rank)
        view["seq"].fill_(i)
        producer.submit(slot)
        i += 1
        time.sleep(0.002)
        if die and ctx.rank == 0 and i == 5:
            os._exit(3)
