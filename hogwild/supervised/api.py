"""``fit``: Hogwild! (or DDP) training of your own model on your own data, from Python."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from hogwild.errors import UsageError
from hogwild.procs import torch_threads
from hogwild.supervised.callbacks import Callback
from hogwild.supervised.checkpoints import check_output_paths, load_resume
from hogwild.supervised.config import FitConfig
from hogwild.supervised.ddp import check_ddp, train_ddp
from hogwild.supervised.report import App, FitResult
from hogwild.supervised.task import (
    Objective,
    Task,
    build_model,
    check_dataset,
    check_task,
    resolve_loss,
    resolve_metric,
    share_tensors,
)
from hogwild.supervised.trainer import HogwildFit, check_hogwild

__all__ = ["fit", "preflight", "run"]


def preflight(cfg: FitConfig, app: App) -> None:
    """What the settings alone can show wrong, before any data is read or model built: the
    output paths, the strategy's options, the checkpoint to resume."""
    check_output_paths(cfg)
    if cfg.strategy == "ddp":
        check_ddp(cfg)
    else:
        check_hogwild(cfg)
    if cfg.resume:
        load_resume(cfg, app)


def fit(
    model: nn.Module | Callable[[], nn.Module],
    data: Dataset,
    loss: str | Callable[..., torch.Tensor] = "cross_entropy",
    *,
    val_data: Dataset | None = None,
    metrics: Sequence[str | Callable[..., Any]] = (),
    step: Callable[[nn.Module, Any], torch.Tensor] | None = None,
    callbacks: Sequence[Callback] = (),
    out: Any = None,
    **settings: Any,
) -> FitResult:
    """Train ``model`` on ``data`` with ``workers`` processes sharing it lock-free.

    ``model``: an ``nn.Module`` (trained in place) or a callable returning one.
    ``data``, ``val_data``: map-style Datasets. ``loss(output, target)`` for ``(input,
    target)`` items (a name such as ``"cross_entropy"`` or a function), or ``step(model,
    batch) -> loss`` for any other batch. ``metrics``: ``"accuracy"`` or functions
    ``(output, target) -> number``, scored on ``val_data`` after each epoch with the loss.
    ``settings``: any field of :class:`~hogwild.supervised.config.FitConfig`, e.g.
    ``workers=4, epochs=3, lr=0.05, strategy="ddp"``. ``out`` receives the console lines.

    Workers fork by default; where they are spawned (``start_method="spawn"``,
    ``device="cuda"``, ddp with a GPU per rank) the calling script must guard its entry
    point with ``if __name__ == "__main__":``, as ``torch.multiprocessing`` requires.
    """
    names = {f.name for f in dataclasses.fields(FitConfig)}
    unknown = sorted(set(settings) - names)
    if unknown:
        raise UsageError(f"fit() got unknown settings {unknown}; see FitConfig")
    cfg = FitConfig(model=_name_of(model), **settings)
    objective = Objective(step=step) if step is not None else Objective(loss=resolve_loss(loss))
    task = Task(
        build_model(model, "the model factory"),
        check_dataset(data, "data"),
        None if val_data is None else check_dataset(val_data, "val_data"),
        objective,
        dict(resolve_metric(m) for m in metrics),
    )
    return run(cfg, task, callbacks=callbacks, out=out)


def _name_of(model: Any) -> str | None:
    """What config.json records (and :func:`~hogwild.load` may rebuild): a factory's
    ``module:name``, or a module's class."""
    target = model if not isinstance(model, nn.Module) else type(model)
    module, name = getattr(target, "__module__", None), getattr(target, "__qualname__", "")
    if not module or "<" in name:
        return None
    return f"{module}:{name}"


def run(
    cfg: FitConfig,
    task: Task,
    app: App | None = None,
    callbacks: Sequence[Callback] = (),
    out: Any = None,
) -> FitResult:
    """Check everything a run needs, in one line each, then train with ``cfg.strategy``."""
    app = app or App()
    preflight(cfg, app)
    for data in (task.train, task.val):
        if data is not None:
            share_tensors(data)
    check_task(task, cfg.batch_size)
    if cfg.strategy == "ddp":
        return train_ddp(cfg, task, app, callbacks, out)
    with torch_threads():
        trainer = HogwildFit(cfg, task, app, callbacks, out)
        try:
            return trainer.run()
        finally:
            trainer.close()
