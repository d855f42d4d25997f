"""Figures travel by name: a loss's record, the learner's sums and the telemetry's slots
and TensorBoard tags agree on every figure without a list kept in step anywhere."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
from learner_helpers import cartpole_learner
from torch import Tensor

import a3c.run.telemetry as telemetry
from a3c.learning.algorithms import ALGORITHMS
from a3c.learning.loss import A3C, A3CFigures, a3c_loss
from a3c.run.config import A3CConfig

#: What users' dashboards read, per algorithm.
COMMON_TAGS = {
    "losses/policy_loss",
    "losses/value_loss",
    "losses/entropy",
    "losses/explained_variance",
    "losses/grad_norm",
    "charts/learning_rate",
    "charts/skipped_updates",
    "charts/dead_units",
    "charts/policy_lag",
    "charts/policy_lag_max",
}
TAGS = {
    "a3c": COMMON_TAGS,
    "appo": COMMON_TAGS | {"losses/approx_kl", "losses/clip_fraction", "charts/kl_stops"},
}


@pytest.mark.parametrize("algo", sorted(TAGS))
def test_each_algorithm_logs_the_tags_dashboards_read(algo):
    logged = {
        m.tag
        for m in telemetry.METRICS
        if m.tag is not None and (m.algos is None or algo in m.algos)
    }
    assert logged == TAGS[algo]


def test_every_loss_figure_and_algorithm_metric_has_a_telemetry_slot():
    for algo in ALGORITHMS.values():
        assert set(algo.figures.names()) <= set(telemetry.STAT)
        assert {m.name for m in algo.metrics} <= set(telemetry.STAT)


def test_a_new_loss_figure_is_logged_with_nothing_but_its_field(monkeypatch):
    @dataclass(frozen=True)
    class More(A3CFigures):
        max_ratio: Tensor

    monkeypatch.setitem(ALGORITHMS, "a3c", replace(A3C, figures=More))
    metrics = {m.name: m for m in telemetry.algorithm_metrics()}
    assert metrics["max_ratio"].tag == "losses/max_ratio"
    assert metrics["max_ratio"].algos == ("a3c",)
    assert metrics["flat_values"].tag is None  # warned of, never logged


def test_a_learner_sums_each_figure_into_the_slot_of_its_name():
    cfg = A3CConfig(n_steps=8, envs_per_worker=2, normalize_reward=False)
    learner, rollout, _ = cartpole_learner(cfg)
    _, figures = a3c_loss(learner.model, rollout, learner.settings.update)
    learner.learn(rollout, steps=0)
    assert learner.stats["updates"] == 1
    for name in A3CFigures.names():
        assert learner.stats[name] == float(getattr(figures, name)), name
