"""The settings of a supervised run: every field declared once (flags, files, checks).

``python -m hogwild.train --help`` lists them; ``fit(...)`` takes each as a keyword; a
TOML file given with ``--config`` may set any of them by name.
"""

from __future__ import annotations

from dataclasses import dataclass

from hogwild.config import ENGINE, EVAL, EngineConfig, check, redefault, setting
from hogwild.sharing import BUFFER_POLICIES

PROG = "hogwild.train"
TASK = "model, data and objective"
TRAIN = "training"

LOSSES = ("cross_entropy", "nll", "mse", "l1", "bce")
OPTIMIZER_NAMES = ("sgd", "adam", "adagrad", "rmsprop")
TABLE_OPTIMIZER_NAMES = ("adagrad", "sgd", "adam")  # those with a row update
# Adagrad at 0.2, 3 epochs, 3 seeds: the recommender's val MSE 0.0137 (noise 0.01, start 1.05)
# and the bag of words 98.0%; at 0.05 0.274 / 96.0%, SparseAdam 0.01 0.053 / 96.0%.
TABLE_LR = 0.2
STRATEGIES = ("hogwild", "ddp")
DEVICES = ("auto", "cpu", "cuda")


@dataclass
class FitConfig(EngineConfig):
    """Every setting of a supervised run; written to ``config.json`` and checkpoints."""

    workers: int = redefault(EngineConfig, "workers", 2)
    eval_interval: float = redefault(EngineConfig, "eval_interval", 0.0)

    model: str | None = setting(
        None,
        "module:function that returns your nn.Module (e.g. mypkg.models:make_model)",
        group=TASK,
        metavar="MODULE:FN",
    )
    data: str | None = setting(
        None,
        "module:function that returns (train, val) map-style Datasets (val may be None)",
        group=TASK,
        metavar="MODULE:FN",
    )
    loss: str = setting(
        "cross_entropy",
        "loss(output, target) for (input, target) items: "
        + ", ".join(LOSSES)
        + " (torch.nn.functional's; bce takes logits), or module:function",
        group=TASK,
        metavar="NAME|MODULE:FN",
    )
    step: str | None = setting(
        None,
        "module:function(model, batch) returning the scalar loss, instead of --loss: for "
        "batches that are not (input, target), such as several inputs or dicts",
        group=TASK,
        metavar="MODULE:FN",
    )
    metrics: tuple[str, ...] = setting(
        (),
        "a validation metric: accuracy, or module:function(output, target) returning a "
        "number (repeatable); the loss is always scored",
        group=TASK,
        aliases=("--metric",),
        metavar="NAME|MODULE:FN",
    )
    monitor: str | None = setting(
        None,
        "the validation metric that picks best.pt and that --target and --early-stop "
        "watch (none: the first --metric, else loss)",
        group=TRAIN,
        metavar="NAME",
    )
    monitor_mode: str = setting(
        "auto",
        "whether lower or higher --monitor scores are better (auto: lower for loss)",
        group=TRAIN,
        choices=("auto", "min", "max"),
    )
    target: float | None = setting(
        None,
        "stop after the first epoch whose --monitor score reaches X (or falls to X where "
        "lower is better)",
        group=TRAIN,
    )
    early_stop: int | None = setting(
        None,
        "stop after N epochs without a better --monitor metric",
        group=TRAIN,
        min=1,
        metavar="N",
    )
    epochs: int = setting(
        5, "total epochs, counting those of a resumed checkpoint", group=TRAIN, min=1
    )
    batch_size: int = setting(
        64, "samples per micro-batch (a step takes --grad-accum of them)", group=TRAIN, min=1
    )
    grad_accum: int = setting(
        1,
        "micro-batches per optimizer step, each one's loss divided by N (in ddp, one "
        "all-reduce per step); --lr is not scaled with it",
        group=TRAIN,
        min=1,
        metavar="N",
    )
    amp: str = setting(
        "off",
        "the forward pass and loss under autocast: bf16, or fp16 with a GradScaler (ddp "
        "with a GPU per rank only); parameters, optimizer state and steps stay fp32",
        group=TRAIN,
        choices=("off", "bf16", "fp16"),
    )
    val_batch_size: int = setting(
        1000, "batch size when scoring the validation set", group=TRAIN, min=1
    )
    optimizer: str = setting(
        "sgd",
        "dense parameters: sgd (with --momentum), adam, adagrad or rmsprop, its state shared "
        "(one per worker); sparse embedding tables take --table-optimizer",
        group=TRAIN,
        choices=OPTIMIZER_NAMES,
    )
    # SGD at 0.05 with momentum 0.9: median 96% after 3 epochs over 4 small models (an MLP on
    # two tables, a bag of words, a ResNet) against 89.5% for Adam at 1e-3 and 63% at 0.01.
    lr: float = setting(0.05, "learning rate", group=TRAIN, above=0)
    momentum: float = setting(
        0.9, "SGD momentum (dense parameters)", group=TRAIN, min=0, max=1, metavar="M"
    )
    table_optimizer: str = setting(
        "adagrad",
        "sparse embedding tables (nn.Embedding/EmbeddingBag(sparse=True)): each touched row "
        "updated in place, one state for all workers: adagrad (PyTorch-BigGraph's and "
        "TorchRec's default), sgd (no momentum) or adam (SparseAdam's lazy Adam)",
        group=TRAIN,
        choices=TABLE_OPTIMIZER_NAMES,
    )
    table_lr: float = setting(
        TABLE_LR, "learning rate of the sparse tables' rows", group=TRAIN, above=0
    )
    weight_decay: float = setting(
        0.0, "L2 penalty (dense parameters)", group=TRAIN, min=0, metavar="X"
    )
    lr_decay: float = setting(
        1.0,
        "multiply the learning rate by GAMMA after each epoch; 1 keeps it constant",
        group=TRAIN,
        above=0,
        max=1,
        metavar="GAMMA",
    )
    strategy: str = setting(
        "hogwild",
        "hogwild: --workers processes update one shared model lock-free; ddp: synchronous "
        "DistributedDataParallel ranks (gloo on CPU, NCCL with a GPU per rank), the baseline",
        group=ENGINE,
        choices=STRATEGIES,
    )
    device: str = setting(
        "auto",
        "cuda: hogwild shares the model on one GPU (its workers start with spawn), ddp "
        "puts a GPU under each rank; cpu; auto: ddp on a GPU per rank if there are enough, "
        "hogwild on the CPU",
        group=ENGINE,
        choices=DEVICES,
    )
    buffers: str = setting(
        "shared",
        "hogwild: BatchNorm's running statistics shared and updated in place by every "
        "worker, or each worker's own, averaged at the epoch's end",
        group=ENGINE,
        choices=BUFFER_POLICIES,
    )
    loader_workers: int = setting(
        0,
        "DataLoader processes inside each worker (0: the worker reads its own batches)",
        group=ENGINE,
        min=0,
        metavar="N",
    )
    max_batches_per_epoch: int | None = setting(
        None,
        "stop each worker's epoch after N micro-batches (for quick tests)",
        group=TRAIN,
        min=1,
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


def epoch_lr(cfg: FitConfig, epoch: int, table: bool = False) -> float:
    """Step decay per epoch (``StepLR(step_size=1, gamma=lr_decay)``) of ``--lr`` or, for
    the sparse tables, ``--table-lr``; epochs count from 0."""
    return (cfg.table_lr if table else cfg.lr) * cfg.lr_decay**epoch
