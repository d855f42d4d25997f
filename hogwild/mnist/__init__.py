"""Hogwild! on MNIST: N processes train one shared convnet in place, without locks.

This is PyTorch's ``mnist_hogwild`` example, rebuilt on the engine. The parameters live
in one flat shared-memory tensor (:mod:`hogwild.flat`); every worker process runs its own
forward/backward on its own batches and applies its gradient straight to the shared
tensor through *its own* shared optimizer (momentum buffers in shared memory, so they
survive a worker restart and go into checkpoints). Nobody waits for anybody.

Two more ways to run the same model on the same data (see ``--help``):

* ``--mode ddp``: the synchronous baseline, N ``DistributedDataParallel`` ranks
  (:mod:`hogwild.mnist.ddp`).
* under ``torchrun``: one Hogwild! node per machine, each with its own workers on its
  own shard of the data, averaging parameters with the other nodes every
  ``--sync-every`` seconds (:class:`hogwild.distributed.NodeSync`). Every node's epoch
  generation must be over before anyone tests: a node that is done keeps voting "done"
  in the averaging rounds until the totals say all nodes are; a last exact round then
  leaves every node with the same model, which rank 0 alone tests, logs and checkpoints.

From Python: ``train(MnistConfig(workers=2, epochs=1))`` runs what the command line
does (every flag is a keyword of :class:`MnistConfig`) and returns a :class:`MnistResult`;
a bad setting or an unusable path raises :class:`hogwild.errors.UsageError`.

Modules: ``trainer`` (hogwild mode's main process), ``worker`` (its workers),
``multinode`` (under torchrun: same flags, same final weights), ``ddp`` and ``ddp_rank``
(``--mode ddp``: parent and ranks), ``steps`` (one step's passes, both modes:
``--grad-accum``, ``--amp`` through :mod:`hogwild.precision`), ``model``, ``data``,
``config``, ``checkpoints``, ``report``, ``live_eval`` and ``cli``.
"""

from hogwild.mnist.cli import main
from hogwild.mnist.config import MnistConfig
from hogwild.mnist.model import ConvNet, ExampleNet, build_model
from hogwild.mnist.multinode import params_digest
from hogwild.mnist.report import MnistResult
from hogwild.mnist.trainer import train
from hogwild.mnist.worker import TELEMETRY, EpochPlan, make_optimizer, shard_indices, train_worker

__all__ = [
    "TELEMETRY",
    "ConvNet",
    "EpochPlan",
    "ExampleNet",
    "MnistConfig",
    "MnistResult",
    "build_model",
    "main",
    "make_optimizer",
    "params_digest",
    "shard_indices",
    "train",
    "train_worker",
]
