"""The settings of a run, shared by both modes and written wherever a run is recorded."""

from __future__ import annotations

from dataclasses import dataclass, field

from hogwild.mnist.data import default_data_dir

PROG = "hogwild-mnist"


@dataclass
class MnistConfig:
    """Every setting of a run; written to ``config.json``, TensorBoard and checkpoints."""

    batch_size: int = 64
    test_batch_size: int = 1000
    epochs: int = 4
    lr: float = 0.05
    momentum: float = 0.5
    lr_decay: float = 0.7
    optimizer: str = "sgd"
    model: str = "convnet"
    seed: int = 1
    log_interval: int = 10
    workers: int = 2
    threads_per_worker: int = 1
    start_method: str = "fork"
    data_dir: str = field(default_factory=lambda: str(default_data_dir()))
    download: bool = True
    train_subset: int | None = None
    max_batches_per_epoch: int | None = None
    target_accuracy: float | None = None
    logdir: str = "runs"
    run_name: str | None = None
    checkpoint: str | None = None
    resume: str | None = None
    on_worker_failure: str = "restart"
    max_restarts: int = 10
    eval_interval: float = 0.0
    eval_device: str = "auto"
    channels_last: bool = True
    mode: str = "hogwild"
    sync_every: float = 2.0
    dist_timeout: float = 60.0


def epoch_lr(cfg: MnistConfig, epoch: int) -> float:
    """Step decay per epoch (``StepLR(step_size=1, gamma=lr_decay)``); epochs count from 0."""
    return cfg.lr * cfg.lr_decay**epoch
