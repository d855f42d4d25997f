"""Hogwild! on MNIST: the supervised application built on the engine."""

from hogwild.mnist.trainer import (
    TELEMETRY,
    ConvNet,
    EpochPlan,
    MnistConfig,
    RunResult,
    build_model,
    main,
    make_optimizer,
    params_digest,
    shard_indices,
    train,
    train_worker,
)

__all__ = [
    "TELEMETRY",
    "ConvNet",
    "EpochPlan",
    "MnistConfig",
    "RunResult",
    "build_model",
    "main",
    "make_optimizer",
    "params_digest",
    "shard_indices",
    "train",
    "train_worker",
]
