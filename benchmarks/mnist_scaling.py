"""MNIST Hogwild! benchmarks: throughput scaling 1 -> 2 workers, and time to 98% / 99%.

``throughput`` (default) runs the application's own worker function on the real data
with 1 and 2 workers, alternating (1, 2, 1, 2 ...) in one run so that a change in the
machine's load hits both alike, and measures training samples/s over a steady window
after a warm-up, from the workers' telemetry. It also times a fixed piece of CPU work in
1 and 2 processes: that ratio is the ceiling the machine allows right now (2.0 when two
cores are really free).

``accuracy`` runs ``python -m hogwild.mnist`` with default flags (2 workers) and reports
when the test accuracy first reached 98% and 99% (wall-clock from the start of training,
checked at the end of each epoch), per seed and the median.

    python benchmarks/mnist_scaling.py throughput --rounds 2
    python benchmarks/mnist_scaling.py accuracy --seeds 1 2 3
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import wait
from pathlib import Path

import torch
import torch.multiprocessing as mp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch.nn.functional as F  # noqa: E402
from torch.utils.data import TensorDataset  # noqa: E402

from hogwild.mnist import MnistConfig, build_model  # noqa: E402
from hogwild.mnist.data import MnistData, default_data_dir, load_mnist  # noqa: E402
from hogwild.pool import BufferPool  # noqa: E402
from hogwild.procs import WorkerGroup  # noqa: E402
from hogwild.sharing import SharedModel  # noqa: E402
from hogwild.supervised.optimizers import make_optimizers  # noqa: E402
from hogwild.supervised.task import Objective  # noqa: E402
from hogwild.supervised.worker import TELEMETRY, EpochPlan, train_worker  # noqa: E402


def machine() -> str:
    load = os.getloadavg()
    return (
        f"nproc {os.cpu_count()}, torch {torch.__version__}, python {platform.python_version()}, "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )


# ------------------------------------------------------------------------ throughput


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time consumed so far by these processes (Linux /proc)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime in clock ticks
    return total / os.sysconf("SC_CLK_TCK")


def measure(
    workers: int, data: MnistData, cfg: MnistConfig, warmup: float, window: float, seed: int
) -> tuple[float, float]:
    """Samples/s of ``workers`` Hogwild! workers over [warmup, warmup + window] s, and
    samples per CPU-second of those workers (which other load on the machine barely
    moves, since time a worker waits for a core is not CPU time)."""
    shared = SharedModel(build_model(cfg.model, nhwc=cfg.channels_last))
    optimizers = make_optimizers(cfg, shared, workers)
    ctx = mp.get_context("fork")
    pool = BufferPool(TELEMETRY, producers=workers, slots=8, ctx=ctx)
    plan = EpochPlan(
        epoch=0,
        shuffle_seed=seed,
        num_workers=workers,
        batch_size=cfg.batch_size,
        lr=cfg.lr,
        log_interval=5,
        passes=1000,  # never runs out within the window
    )
    train = TensorDataset(data.train_images, data.train_labels)
    group = WorkerGroup(
        train_worker,
        (shared, optimizers, pool, train, Objective(loss=F.nll_loss), plan, None),
        num_workers=workers,
        seed=seed,
        num_threads=cfg.threads_per_worker,
    )
    samples, first, last = 0, None, None
    group.start()
    pids = [s.process.pid for s in group.slots]
    start = time.monotonic()
    try:
        while time.monotonic() < start + warmup + window:
            ready = wait([*pool.readers(), *group.sentinels()], timeout=0.1)
            if group.check(ready) or group.finished:
                raise RuntimeError("a worker died during the measurement")
            now = time.monotonic()
            for p in range(workers):
                while (slot := pool.take(p, 0)) is not None:
                    n = int(pool.view(slot)["samples"])
                    pool.release(slot)
                    if now - start < warmup:
                        continue
                    if first is None:  # counting starts with the samples after this one
                        first = (now, samples, cpu_seconds(pids))
                    samples += n
                    last = (now, samples, cpu_seconds(pids))
    finally:
        group.stop(timeout=5.0, drain=lambda: [pool.take(p, 0) for p in range(workers)])
        pool.close()
    if first is None or last is None or last[0] <= first[0]:
        raise RuntimeError("no telemetry in the measuring window; lengthen --window")
    done = last[1] - first[1]
    return done / (last[0] - first[0]), done / max(last[2] - first[2], 1e-9)


def fixed_work(_: int) -> float:
    """A fixed amount of single-threaded torch compute; returns its duration."""
    torch.set_num_threads(1)
    a = torch.randn(192, 192)
    t = time.perf_counter()
    for _ in range(1500):
        a = torch.tanh(a @ a * 0.01)
    return time.perf_counter() - t


def core_check() -> float:
    """Aggregate speedup of 2 concurrent processes over 1 on a fixed job (2.0 = two free cores)."""
    ctx = mp.get_context("fork")
    with ctx.Pool(1) as p:
        one = p.map(fixed_work, [0])[0]
    with ctx.Pool(2) as p:
        two = max(p.map(fixed_work, [0, 1]))
    return 2 * one / two


def throughput(args: argparse.Namespace) -> None:
    cfg = MnistConfig(model=args.model, batch_size=args.batch_size, channels_last=args.nhwc)
    data = load_mnist(args.data_dir, download=False).share_memory_()
    torch.set_num_threads(1)
    print(f"core check before: 2-process speedup on fixed work {core_check():.2f} (ideal 2.00)")
    wall: dict[int, list[float]] = {1: [], 2: []}
    per_cpu: dict[int, list[float]] = {1: [], 2: []}
    for r in range(args.rounds):
        for k in (1, 2):
            rate, cpu_rate = measure(k, data, cfg, args.warmup, args.window, seed=r)
            wall[k].append(rate)
            per_cpu[k].append(cpu_rate)
            print(
                f"round {r + 1}: {k} worker(s): {rate:,.0f} samples/s "
                f"({cpu_rate:,.0f} samples per worker CPU-second)",
                flush=True,
            )
    print(f"core check after: 2-process speedup on fixed work {core_check():.2f} (ideal 2.00)")
    one, two = statistics.median(wall[1]), statistics.median(wall[2])
    rounds = ", ".join(f"{b / a:.2f}" for a, b in zip(wall[1], wall[2], strict=True))
    print(f"median: 1 worker {one:,.0f} samples/s, 2 workers {two:,.0f} samples/s")
    print(f"ratio 2/1 (wall clock): {two / one:.2f} (per round: {rounds})")
    # If each worker had a core to itself, 2 workers would do 2 x their per-CPU rate.
    eff = statistics.median(per_cpu[2]) / statistics.median(per_cpu[1])
    print(
        f"ratio 2/1 from CPU time (each worker on its own core): {2 * eff:.2f} "
        f"(per-CPU-second efficiency with 2 workers: {eff:.0%} of 1 worker's)"
    )
    print(machine())


# -------------------------------------------------------------------------- accuracy


def accuracy(args: argparse.Namespace) -> None:
    results = []
    with tempfile.TemporaryDirectory() as logdir:
        for seed in args.seeds:
            cmd = [
                sys.executable, "-m", "hogwild.mnist", "--seed", str(seed),
                "--epochs", str(args.epochs), "--target-accuracy", "99",
                "--data-dir", str(args.data_dir), "--logdir", logdir, *args.extra,
            ]  # fmt: skip
            print("$", shlex.join(cmd), flush=True)
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            sys.stdout.write(proc.stdout)
            if proc.returncode != 0:
                sys.stdout.write(proc.stderr)
                raise SystemExit(f"run failed with exit code {proc.returncode}")
            found = {
                float(m[1]): (float(m[2]), int(m[3].replace(",", "")))
                for m in re.finditer(
                    r"^test accuracy (\d+) first reached after ([\d.]+) s, ([\d,]+) samples",
                    proc.stdout,
                    re.M,
                )
            }
            results.append(found)
    print(machine())
    for target in (98.0, 99.0):
        times = [r[target][0] for r in results if target in r]
        per_seed = ", ".join(
            f"seed {s}: " + (f"{r[target][0]:.1f} s" if target in r else "not reached")
            for s, r in zip(args.seeds, results, strict=True)
        )
        median = f"median {statistics.median(times):.1f} s" if times else "never reached"
        print(f"time to {target:g}%: {median} ({per_seed})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="mode")
    t = sub.add_parser("throughput", help="samples/s with 1 and 2 workers, alternating")
    t.add_argument("--rounds", type=int, default=2, help="(1, 2) pairs to run (default 2)")
    t.add_argument("--warmup", type=float, default=2.0, help="seconds ignored at the start")
    t.add_argument("--window", type=float, default=6.0, help="seconds measured")
    t.add_argument("--model", default="convnet")
    t.add_argument("--batch-size", type=int, default=64)
    t.add_argument("--no-channels-last", dest="nhwc", action="store_false")
    a = sub.add_parser("accuracy", help="time to 98%% and 99%% test accuracy, default flags")
    a.add_argument("--seeds", type=int, nargs="+", default=[1])
    a.add_argument("--epochs", type=int, default=10, help="give up after this many epochs")
    a.add_argument("extra", nargs="*", help="more hogwild-mnist flags, after --")
    for s in (t, a):
        s.add_argument("--data-dir", type=Path, default=_data_dir())
    argv = sys.argv[1:]
    if not argv or argv[0] not in ("throughput", "accuracy", "-h", "--help"):
        argv = ["throughput", *argv]
    args = p.parse_args(argv)
    print("$", shlex.join([sys.executable, *sys.argv]))
    print(machine(), flush=True)
    if args.mode == "accuracy":
        accuracy(args)
    else:
        throughput(args)


def _data_dir() -> Path:
    shared = ROOT.parent / "shared" / "data" / "mnist"
    return shared if shared.is_dir() and "HOGWILD_DATA" not in os.environ else default_data_dir()


if __name__ == "__main__":
    main()
