"""BatchNorm under Hogwild!: what the workers do with the running statistics, measured.

A small ResNet-style net (a stem and two residual blocks, each convolution followed by
BatchNorm, ~40k parameters) trains on MNIST with 2 Hogwild! workers under each
``--buffers`` policy, for a few seeds; the test accuracy (scored in eval mode, so with
the running statistics) after each epoch and the samples/s are reported per run.

* ``shared``: one set of statistics in shared memory, updated in place by every worker.
* ``average``: each worker's own during an epoch, averaged by the main process at its end.

    python benchmarks/batchnorm.py --seeds 1 2 3 --epochs 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from hogwild import fit
from hogwild.mnist.data import load_mnist
from hogwild.mnist.model import channels_last

ROOT = Path(__file__).resolve().parents[1]


class Block(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn1(self.conv1(x)))
        return F.relu(x + self.bn2(self.conv2(h)))


class SmallResNet(nn.Module):
    def __init__(self, channels: int = 24) -> None:
        super().__init__()
        self.stem = nn.Conv2d(1, channels, 3, stride=2, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)
        self.blocks = nn.Sequential(Block(channels), Block(channels))
        self.head = nn.Linear(channels, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn(self.stem(channels_last(x))))
        h = self.blocks(F.max_pool2d(h, 2))
        return self.head(h.mean((2, 3)))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument(
        "--data-dir", default=os.environ.get("HOGWILD_DATA", str(ROOT.parent / "shared/data/mnist"))
    )
    p.add_argument("--logdir", default="runs/bench-batchnorm")
    args = p.parse_args()
    data = load_mnist(args.data_dir, download=False)
    train = TensorDataset(data.train_images, data.train_labels)
    test = TensorDataset(data.test_images, data.test_labels)
    final: dict[str, list[float]] = {"shared": [], "average": []}
    quiet = open(os.devnull, "w")  # noqa: SIM115 (the runs' console lines, for the whole run)
    for seed in args.seeds:
        for policy in final:
            torch.manual_seed(seed)
            result = fit(
                SmallResNet(), train, "cross_entropy", val_data=test, metrics=["accuracy"],
                workers=args.workers, epochs=args.epochs, lr=0.05, momentum=0.9,
                buffers=policy, seed=seed, logdir=args.logdir, out=quiet,
            )  # fmt: skip
            row = {
                "policy": policy,
                "seed": seed,
                "accuracy": [round(h["val_accuracy"], 2) for h in result.history],
                "samples_per_sec": round(
                    statistics.median(h["samples_per_sec"] for h in result.history)
                ),
            }
            print(json.dumps(row), flush=True)
            final[policy].append(result.metrics["accuracy"])
    for policy, accs in final.items():
        print(f"{policy}: median final test accuracy {statistics.median(accs):.2f}% ({accs})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
