"""Hogwild!: lock-free asynchronous training of one shared-memory model by many processes.

``fit(model, data, ...)`` trains your own ``nn.Module`` on your own ``Dataset`` (the
command: ``python -m hogwild.train``); ``load(path)`` gives the trained model back.
The supervised trainer is imported on first use (PEP 562), so the engine's modules
that ``a3c`` imports load without it and its TensorBoard writer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from hogwild.errors import UsageError

if TYPE_CHECKING:
    from hogwild.supervised.api import fit
    from hogwild.supervised.callbacks import EarlyStopping
    from hogwild.supervised.checkpoints import load
    from hogwild.supervised.config import FitConfig
    from hogwild.supervised.report import FitResult

#: Each public name of the supervised trainer, and the module that defines it.
_LAZY = {
    "fit": "hogwild.supervised.api",
    "EarlyStopping": "hogwild.supervised.callbacks",
    "load": "hogwild.supervised.checkpoints",
    "FitConfig": "hogwild.supervised.config",
    "FitResult": "hogwild.supervised.report",
}

__all__ = ["EarlyStopping", "FitConfig", "FitResult", "UsageError", "fit", "load"]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'hogwild' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value
