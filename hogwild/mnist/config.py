"""The settings of a run, shared by both modes and written wherever a run is recorded.

Every setting is declared once, with its default, help and range: the flags
(``hogwild-mnist --help``), the range checks and ``config.json`` all come from these
fields (see :mod:`hogwild.config`). The engine's shared settings come from
:class:`~hogwild.config.EngineConfig`, three of them with MNIST's own defaults.
"""

from __future__ import annotations

from dataclasses import dataclass

from hogwild.config import ENGINE, EVAL, EngineConfig, check, redefault, setting
from hogwild.mnist.data import default_data_dir
from hogwild.mnist.model import MODELS

PROG = "hogwild-mnist"
TRAIN = "training"
DATA = "data"


@dataclass
class MnistConfig(EngineConfig):
    """Every setting of a run; written to ``config.json``, TensorBoard and checkpoints."""

    workers: int = redefault(EngineConfig, "workers", 2, aliases=("--num-processes",))
    max_restarts: int = redefault(EngineConfig, "max_restarts", 10)
    eval_interval: float = redefault(EngineConfig, "eval_interval", 0.0)

    batch_size: int = setting(
        64, "samples per micro-batch (a step takes --grad-accum of them)", group=TRAIN, min=1
    )
    grad_accum: int = setting(
        1,
        "micro-batches per optimizer step, each one's loss divided by N; in ddp mode one "
        "all-reduce per step. The effective batch is N x --batch-size and --lr is not scaled "
        "with it: scale --lr yourself if you want",
        group=TRAIN,
        min=1,
        metavar="N",
    )
    amp: str = setting(
        "off",
        "run the forward pass and loss under autocast: bf16, or fp16 with a GradScaler (ddp "
        "mode with a GPU per rank only); parameters, optimizer state and steps stay fp32",
        group=TRAIN,
        choices=("off", "bf16", "fp16"),
    )
    test_batch_size: int = setting(1000, "batch size when scoring the test set", group=TRAIN, min=1)
    epochs: int = setting(
        4, "total epochs, counting those of a resumed checkpoint", group=TRAIN, min=1
    )
    optimizer: str = setting(
        "sgd", "shared optimizer, one per worker", group=TRAIN, choices=("sgd", "adam")
    )
    lr: float = setting(0.05, "learning rate (try 1e-3 with adam)", group=TRAIN, above=0)
    momentum: float = setting(0.5, "SGD momentum", group=TRAIN, min=0, max=1, metavar="M")
    lr_decay: float = setting(
        0.7,
        "multiply the learning rate by GAMMA after each epoch; 1 keeps it constant",
        group=TRAIN,
        above=0,
        max=1,
        metavar="GAMMA",
    )
    model: str = setting(
        "convnet",
        "convnet (80k params, reaches 99%) or example (PyTorch example's net)",
        group=TRAIN,
        choices=tuple(sorted(MODELS)),
    )
    train_subset: int | None = setting(
        None, "train on the first N images only (for quick tests)", group=TRAIN, min=1
    )
    max_batches_per_epoch: int | None = setting(
        None, "stop each worker's epoch after N micro-batches (for quick tests)", group=TRAIN, min=1
    )
    target_accuracy: float | None = setting(
        None,
        "stop after the first epoch whose test accuracy reaches PCT",
        group=TRAIN,
        above=0,
        max=100,
        metavar="PCT",
    )
    channels_last: bool = setting(
        True, "channels-last convolutions, faster than NCHW (the --no- form)", group=TRAIN
    )
    mode: str = setting(
        "hogwild",
        "hogwild: lock-free shared model; ddp: synchronous DistributedDataParallel "
        "baseline with --workers ranks, always spawned, stopped by a dead rank "
        "(silent for --dist-timeout); no --eval-interval",
        group=ENGINE,
        choices=("hogwild", "ddp"),
    )
    data_dir: str = setting(
        help="MNIST .gz files, downloaded here if missing; $HOGWILD_DATA sets the default",
        factory=lambda: str(default_data_dir()),
        group=DATA,
        metavar="DIR",
    )
    download: bool = setting(
        True, "download missing MNIST files (the --no- form fails instead)", group=DATA
    )
    checkpoint: str | None = setting(
        None,
        "checkpoint file, rewritten each epoch (none: <run folder>/checkpoint.pt)",
        group=EVAL,
        metavar="PATH",
    )
    log_interval: int = setting(
        10, "optimizer steps between a worker's telemetry messages", group=EVAL, min=1, metavar="N"
    )

    def __post_init__(self) -> None:
        check(self)


def epoch_lr(cfg: MnistConfig, epoch: int) -> float:
    """Step decay per epoch (``StepLR(step_size=1, gamma=lr_decay)``); epochs count from 0."""
    return cfg.lr * cfg.lr_decay**epoch
