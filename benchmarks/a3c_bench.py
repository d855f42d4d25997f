"""A3C benchmark: throughput scaling and time to solve CartPole-v1, in one run.

    python benchmarks/a3c_bench.py                 # everything (~3-4 min on 2 cores)
    python benchmarks/a3c_bench.py --only solve --seeds 1 2 3

Protocol (shared/BENCHMARKS.md): things compared are run alternately (A B A B) in one
run and reported as ratios; "solved" is the first moment the mean return of the last 100
training episodes, all workers together, reaches 475, timed from the start of training.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from dataclasses import replace

import torch

from a3c.run.config import NO_STEP_BUDGET, A3CConfig
from a3c.run.record import A3CResult
from a3c.run.trainer import train


def run(cfg: A3CConfig) -> A3CResult:
    """``train(cfg)``; a run ended by Ctrl-C, SIGTERM or a failure ends the benchmark too
    (``train`` turns a signal into a clean end, so the loop would go on to the next run)."""
    r = train(cfg)
    if r.exit_code:
        print(f"a run ended with exit code {r.exit_code}; the benchmark stops", file=sys.stderr)
        sys.exit(r.exit_code)
    return r


def steps_per_second(cfg: A3CConfig, seconds: float) -> float:
    r = run(replace(cfg, time_limit=seconds, total_steps=NO_STEP_BUDGET, target_return=1e12))
    return r.env_steps / r.wall_time


def scaling(base: A3CConfig, label: str, a: dict, b: dict, seconds: float, rounds: int) -> None:
    fig_a, fig_b = [], []
    for _ in range(rounds):
        fig_a.append(steps_per_second(replace(base, **a), seconds))
        fig_b.append(steps_per_second(replace(base, **b), seconds))
    ma, mb = statistics.median(fig_a), statistics.median(fig_b)
    print(
        f"{label}: {a} {ma:,.0f} steps/s  vs  {b} {mb:,.0f} steps/s  ->  ratio {mb / ma:.2f}"
        f"  (runs: {[round(x) for x in fig_a]} vs {[round(x) for x in fig_b]})",
        flush=True,
    )


def solve(base: A3CConfig, seeds: list[int], limit: float) -> None:
    times, steps = [], []
    for seed in seeds:
        r = run(
            replace(base, seed=seed, time_limit=limit, target_return=475.0, target_metric="train")
        )
        if r.solved_at is None:
            print(
                f"  seed {seed}: not solved in {limit:.0f} s "
                f"(100-episode mean {r.mean_return_100:.1f})",
                flush=True,
            )
            times.append(float("inf"))
            continue
        t, s = r.solved_at.seconds, r.solved_at.env_steps
        times.append(t)
        steps.append(s)
        print(f"  seed {seed}: solved after {t:.1f} s, {s:,} env steps", flush=True)
    solved = [t for t in times if t != float("inf")]
    print(
        f"solve CartPole-v1 ({len(solved)}/{len(seeds)} seeds): median "
        f"{statistics.median(times):.1f} s (range {min(times):.1f}-{max(times):.1f} s), "
        f"median {statistics.median(steps) if steps else float('nan'):,.0f} env steps",
        flush=True,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=("workers", "envs", "solve"), nargs="*")
    p.add_argument("--seconds", type=float, default=8.0, help="length of each throughput run")
    p.add_argument("--rounds", type=int, default=2, help="A B rounds per comparison")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--workers", type=int, default=None, help="workers for the solve runs")
    p.add_argument("--limit", type=float, default=300.0, help="give up solving after seconds")
    args = p.parse_args()
    only = set(args.only or ("workers", "envs", "solve"))
    print(f"command: {' '.join([os.path.basename(sys.executable), *sys.argv])}")
    print(
        f"machine: nproc={os.cpu_count()}, torch {torch.__version__}, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    with tempfile.TemporaryDirectory() as logdir:
        base = A3CConfig(logdir=logdir, eval_interval=0)
        if "workers" in only:
            scaling(base, "workers", {"workers": 1}, {"workers": 2}, args.seconds, args.rounds)
        if "envs" in only:
            scaling(
                replace(base, workers=2),
                "envs per worker",
                {"envs_per_worker": 1},
                {"envs_per_worker": 8},
                args.seconds,
                args.rounds,
            )
        if "solve" in only:
            cfg = base if args.workers is None else replace(base, workers=args.workers)
            print(f"solve runs: defaults, {cfg.workers} workers, evaluator on", flush=True)
            solve(replace(cfg, eval_interval=A3CConfig.eval_interval), args.seeds, args.limit)
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
