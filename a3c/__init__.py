"""A3C (Mnih et al. 2016) on Gymnasium environments, built on the ``hogwild`` engine.

The Python API (``python -m a3c.train`` and ``python -m a3c.evaluate`` run the same)::

    from a3c import config_for, evaluate, train

    if __name__ == "__main__":  # workers may be spawned, which re-imports this file
        result = train(config_for("Acrobot-v1", workers=2))
        print(evaluate(result.run_dir / "checkpoint.pt", episodes=10).mean())

Names are imported on first use, so ``import a3c`` stays light (no torch, no gymnasium).
``a3c.train`` and ``a3c.evaluate`` are the functions even after their modules (the
commands) are imported; ``from a3c.train import A3CRun`` still reaches the module.
"""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from a3c.agent import Policy, load
    from a3c.config import A3CConfig
    from a3c.presets import config_for
    from a3c.train import A3CResult, train

__all__ = [
    "A3CConfig",
    "A3CResult",
    "Policy",
    "RunEvent",
    "config_for",
    "evaluate",
    "load",
    "train",
]

#: name -> the module that defines it, imported when the name is first used.
_LAZY = {
    "A3CConfig": "a3c.config",
    "A3CResult": "a3c.train",
    "Policy": "a3c.agent",
    "RunEvent": "a3c.callbacks",
    "load": "a3c.agent",
    "config_for": "a3c.presets",
    "train": "a3c.train",
}


def evaluate(
    checkpoint: str | Path,
    episodes: int = 10,
    *,
    seed: int = 0,
    stochastic: bool = False,
    env: str | None = None,
) -> np.ndarray:
    """The returns of ``episodes`` episodes of a saved policy (greedy unless ``stochastic``).

    What ``python -m a3c.evaluate CHECKPOINT`` scores: episode i is reset with seed
    ``seed + i`` (and stochastic draws are seeded with ``seed``, which reseeds torch's
    global generator), on the checkpoint's env unless ``env`` names another. A bad checkpoint
    raises :class:`hogwild.errors.UsageError` with a one-line message.
    """
    from a3c.evaluate import load_policy
    from a3c.evaluation import play_episodes

    if episodes < 1:
        from hogwild.errors import UsageError

        raise UsageError(f"episodes must be at least 1, got {episodes}")
    model, env_id, env_kwargs = load_policy(checkpoint, env)
    if stochastic:  # the action draws repeat with the seed too, as in the command
        import torch

        torch.manual_seed(seed)
    played = play_episodes(
        model, env_id, episodes, seed, greedy=not stochastic, env_kwargs=env_kwargs
    )
    return played.returns


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


class _Package(types.ModuleType):
    """Keeps ``a3c.train`` / ``a3c.evaluate`` the functions when their modules load.

    Importing a submodule binds it as an attribute of its package, which would make
    ``from a3c import train`` return the module whenever ``a3c.train`` was imported first.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("train", "evaluate") and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
