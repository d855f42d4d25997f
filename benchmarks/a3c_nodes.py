"""A3C on one node with 2 workers vs 2 simulated nodes (torchrun, loopback) with 1 each.

    python benchmarks/a3c_nodes.py [--rounds 2] [--seeds 1 2 3]

Both set-ups use the same 2 cores and the same total number of workers; the difference
is the parameter averaging between nodes (every --sync-every seconds) against one shared
model. Runs alternate (A B A B); throughput runs last --seconds each.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile

import torch

SUMMARY = re.compile(r"(\d+) env steps in ([\d.]+) s \(([\d,]+) steps/s\)")
SOLVED = re.compile(r"solved after ([\d.]+) s / (\d+) steps")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(nodes: int, args: list[str]) -> str:
    with tempfile.TemporaryDirectory() as logdir:
        train = ["-m", "a3c.train", "--logdir", logdir, "--eval-interval", "0", *args]
        if nodes == 1:
            procs = [
                subprocess.Popen(
                    [sys.executable, *train, "--workers", "2"], stderr=subprocess.PIPE, text=True
                )
            ]
        else:
            port = free_port()
            launch = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                str(nodes),
                "--nproc-per-node",
                "1",
                "--rdzv-backend",
                "c10d",
                "--rdzv-endpoint",
                f"127.0.0.1:{port}",
                "--max-restarts",
                "0",
            ]
            procs = [
                subprocess.Popen(
                    [*launch, *train, "--workers", "1"], stderr=subprocess.PIPE, text=True
                )
                for _ in range(nodes)
            ]
        outputs = [p.communicate(timeout=900)[1] for p in procs]
    return "\n".join(outputs)


def throughput(nodes: int, seconds: float) -> float:
    out = run(nodes, ["--time-limit", str(seconds), "--target-return", "1e12"])
    return float(SUMMARY.search(out).group(3).replace(",", ""))


def solve(nodes: int, seed: int, limit: float) -> tuple[float, int] | None:
    out = run(nodes, ["--time-limit", str(limit), "--seed", str(seed)])
    m = SOLVED.search(out)
    return (float(m.group(1)), int(m.group(2))) if m else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--limit", type=float, default=120.0)
    args = p.parse_args()
    print(f"command: {' '.join([os.path.basename(sys.executable), *sys.argv])}")
    print(
        f"machine: nproc={os.cpu_count()}, torch {torch.__version__}, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    rates: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(args.rounds):
        for nodes in (1, 2):
            rates[nodes].append(throughput(nodes, args.seconds))
    a, b = statistics.median(rates[1]), statistics.median(rates[2])
    print(
        f"env steps/s: 1 node x 2 workers {a:,.0f}, 2 nodes x 1 worker {b:,.0f}, "
        f"ratio {b / a:.2f}  (runs {rates[1]} vs {rates[2]})",
        flush=True,
    )
    for nodes in (1, 2):
        results = [solve(nodes, seed, args.limit) for seed in args.seeds]
        times = [r[0] if r else float("inf") for r in results]
        steps = [r[1] for r in results if r]
        print(
            f"{nodes} node(s): solved {len(steps)}/{len(results)}, median "
            f"{statistics.median(times):.1f} s, median "
            f"{statistics.median(steps) if steps else float('nan'):,.0f} env steps  "
            f"(runs {results})",
            flush=True,
        )
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
