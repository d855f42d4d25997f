"""Hogwild! against its synchronous baseline (``--mode ddp``) on MNIST, side by side.

Runs ``python -m hogwild.mnist`` in both modes with the same flags (same model, data,
batch size per worker/rank, learning rate, seed), alternating hogwild, ddp, hogwild,
ddp ... so that a change in the machine's load hits both alike, each until
``--target`` % test accuracy (or ``--epochs``). For each run it reports:

* training samples/s: samples over training wall time, per epoch (from TensorBoard's
  ``perf/samples_per_sec``), median over the epochs;
* time to the target: seconds of training (from each mode's own clock, which starts
  once its processes are up) until the first epoch-end test at or above the target,
  and the samples seen by then. Both modes test only at epoch ends, so this time is
  that of the first epoch end past the target;
* the command's whole wall time, start-up (process spawn, imports) included.

and then the medians and the ratios hogwild / ddp.

    python benchmarks/mnist_ddp_vs_hogwild.py --rounds 2
    python benchmarks/mnist_ddp_vs_hogwild.py --workers 2 -- --lr 0.1
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

ROOT = Path(__file__).resolve().parents[1]
MODES = ("hogwild", "ddp")


def machine() -> str:
    load = os.getloadavg()
    return (
        f"nproc {os.cpu_count()}, torch {torch.__version__}, python {platform.python_version()}, "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )


def run_once(mode: str, args: argparse.Namespace, seed: int, logdir: Path) -> dict[str, float]:
    cmd = [
        sys.executable, "-m", "hogwild.mnist", "--mode", mode, "--workers", str(args.workers),
        "--epochs", str(args.epochs), "--target-accuracy", str(args.target), "--seed", str(seed),
        "--data-dir", str(args.data_dir), "--no-download", "--logdir", str(logdir), *args.extra,
    ]  # fmt: skip
    print("$", shlex.join(cmd), flush=True)
    t = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - t
    if proc.returncode != 0:
        sys.stdout.write(proc.stdout + proc.stderr)
        raise SystemExit(f"{mode} run failed with exit code {proc.returncode}")
    (run,) = [p for p in logdir.iterdir() if p.is_dir()]
    ckpt = torch.load(run / "checkpoint.pt", map_location="cpu", weights_only=True)
    acc = EventAccumulator(str(run))
    acc.Reload()
    rates = [e.value for e in acc.Scalars("perf/samples_per_sec")]
    reached = ckpt["milestones"].get(str(float(args.target)))  # [seconds, samples]
    return {
        "rate": statistics.median(rates),
        "time": reached[0] if reached else float("nan"),
        "samples": reached[1] if reached else float("nan"),
        "epochs": ckpt["epoch"],
        "accuracy": ckpt["test_accuracy"],
        "wall": wall,
        "load": os.getloadavg()[0],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2, help="(hogwild, ddp) pairs (default 2)")
    p.add_argument("--workers", type=int, default=2, help="Hogwild! workers = DDP ranks")
    p.add_argument("--epochs", type=int, default=8, help="give up after this many epochs")
    p.add_argument("--target", type=float, default=98.0, choices=(98.0, 99.0))
    p.add_argument("--data-dir", type=Path, default=_data_dir())
    p.add_argument("extra", nargs="*", help="more hogwild-mnist flags for both modes, after --")
    args = p.parse_args()
    print("$", shlex.join([sys.executable, *sys.argv]))
    print(machine(), flush=True)
    results: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    for r in range(args.rounds):
        for mode in MODES:
            with tempfile.TemporaryDirectory() as logdir:
                res = run_once(mode, args, seed=r + 1, logdir=Path(logdir))
            results[mode].append(res)
            print(
                f"round {r + 1}, {mode:7}: {res['rate']:,.0f} samples/s; "
                f"{args.target:g}% after {res['time']:.1f} s / {res['samples']:,.0f} samples "
                f"({res['epochs']} epoch(s), final {res['accuracy']:.2f}%); "
                f"command {res['wall']:.1f} s; load {res['load']:.2f}",
                flush=True,
            )
    print(machine())
    med = {
        m: {k: statistics.median(x[k] for x in results[m]) for k in ("rate", "time", "wall")}
        for m in MODES
    }
    for m in MODES:
        print(
            f"median {m:7}: {med[m]['rate']:,.0f} samples/s, {args.target:g}% after "
            f"{med[m]['time']:.1f} s of training, command {med[m]['wall']:.1f} s"
        )
    h, d = med["hogwild"], med["ddp"]
    print(
        f"hogwild / ddp: throughput x{h['rate'] / d['rate']:.2f}, time to {args.target:g}% "
        f"x{d['time'] / h['time']:.2f} faster, whole command x{d['wall'] / h['wall']:.2f} faster"
    )


def _data_dir() -> Path:
    shared = ROOT.parent / "shared" / "data" / "mnist"
    if shared.is_dir() and "HOGWILD_DATA" not in os.environ:
        return shared
    return Path(os.environ.get("HOGWILD_DATA", "data/mnist"))


if __name__ == "__main__":
    main()
