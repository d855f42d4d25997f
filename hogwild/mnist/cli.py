"""The ``hogwild-mnist`` command line."""

from __future__ import annotations

import argparse
import math
import sys

from hogwild.cli import nonnegative_int, positive_float, positive_int, run_cli, unit_float
from hogwild.distributed import NodeFailure
from hogwild.mnist.config import PROG, MnistConfig
from hogwild.mnist.model import MODELS
from hogwild.mnist.trainer import train


def _nonnegative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def _gamma(text: str) -> float:
    value = positive_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def _percent(text: str) -> float:
    value = positive_float(text)
    if value > 100:
        raise argparse.ArgumentTypeError(f"must be a percentage up to 100, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    d = MnistConfig()
    p = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Hogwild! training on MNIST: N worker processes update one shared-memory convnet\n"
            "in place, without locks. Each epoch, every worker trains on its own shard of a\n"
            "fresh shuffle and exits; then the test set is scored and a checkpoint saved.\n"
            "Ctrl-C or SIGTERM stops the workers, saves a checkpoint and exits (130/143).\n"
            "--mode ddp trains the same model synchronously (DistributedDataParallel) for\n"
            "comparison. Under torchrun, every node runs its own Hogwild! workers on its own\n"
            "shards and the nodes average their parameters every --sync-every seconds."
        ),
        epilog=(
            "examples:\n"
            f"  {PROG}                        # 2 workers, 4 epochs: ~99% test accuracy\n"
            f"  {PROG} --workers 4 --eval-interval 5\n"
            f"  {PROG} --model example --lr 0.01 --momentum 0.5 --lr-decay 1  # PyTorch's\n"
            f"  {PROG} --resume runs/<run>/checkpoint.pt --epochs 6\n"
            f"  {PROG} --mode ddp --workers 2            # synchronous baseline\n"
            "  torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d \\\n"
            "      --rdzv-endpoint HOST:29500 -m hogwild.mnist --workers 2   # on each machine\n"
            "then: tensorboard --logdir runs"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g = p.add_argument_group("training")
    g.add_argument(
        "--batch-size",
        type=positive_int,
        default=d.batch_size,
        metavar="N",
        help="samples per worker step (default %(default)s)",
    )
    g.add_argument(
        "--test-batch-size",
        type=positive_int,
        default=d.test_batch_size,
        metavar="N",
        help="batch size when scoring the test set (default %(default)s)",
    )
    g.add_argument(
        "--epochs",
        type=positive_int,
        default=d.epochs,
        metavar="N",
        help="total epochs, counting those of a resumed checkpoint (default %(default)s)",
    )
    g.add_argument(
        "--optimizer",
        choices=("sgd", "adam"),
        default=d.optimizer,
        help="shared optimizer, one per worker (default %(default)s)",
    )
    g.add_argument(
        "--lr",
        type=positive_float,
        default=d.lr,
        help="learning rate (default %(default)s; try 1e-3 with adam)",
    )
    g.add_argument(
        "--momentum",
        type=unit_float,
        metavar="M",
        default=d.momentum,
        help="SGD momentum (default %(default)s)",
    )
    g.add_argument(
        "--lr-decay",
        type=_gamma,
        default=d.lr_decay,
        metavar="GAMMA",
        help="multiply the learning rate by GAMMA after each epoch; 1 keeps it "
        "constant (default %(default)s)",
    )
    g.add_argument(
        "--model",
        choices=sorted(MODELS),
        default=d.model,
        help="convnet (80k params, reaches 99%%) or example (PyTorch example's "
        "net) (default %(default)s)",
    )
    g.add_argument("--seed", type=int, default=d.seed, help="random seed (default %(default)s)")
    g.add_argument(
        "--train-subset",
        type=positive_int,
        default=None,
        metavar="N",
        help="train on the first N images only (for quick tests)",
    )
    g.add_argument(
        "--max-batches-per-epoch",
        type=positive_int,
        default=None,
        metavar="N",
        help="stop each worker's epoch after N batches (for quick tests)",
    )
    g.add_argument(
        "--target-accuracy",
        type=_percent,
        default=None,
        metavar="PCT",
        help="stop after the first epoch whose test accuracy reaches PCT",
    )
    g.add_argument(
        "--no-channels-last",
        dest="channels_last",
        action="store_false",
        help="use NCHW convolutions instead of the faster channels-last ones",
    )

    g = p.add_argument_group("processes")
    g.add_argument(
        "--mode",
        choices=("hogwild", "ddp"),
        default=d.mode,
        help="hogwild: lock-free shared model; ddp: synchronous DistributedDataParallel "
        "baseline, --workers ranks (default %(default)s)",
    )
    g.add_argument(
        "--workers",
        "--num-processes",
        type=positive_int,
        default=d.workers,
        metavar="N",
        help="Hogwild! worker processes (per node under torchrun), or DDP ranks "
        "(default %(default)s)",
    )
    g.add_argument(
        "--threads-per-worker",
        type=positive_int,
        default=d.threads_per_worker,
        metavar="N",
        help="torch threads in each worker; keep workers x threads <= cores (default %(default)s)",
    )
    g.add_argument(
        "--start-method",
        choices=("fork", "spawn"),
        default=d.start_method,
        help="how workers are started; spawn pays a start-up every epoch; "
        "DDP ranks are always spawned (default %(default)s)",
    )
    g.add_argument(
        "--on-worker-failure",
        choices=("restart", "abort"),
        default=d.on_worker_failure,
        help="a dead worker is restarted on its shard, or the run stops; a dead DDP "
        "rank always stops the run (default %(default)s)",
    )
    g.add_argument(
        "--max-restarts",
        type=nonnegative_int,
        default=d.max_restarts,
        metavar="N",
        help="worker restarts allowed in the whole run (default %(default)s)",
    )
    g.add_argument(
        "--eval-interval",
        type=_nonnegative_float,
        default=d.eval_interval,
        metavar="SECONDS",
        help="also score the test set every SECONDS during training in a separate "
        "evaluator process; 0 = off; hogwild mode only (default %(default)s)",
    )
    g.add_argument(
        "--eval-device",
        choices=("auto", "cpu", "cuda"),
        default=d.eval_device,
        help="the evaluator's device; auto = CUDA if present (default %(default)s)",
    )

    g = p.add_argument_group("several machines (under torchrun) and DDP")
    g.add_argument(
        "--sync-every",
        type=positive_float,
        default=d.sync_every,
        metavar="SECONDS",
        help="under torchrun: seconds between parameter averages across nodes "
        "(default %(default)s)",
    )
    g.add_argument(
        "--dist-timeout",
        type=positive_float,
        default=d.dist_timeout,
        metavar="SECONDS",
        help="seconds before a silent node or DDP rank counts as dead (default %(default)s)",
    )

    g = p.add_argument_group("files")
    g.add_argument(
        "--data-dir",
        default=d.data_dir,
        metavar="DIR",
        help="MNIST .gz files; downloaded here if missing (default %(default)s, or $HOGWILD_DATA)",
    )
    g.add_argument(
        "--no-download",
        dest="download",
        action="store_false",
        help="fail instead of downloading missing MNIST files",
    )
    g.add_argument(
        "--logdir",
        default=d.logdir,
        metavar="DIR",
        help="parent of the run folders (default %(default)s)",
    )
    g.add_argument(
        "--run-name", default=None, metavar="NAME", help="run folder suffix (default mnist)"
    )
    g.add_argument(
        "--checkpoint",
        default=None,
        metavar="PATH",
        help="checkpoint file, rewritten each epoch (default <run folder>/checkpoint.pt)",
    )
    g.add_argument(
        "--resume",
        default=None,
        metavar="PATH",
        help="continue from this checkpoint: weights, optimizer state, epoch count",
    )
    g.add_argument(
        "--log-interval",
        type=positive_int,
        default=d.log_interval,
        metavar="N",
        help="batches between a worker's telemetry messages (default %(default)s)",
    )
    return p


def config_from_args(args: argparse.Namespace) -> MnistConfig:
    return MnistConfig(**{k: v for k, v in vars(args).items()})


def _main(args: argparse.Namespace) -> int:
    try:
        return train(config_from_args(args)).exit_code
    except NodeFailure as e:  # while joining the other nodes, before training
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # before or after the graceful-shutdown window
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


def main(argv: list[str] | None = None) -> int:
    """Console entry point (``hogwild-mnist``); returns the exit code."""
    return run_cli(build_parser(), _main, argv)
