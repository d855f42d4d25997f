"""The Python API: what ``python -m a3c.train`` and ``python -m a3c.evaluate`` run, and a
saved policy to act with::

    from a3c.api import Policy, config_for, evaluate, train

    if __name__ == "__main__":  # workers may be spawned, which re-imports this file
        result = train(config_for("Acrobot-v1", workers=2))
        print(evaluate(result.run_dir / "checkpoint.pt", episodes=10).mean())
        policy = Policy.load(result.run_dir / "best.pt")

Its own module, so that no name here is also a command's module (``a3c.train`` is the
command ``python -m a3c.train``; ``a3c.api.train`` the function).
"""

from a3c.run.callbacks import RunEvent
from a3c.run.config import A3CConfig
from a3c.run.presets import config_for
from a3c.run.record import A3CResult
from a3c.run.trainer import train
from a3c.use.agent import Policy, load
from a3c.use.saved import evaluate

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
