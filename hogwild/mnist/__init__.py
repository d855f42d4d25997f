"""Hogwild! on MNIST: N processes train one shared convnet in place, without locks.

PyTorch's ``mnist_hogwild`` example, as one application of the supervised trainer
(:mod:`hogwild.supervised`): :mod:`hogwild.mnist.app` is all it adds, a model, the data
and a name, and is the example to read before training a model of your own with
``hogwild.fit`` or ``python -m hogwild.train``. Every worker process runs its own
forward/backward on its own shard and applies its gradient straight to the shared
parameters through its own shared optimizer; nobody waits for anybody.

``--strategy ddp`` (or ``--mode ddp``) trains the same model synchronously with
``DistributedDataParallel``; under ``torchrun`` every machine runs its own Hogwild!
workers and the machines average their parameters every ``--sync-every`` seconds.

From Python: ``train(MnistConfig(workers=2, epochs=1))`` runs what the command line
does (every flag is a keyword of :class:`MnistConfig`) and returns a
:class:`~hogwild.supervised.report.FitResult`; a bad setting or an unusable path raises
:class:`hogwild.errors.UsageError`.
"""

from hogwild.mnist.app import APP, MILESTONES, mnist_task, train
from hogwild.mnist.cli import main
from hogwild.mnist.config import MnistConfig
from hogwild.mnist.model import ConvNet, ExampleNet, build_model
from hogwild.supervised.multinode import params_digest
from hogwild.supervised.report import FitResult

__all__ = [
    "APP",
    "MILESTONES",
    "ConvNet",
    "ExampleNet",
    "FitResult",
    "MnistConfig",
    "build_model",
    "main",
    "mnist_task",
    "params_digest",
    "train",
]
