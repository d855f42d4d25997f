"""PPO with acting and learning apart: :data:`PPO`, the decoupled design of Sample Factory
and IMPALA on the engine.

Hogwild's workers each learn on weights the others move meanwhile; past 2 workers on
Atari those stale gradients cost the value net (docs/benchmarks.md). Here one worker
learns and the others only act: every gradient is taken on the weights it updates, and
what is stale is the data, by the updates made since its actor copied the weights. The
ratio against the actor's recorded log-probabilities corrects for that lag and the clip
bounds it, as APPO's does for its own; rollouts more than ``max_policy_lag`` updates old
are dropped (Sample Factory's ``max_policy_lag``). The update is APPO's
(:class:`a3c.learning.ppo.APPOSteps`); :mod:`a3c.run.decoupled` runs the two roles.
"""

from __future__ import annotations

from a3c.learning.algorithm import Algorithm
from a3c.learning.metrics import SUM, Metric
from a3c.learning.ppo import APPO, APPOSteps, PPOFigures

__all__ = ["PPO"]

PPO = Algorithm(
    name="ppo",
    summary="PPO with decoupled acting: one worker learns (on --learner-device), the "
    "others act on its published weights; the policy lag is logged and capped",
    figures=PPOFigures,
    steps=APPOSteps,
    records_behaviour=True,
    normalize_advantage=True,
    normalized_over="minibatch",
    minibatched=True,
    decoupled=True,
    tuning_space=APPO.tuning_space,
    defaults=APPO.defaults,
    metrics=(
        Metric("kl_stops", "charts/kl_stops", SUM),
        Metric("stale_rollouts", "charts/stale_rollouts", SUM),
        Metric("rollouts_in_flight", "charts/rollouts_in_flight"),
    ),
)
