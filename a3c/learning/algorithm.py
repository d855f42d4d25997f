"""What an algorithm is to the rest of the project, declared once: :class:`Algorithm`.

Each update rule's module declares one (:data:`a3c.learning.loss.A3C`,
:data:`a3c.learning.ppo.APPO`) and :data:`a3c.learning.algorithms.ALGORITHMS` lists them;
``--algo``'s choices and help, the preset sub-tables, the telemetry's figures, the
worker's defaults and the tuning space are all read from there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from a3c.learning.figures import Figures
from a3c.learning.metrics import Metric
from a3c.learning.rollout import Rollout
from a3c.learning.settings import UpdateSettings

if TYPE_CHECKING:
    from a3c.learning.learner import Learner

__all__ = ["Algorithm", "Choice", "Range", "Steps"]


@dataclass(frozen=True)
class Choice:
    """A tuning dimension: one of ``values``."""

    values: tuple[Any, ...]


@dataclass(frozen=True)
class Range:
    """A tuning dimension: a number in ``[low, high]``."""

    low: float
    high: float
    log: bool = False
    integer: bool = False


class Steps(Protocol):
    """An algorithm's update, made once per learner (it may keep state across rollouts)."""

    #: Rollouts whose gradients one step takes: a skipped step counts them all against
    #: --max-nonfinite.
    rollouts_per_step: int

    def __call__(self, rollout: Rollout, update: UpdateSettings, lr: float) -> bool | None:
        """Learn from ``rollout`` through :meth:`Learner.step`; whether every step was
        finite (None: held for the next rollouts, no step taken)."""
        ...


@dataclass(frozen=True)
class Algorithm:
    """One learning algorithm: its update and everything the run needs to know of it."""

    name: str  # --algo's value, and the preset sub-table's name
    summary: str  # --algo's help for it
    figures: type[Figures]  # what each step of its loss reports (logged as losses/<name>)
    steps: Callable[[Learner], Steps]  # its update, made for a learner
    records_behaviour: bool = False  # acting keeps the policy's log-probabilities and values
    normalize_advantage: bool = False  # --normalize-advantage unset
    normalized_over: str = "rollout"  # what its advantages are standardised over
    minibatched: bool = False  # splits a rollout into --minibatches (checked against it)
    decoupled: bool = False  # one worker learns, the others act (a3c.run.decoupled)
    tuning_space: Mapping[str, Choice | Range] = field(default_factory=dict)  # a3c.tune's
    metrics: tuple[Metric, ...] = ()  # its own counts, beside its figures and the learner's
