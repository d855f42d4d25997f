"""Hogwild! against Lightning's DDP on the same MNIST model, data and batch: time to 99%.

Both train :class:`hogwild.mnist.ConvNet` on the real MNIST files with batch 64, SGD
(lr 0.05, momentum 0.5, the rate times 0.7 each epoch) and one torch thread per process,
and score the 10k test images after every epoch; each stops at the first epoch at 99%.

* ``hogwild``: ``python -m hogwild.mnist --workers 2 --target-accuracy 99``
* ``lightning``: ``Trainer(accelerator="cpu", devices=2, strategy="ddp")``, this file
  re-run by Lightning in each of its processes, a ``DistributedSampler`` shard each.

The time is the run's own, from its first training step to the end of the epoch that
reached 99% (the test set scored), without the start-up; the wall time of the whole
command is reported beside it. Needs the benchmark extra: ``pip install lightning``.

    python benchmarks/mnist_vs_lightning.py --seeds 1 2 3
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
TARGET = 99.0


def lightning_main(data_dir: str, seed: int, epochs: int) -> None:
    """One Lightning run (this script re-run with ``--lightning``); prints a JSON line."""
    import lightning as L  # noqa: N812 (Lightning's own spelling)
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset

    from hogwild.mnist import ConvNet
    from hogwild.mnist.data import load_mnist

    torch.set_num_threads(1)
    data = load_mnist(data_dir, download=False)

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = ConvNet()
            self.correct = 0
            self.seen = 0

        def training_step(self, batch, _):
            x, y = batch
            return F.nll_loss(self.net(x), y)

        def validation_step(self, batch, _):
            x, y = batch
            self.correct += int((self.net(x).argmax(1) == y).sum())
            self.seen += y.shape[0]

        def on_validation_epoch_end(self) -> None:
            counts = self.all_gather(torch.tensor([self.correct, self.seen])).reshape(-1, 2)
            correct, seen = counts.sum(0).tolist()
            self.log("acc", 100.0 * correct / seen, sync_dist=False, rank_zero_only=True)
            self.accuracy = 100.0 * correct / seen
            self.correct = self.seen = 0

        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.5)
            return [opt], [torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.7)]

    class StopAt(L.Callback):
        def __init__(self) -> None:
            self.t0 = 0.0
            self.history: list[tuple[int, float, float]] = []

        def on_train_start(self, trainer, module) -> None:
            self.t0 = time.monotonic()

        def on_train_epoch_end(self, trainer, module) -> None:  # after its validation
            acc = module.accuracy
            self.history.append((trainer.current_epoch + 1, acc, time.monotonic() - self.t0))
            if acc >= TARGET:
                trainer.should_stop = True

    L.seed_everything(seed, verbose=False)
    module, stop = Module(), StopAt()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_epochs=epochs,
        callbacks=[stop],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    train = TensorDataset(data.train_images, data.train_labels)
    test = TensorDataset(data.test_images, data.test_labels)
    trainer.fit(
        module,
        DataLoader(train, batch_size=64, shuffle=True),
        DataLoader(test, batch_size=1000),
    )
    if trainer.global_rank == 0:
        print("RESULT " + json.dumps(stop.history), flush=True)


def run_lightning(data_dir: str, seed: int, epochs: int) -> dict:
    cmd = [sys.executable, __file__, "--lightning", "--data-dir", data_dir, "--seed", str(seed)]
    t = time.monotonic()
    proc = subprocess.run(
        [*cmd, "--epochs", str(epochs)], capture_output=True, text=True, cwd=ROOT, timeout=3600
    )
    wall = time.monotonic() - t
    found = re.search(r"^RESULT (.*)$", proc.stdout, re.M)
    if proc.returncode or not found:
        raise RuntimeError(f"lightning run failed: {proc.stderr[-2000:]}")
    history = json.loads(found[1])
    hit = next((h for h in history if h[1] >= TARGET), None)
    return {
        "epochs": len(history),
        "accuracy": history[-1][1],
        "seconds_to_99": hit[2] if hit else None,
        "wall_s": wall,
    }


def run_hogwild(data_dir: str, seed: int, epochs: int) -> dict:
    cmd = [
        sys.executable, "-m", "hogwild.mnist", "--data-dir", data_dir, "--no-download",
        "--workers", "2", "--epochs", str(epochs), "--target-accuracy", str(TARGET),
        "--seed", str(seed), "--logdir", "runs/bench-lightning",
    ]  # fmt: skip
    t = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=3600)
    wall = time.monotonic() - t
    if proc.returncode:
        raise RuntimeError(f"hogwild run failed: {proc.stderr[-2000:]}")
    hit = re.search(r"^test accuracy 99 first reached after ([\d.]+) s", proc.stdout, re.M)
    accs = re.findall(r"^epoch \d+: test loss [\d.e-]+, accuracy ([\d.]+)%", proc.stdout, re.M)
    return {
        "epochs": len(accs),
        "accuracy": float(accs[-1]),
        "seconds_to_99": float(hit[1]) if hit else None,
        "wall_s": wall,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[1])
    p.add_argument("--epochs", type=int, default=8, help="at most, if 99%% is not reached")
    p.add_argument(
        "--data-dir", default=os.environ.get("HOGWILD_DATA", str(ROOT.parent / "shared/data/mnist"))
    )
    p.add_argument("--seed", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--lightning", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.lightning:
        lightning_main(args.data_dir, args.seed, args.epochs)
        return 0
    rows = []
    for seed in args.seeds:
        for name, run in (("hogwild", run_hogwild), ("lightning", run_lightning)):
            row = {"setup": name, "seed": seed, **run(args.data_dir, seed, args.epochs)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    for name in ("hogwild", "lightning"):
        times = [r["seconds_to_99"] for r in rows if r["setup"] == name and r["seconds_to_99"]]
        if times:
            print(f"{name}: median time to 99% {statistics.median(times):.1f} s over {len(times)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
