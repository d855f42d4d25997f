"""Hogwild!: lock-free asynchronous training of one shared-memory model by many processes.

``fit(model, data, ...)`` trains your own ``nn.Module`` on your own ``Dataset`` (the
command: ``python -m hogwild.train``); ``load(path)`` gives the trained model back.
"""

from hogwild.errors import UsageError
from hogwild.supervised.api import fit
from hogwild.supervised.callbacks import EarlyStopping
from hogwild.supervised.checkpoints import load
from hogwild.supervised.config import FitConfig
from hogwild.supervised.report import FitResult

__all__ = ["EarlyStopping", "FitConfig", "FitResult", "UsageError", "fit", "load"]
