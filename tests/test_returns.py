"""a3c.learning.returns: value_fit's explained variance and flat-values flag, on a real
rollout through a3c_loss and on values made by hand."""

from __future__ import annotations

import pytest
import torch
from policy_helpers import mlp
from torch import nn

from a3c.envs import make_vector_env
from a3c.learning.collect import Collector
from a3c.learning.loss import a3c_loss
from a3c.learning.returns import value_fit
from a3c.learning.settings import UpdateSettings

pytestmark = pytest.mark.usefixtures("hang_guard")


@pytest.mark.parametrize("separate", [False, True])
def test_values_are_flat_only_when_the_net_gives_every_observation_one_value(separate):
    """A real CartPole rollout: a fresh net's values vary with the observation; with its
    first layers' weights zeroed (what a dead ReLU layer does: no input gets through)
    they do not, while the returns still do; constant returns are nothing to explain."""
    envs = make_vector_env("CartPole-v1", 4, seed=0)
    torch.manual_seed(0)
    model = mlp(4, 2, hidden=(16, 16), separate=separate)
    rollout = Collector(envs, model, 64, seed=0).collect()
    envs.close()
    fit = a3c_loss(model, rollout, UpdateSettings())[1]
    assert float(fit.flat_values) == 0.0 and float(fit.explained_variance) != 0.0

    with torch.no_grad():
        for layer in model.modules():
            if isinstance(layer, nn.Linear) and layer.in_features == 4:
                layer.weight.zero_()
    fit = a3c_loss(model, rollout, UpdateSettings())[1]
    assert float(fit.flat_values) == 1.0 and abs(float(fit.explained_variance)) < 1e-6

    def fit_of(pred: torch.Tensor, target: torch.Tensor) -> tuple[float, float]:
        fit = value_fit(pred, target)
        return float(fit.explained_variance), float(fit.flat_values)

    values = torch.linspace(0.0, 1.0, 64)
    assert fit_of(values, values) == (1.0, 0.0)
    assert fit_of(torch.full((64,), 0.3), torch.full((64,), 2.0)) == (0.0, 0.0)
    assert fit_of(torch.full((64,), 0.3), values) == (0.0, 1.0)
