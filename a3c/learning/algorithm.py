"""What an algorithm is to the rest of the project, declared once: :class:`Algorithm`.

Each update rule's module declares one (:data:`a3c.learning.loss.A3C`,
:data:`a3c.learning.ppo.APPO`) and :data:`a3c.learning.algorithms.ALGORITHMS` lists them;
``--algo``'s choices and help, the preset sub-tables, the telemetry's figures, the
worker's defaults and the tuning space are all read from there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from torch import Tensor

from a3c.learning.dead_units import DeadUnits
from a3c.learning.figures import Figures
from a3c.learning.metrics import Metric, Tally
from a3c.learning.rollout import Rollout
from a3c.learning.schedules import Schedules
from a3c.learning.settings import UpdateSettings
from a3c.policy import ActorCritic
from hogwild.precision import Precision

__all__ = ["Algorithm", "Choice", "Learning", "LearnerSettings", "Range", "Steps"]


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


@dataclass(frozen=True)
class LearnerSettings:
    """What a learner is told (built from the run's settings by
    :func:`a3c.run.worker.learner_settings`)."""

    algo: str  # a name in ALGORITHMS
    update: UpdateSettings  # the loss's, its decaying settings at their start
    schedules: Schedules
    rollout_samples: int  # of each rollout: steps x envs
    max_grad_norm: float
    max_nonfinite: int  # rollouts in a row not learned from in full that fail the worker
    epochs: int = 1  # APPO: passes over each rollout
    minibatches: int = 1  # APPO: steps per pass
    recompute_advantages: bool = False  # APPO: fresh targets before each later epoch
    target_kl: float | None = None  # APPO: stop a rollout's epochs past KL_STOP x this
    amp: str = "off"  # "bf16" (or "auto" on a CPU with bf16 instructions), "fp16" (CUDA):
    #                   the passes that learn run under autocast


class Learning(Protocol):
    """What an algorithm's update takes from the learner it is made for
    (:class:`a3c.learning.learner.Learner`)."""

    settings: LearnerSettings
    model: ActorCritic
    local: Tensor  # the model's parameters, flat
    shared: Tensor  # the shared model's
    grad: Tensor  # the local gradient, flat
    precision: Precision
    dead: DeadUnits
    stats: Tally

    def step(self, loss: Tensor, lr: float, figures: list, held: bool = False) -> bool:
        """One lock-free step with this loss's gradient; whether it was finite."""
        ...


class Steps(Protocol):
    """An algorithm's update, made once per learner (it may keep state across rollouts)."""

    #: Rollouts whose gradients one step takes: a skipped step counts them all against
    #: --max-nonfinite.
    rollouts_per_step: int

    def __call__(self, rollout: Rollout, update: UpdateSettings, lr: float) -> bool | None:
        """Learn from ``rollout`` through :meth:`Learning.step`; whether every step was
        finite (None: held for the next rollouts, no step taken)."""
        ...


@dataclass(frozen=True)
class Algorithm:
    """One learning algorithm: its update and everything the run needs to know of it."""

    name: str  # --algo's value, and the preset sub-table's name
    summary: str  # --algo's help for it
    figures: type[Figures]  # what each step of its loss reports (logged as losses/<name>)
    steps: Callable[[Learning], Steps]  # its update, made for a learner
    records_behaviour: bool = False  # acting keeps the policy's log-probabilities and values
    normalize_advantage: bool = False  # --normalize-advantage unset
    normalized_over: str = "rollout"  # what its advantages are standardised over
    minibatched: bool = False  # splits a rollout into --minibatches (checked against it)
    decoupled: bool = False  # one worker learns, the others act (a3c.run.decoupled)
    tuning_space: Mapping[str, Choice | Range] = field(default_factory=dict)  # a3c.tune's
    defaults: Mapping[str, Any] = field(default_factory=dict)  # its settings that a preset,
    #                                  a config file or a flag may replace (a3c.run.presets)
    metrics: tuple[Metric, ...] = ()  # its own counts, beside its figures and the learner's
