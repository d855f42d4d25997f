"""MNIST as an application of the supervised trainer: the whole of it is here.

A model (:mod:`hogwild.mnist.model`), the data (:mod:`hogwild.mnist.data`, in shared
memory as ``TensorDataset``\\ s), the loss and the metric make a
:class:`~hogwild.supervised.task.Task`; an :class:`~hogwild.supervised.report.App` names
the command, its run folders, its checkpoints and its test set; the trainer does the
rest, in either strategy and under torchrun. A user's own model and data take the same
path through ``hogwild.fit`` or ``python -m hogwild.train``.
"""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torch.utils.data import TensorDataset

from hogwild.mnist.config import PROG, MnistConfig
from hogwild.mnist.data import load_data
from hogwild.mnist.model import build_model
from hogwild.supervised.api import preflight, run
from hogwild.supervised.report import App, FitResult
from hogwild.supervised.task import Objective, Task, accuracy

#: Test accuracies (%) whose first arrival time a run reports.
MILESTONES = (98.0, 99.0)

APP = App(
    prog=PROG,
    name="mnist",
    checkpoint_format="hogwild-mnist",
    split="test",
    milestones=MILESTONES,
    same_on_every_node=("train_subset",),
)


def mnist_task(cfg: MnistConfig) -> Task:
    """The model and MNIST (all of it, or ``--train-subset`` images) in shared memory."""
    data = load_data(cfg.data_dir, cfg.download, cfg.train_subset)
    return Task(
        build_model(cfg.model, nhwc=cfg.channels_last),
        TensorDataset(data.train_images, data.train_labels),
        TensorDataset(data.test_images, data.test_labels),
        Objective(loss=F.nll_loss),  # the models end in log_softmax
        {"accuracy": accuracy},
    )


def train(cfg: MnistConfig, out: Any = None) -> FitResult:
    """Run training with graceful Ctrl-C/SIGTERM handling; the programmatic entry point.

    ``out`` receives the console lines (default stdout). A bad setting or an unusable
    path raises :class:`hogwild.errors.UsageError` before any data is read.
    """
    preflight(cfg, APP)  # fail now, not after the data is read (or downloaded)
    return run(cfg, mnist_task(cfg), APP, out=out)
