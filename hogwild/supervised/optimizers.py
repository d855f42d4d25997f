"""``--optimizer`` for both strategies: the shared lock-free ones (hogwild) and their
``torch.optim`` twins (ddp), with the same hyperparameters and the same sparse semantics."""

from __future__ import annotations

import torch
from torch import nn

from hogwild.optim import SharedAdagrad, SharedAdam, SharedOptimizer, SharedRMSprop, SharedSGD
from hogwild.sharing import SharedModel, sparse_parameters
from hogwild.sparse import SPARSE_OPTIMIZERS
from hogwild.supervised.config import FitConfig
from hogwild.supervised.worker import Optimizers


def dense_optimizer(cfg: FitConfig, vector: torch.Tensor) -> SharedOptimizer:
    if cfg.optimizer == "adam":
        return SharedAdam(vector, lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adagrad":
        return SharedAdagrad(vector, lr=cfg.lr)
    if cfg.optimizer == "rmsprop":
        return SharedRMSprop(vector, lr=cfg.lr)
    return SharedSGD(vector, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)


def make_optimizers(cfg: FitConfig, shared: SharedModel, workers: int) -> Optimizers:
    """One dense optimizer per worker and group, one row optimizer per table; all shared."""
    dense = [
        [dense_optimizer(cfg, g.dense_vector).share_memory() for g in shared.groups]
        for _ in range(workers)
    ]
    rows = {
        name: SPARSE_OPTIMIZERS[cfg.table_optimizer](p.data, lr=cfg.table_lr).share_memory()
        for name, p in shared.tables
    }
    return Optimizers(dense, rows)


def torch_optimizers(cfg: FitConfig, model: nn.Module) -> list[torch.optim.Optimizer]:
    """DDP's: ``torch.optim`` for the dense parameters, and for the sparse tables the
    ``--table-optimizer`` with the rows' semantics (SGD without momentum, Adagrad,
    SparseAdam)."""
    sparse = sparse_parameters(model)
    dense = [p for p in model.parameters() if p.requires_grad and p not in sparse]
    out: list[torch.optim.Optimizer] = []
    if dense:
        if cfg.optimizer == "adam":
            out.append(torch.optim.Adam(dense, lr=cfg.lr, weight_decay=cfg.weight_decay))
        elif cfg.optimizer == "adagrad":
            out.append(torch.optim.Adagrad(dense, lr=cfg.lr))
        elif cfg.optimizer == "rmsprop":
            out.append(torch.optim.RMSprop(dense, lr=cfg.lr, alpha=0.99, eps=1e-5))
        else:
            out.append(
                torch.optim.SGD(
                    dense, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay
                )
            )
    if sparse:
        tables = [p for p in model.parameters() if p in sparse]
        if cfg.table_optimizer == "adam":
            out.append(torch.optim.SparseAdam(tables, lr=cfg.table_lr))
        elif cfg.table_optimizer == "adagrad":
            out.append(torch.optim.Adagrad(tables, lr=cfg.table_lr))
        else:
            out.append(torch.optim.SGD(tables, lr=cfg.table_lr))
    return out
