"""The algorithms a run may take (``--algo``), by name: the one list of them.

A new one is a module that declares its :class:`~a3c.learning.algorithm.Algorithm` (its
update, figures and defaults), one line here, and its preset sub-tables where it has any.
"""

from __future__ import annotations

from a3c.learning.algorithm import Algorithm
from a3c.learning.decoupled import PPO
from a3c.learning.loss import A3C
from a3c.learning.ppo import APPO

__all__ = ["ALGORITHMS", "Algorithm"]

ALGORITHMS: dict[str, Algorithm] = {a.name: a for a in (A3C, APPO, PPO)}
