"""The ``hogwild-mnist`` command line: every MnistConfig field as a flag."""

from __future__ import annotations

import argparse

from hogwild.cli import exit_code_of, run_cli
from hogwild.config import add_flags, overrides_from_args
from hogwild.mnist.app import train
from hogwild.mnist.config import GROUPS, PROG, MnistConfig


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Hogwild! training on MNIST: N worker processes update one shared-memory convnet\n"
            "in place, without locks. Each epoch, every worker trains on its own shard of a\n"
            "fresh shuffle and exits; then the test set is scored and a checkpoint saved.\n"
            "Ctrl-C or SIGTERM stops the workers, saves a checkpoint and exits (130/143).\n"
            "--strategy ddp trains the same model synchronously (DistributedDataParallel) for\n"
            "comparison. Under torchrun, every node runs its own Hogwild! workers on its own\n"
            "shards and the nodes average their parameters every --sync-every seconds."
        ),
        epilog=(
            "examples:\n"
            f"  {PROG}                        # 2 workers, 4 epochs: ~99% test accuracy\n"
            f"  {PROG} --workers 4 --eval-interval 5\n"
            f"  {PROG} --model example --lr 0.01 --momentum 0.5 --lr-decay 1  # PyTorch's\n"
            f"  {PROG} --resume runs/<run>/checkpoint.pt --epochs 6\n"
            f"  {PROG} --strategy ddp --workers 2        # synchronous baseline\n"
            "  torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d \\\n"
            "      --rdzv-endpoint HOST:29500 -m hogwild.mnist --workers 2   # on each machine\n"
            "then: tensorboard --logdir runs"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_flags(p, MnistConfig, groups_order=GROUPS)
    return p


def config_from_args(args: argparse.Namespace) -> MnistConfig:
    return MnistConfig(**overrides_from_args(args, MnistConfig))


def _main(args: argparse.Namespace) -> int:
    return exit_code_of(PROG, lambda: train(config_from_args(args)).exit_code)


def main(argv: list[str] | None = None) -> int:
    """Console entry point (``hogwild-mnist``); returns the exit code."""
    return run_cli(build_parser(), _main, argv)
