"""MNIST's settings: the trainer's (:class:`~hogwild.supervised.config.FitConfig`), with
MNIST's defaults and names, and the few of its own (the data folder, the model).

Every setting is declared once: the flags (``hogwild-mnist --help``), the range checks and
``config.json`` come from these fields. What the trainer lets a user choose and MNIST
fixes (the data, the loss, the metric) is kept off the command line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hogwild.config import ENGINE, EngineConfig, check, redefault, setting
from hogwild.mnist.data import default_data_dir
from hogwild.mnist.model import MODELS
from hogwild.supervised.config import TABLE_LR, TASK, TRAIN, FitConfig

PROG = "hogwild-mnist"
DATA = "data"


def hidden(cls: type, name: str, default: Any) -> Any:
    """A trainer setting MNIST fixes: settable from Python, not a flag."""
    return redefault(cls, name, default, flag=False)


@dataclass
class MnistConfig(FitConfig):
    """Every setting of a run; written to ``config.json``, TensorBoard and checkpoints."""

    workers: int = redefault(FitConfig, "workers", 2, aliases=("--num-processes",))
    max_restarts: int = redefault(EngineConfig, "max_restarts", 10)
    model: str = setting(
        "convnet",
        "convnet (80k params, reaches 99%) or example (PyTorch example's net)",
        group=TRAIN,
        choices=tuple(sorted(MODELS)),
    )
    data: str | None = hidden(FitConfig, "data", None)
    loss: str = hidden(FitConfig, "loss", "nll")
    step: str | None = hidden(FitConfig, "step", None)
    metrics: tuple[str, ...] = hidden(FitConfig, "metrics", ("accuracy",))
    monitor: str | None = hidden(FitConfig, "monitor", None)
    monitor_mode: str = hidden(FitConfig, "monitor_mode", "auto")
    target: float | None = setting(
        None,
        "stop after the first epoch whose test accuracy reaches PCT",
        group=TRAIN,
        above=0,
        max=100,
        metavar="PCT",
        aliases=("--target-accuracy",),
    )
    epochs: int = redefault(FitConfig, "epochs", 4)
    val_batch_size: int = redefault(
        FitConfig, "val_batch_size", 1000, aliases=("--test-batch-size",)
    )
    optimizer: str = redefault(
        FitConfig, "optimizer", "sgd", help="shared optimizer, one per worker (try 1e-3 with adam)"
    )
    lr: float = redefault(FitConfig, "lr", 0.05)
    momentum: float = redefault(FitConfig, "momentum", 0.5)
    table_optimizer: str = hidden(FitConfig, "table_optimizer", "adagrad")  # no tables
    table_lr: float = hidden(FitConfig, "table_lr", TABLE_LR)
    lr_decay: float = redefault(FitConfig, "lr_decay", 0.7)
    strategy: str = redefault(FitConfig, "strategy", "hogwild", aliases=("--mode",))
    buffers: str = hidden(FitConfig, "buffers", "shared")
    loader_workers: int = hidden(FitConfig, "loader_workers", 0)
    train_subset: int | None = setting(
        None, "train on the first N images only (for quick tests)", group=TRAIN, min=1
    )
    channels_last: bool = setting(
        True, "channels-last convolutions, faster than NCHW (the --no- form)", group=TRAIN
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

    def __post_init__(self) -> None:
        check(self)


GROUPS = (TRAIN, DATA, ENGINE, TASK)
