"""BufferPool versus sending a fresh tensor through a queue, one producer to one consumer.

The producer is a child process, the consumer the parent (as in training: workers send
rollout telemetry, the main process offers parameter snapshots to the evaluator). Each
message is one float32 tensor, filled with the message number by the producer and copied
out and checked by the consumer, so every method does the same work per message:

* ``pool``: :class:`hogwild.pool.BufferPool`, 4 preallocated shared slots; only slot
  indices travel (``Producer.message`` / ``BufferPool.take`` + ``release``).
* ``queue``: ``torch.multiprocessing`` ``Queue(maxsize=4)``; each message a fresh tensor
  (``put`` moves it to shared memory and passes a file descriptor).
* ``simplequeue``: the same through ``torch.multiprocessing`` ``SimpleQueue``.

Rounds alternate between methods (A B C A B C ...) so that drifting load on a shared
machine hits all of them alike; each figure is the median over rounds.

    python benchmarks/pool_vs_queue.py [--messages 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hogwild.pool import BufferPool  # noqa: E402

PAYLOADS = {"rollout 5 KB": 1280, "snapshot 100 KB": 25_600}  # float32 elements
METHODS = ("pool", "queue", "simplequeue")
SLOTS = 4


def _produce(method: str, channel, numel: int, count: int, conn) -> None:
    torch.set_num_threads(1)
    conn.send("ready")
    conn.recv()  # "go"
    if method == "pool":
        for i in range(count):
            with channel.message(timeout=60) as msg:
                msg["x"].fill_(i)
    else:
        for i in range(count):
            channel.put(torch.empty(numel).fill_(i))
    conn.recv()  # the consumer is done: only now may the sent tensors' owner exit


def run_round(method: str, numel: int, count: int) -> float:
    """Seconds from "go" until the consumer has copied out and checked every message."""
    ctx = mp.get_context("fork")
    local = torch.empty(numel)
    if method == "pool":
        pool = BufferPool({"x": ((numel,), torch.float32)}, producers=1, slots=SLOTS, ctx=ctx)
        channel = pool.producer(0)
    elif method == "queue":
        channel = ctx.Queue(maxsize=SLOTS)
    else:
        channel = ctx.SimpleQueue()
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_produce, args=(method, channel, numel, count, child), daemon=True)
    proc.start()
    try:
        if not parent.poll(60):
            raise TimeoutError("producer did not start")
        parent.recv()
        t0 = time.perf_counter()
        parent.send("go")
        for i in range(count):
            if method == "pool":
                slot = pool.take(0, timeout=60)
                if slot is None:
                    raise TimeoutError(f"message {i} did not arrive")
                local.copy_(pool.view(slot)["x"])
                pool.release(slot)
            else:
                local.copy_(channel.get(timeout=60) if method == "queue" else channel.get())
            if local[0] != i or local[-1] != i:
                raise AssertionError(f"{method}: message {i} arrived as {local[0]}")
        elapsed = time.perf_counter() - t0
        parent.send("done")
        proc.join(30)
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join(5)
    if method == "pool":
        pool.close()
    else:
        channel.close()
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000, help="messages per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per method and payload")
    args = parser.parse_args()
    torch.set_num_threads(1)

    print("command:", " ".join([Path(sys.executable).name, *sys.argv]))
    print(
        f"nproc: {os.cpu_count()} (usable {len(os.sched_getaffinity(0))}); "
        f"torch {torch.__version__}; python {platform.python_version()}; "
        f"sharing strategy {mp.get_sharing_strategy()}"
    )
    print(f"load before: {_uptime()}")
    print(f"{args.messages} messages per round, {args.rounds} rounds, methods alternating\n")

    results: dict[tuple[str, str], list[float]] = {}
    for payload, numel in PAYLOADS.items():
        for method in METHODS:  # warm-up: first-touch page faults, lazy imports
            run_round(method, numel, 200)
        for _ in range(args.rounds):
            for method in METHODS:
                us = run_round(method, numel, args.messages) / args.messages * 1e6
                results.setdefault((payload, method), []).append(us)

    print(f"{'payload':<16} {'method':<12} {'us/message':>11} {'messages/s':>11}  rounds (us)")
    for payload in PAYLOADS:
        pool_us = statistics.median(results[(payload, "pool")])
        for method in METHODS:
            runs = results[(payload, method)]
            us = statistics.median(runs)
            ratio = "" if method == "pool" else f"  pool is {us / pool_us:.1f}x faster"
            print(
                f"{payload:<16} {method:<12} {us:>11.1f} {1e6 / us:>11,.0f}  "
                f"{' '.join(f'{r:.0f}' for r in runs)}{ratio}"
            )
    print(f"\nload after: {_uptime()}")
    return 0


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        one, five, fifteen = os.getloadavg()
        return f"load average: {one:.2f}, {five:.2f}, {fifteen:.2f}"


if __name__ == "__main__":
    sys.exit(main())
