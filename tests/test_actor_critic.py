"""a3c.policy's ActorCritic: pi() and value() agree with forward(), separate nets share
no layer, and the observation statistics are buffers that travel with the state dict and
stay out of the parameters."""

from __future__ import annotations

import pytest
import torch
from policy_helpers import mlp
from rollout_helpers import _model

from a3c.policy import OBS_CLIP
from hogwild.flat import flatten_parameters

pytestmark = pytest.mark.usefixtures("hang_guard")


@pytest.mark.parametrize("separate", [False, True])
def test_logits_and_value_agree_with_forward(separate):
    model = _model(separate=separate)
    obs = torch.randn(5, 2)
    logits, value = model(obs)
    assert logits.shape == (5, 2) and value.shape == (5,)
    torch.testing.assert_close(model.pi(obs), logits, rtol=0, atol=0)
    torch.testing.assert_close(model.value(obs), value, rtol=0, atol=0)
    names = {n for n, _ in model.named_parameters()}
    assert any(n.startswith("value_trunk") for n in names) == separate


def test_separate_nets_share_no_layer():
    model = _model(separate=True)
    obs = torch.randn(5, 2)
    logits, value = model(obs)
    assert not torch.equal(model.trunk[0].weight, model.value_trunk[0].weight)
    with torch.no_grad():
        model.trunk[0].weight.add_(1.0)
    torch.testing.assert_close(model.value(obs), value, rtol=0, atol=0)
    assert not torch.allclose(model.pi(obs), logits)
    with torch.no_grad():
        model.value_trunk[0].weight.add_(1.0)
    assert not torch.allclose(model.value(obs), value)


def test_observation_statistics_are_buffers_not_parameters():
    model = _model(separate=True, normalize_obs=True)
    params = dict(model.named_parameters())
    assert "obs_mean" not in params and "obs_std" not in params
    assert {n for n, _ in model.named_buffers()} == {"obs_mean", "obs_std"}
    mean, std = torch.tensor([100.0, -3.0]), torch.tensor([2.0, 0.01])
    model.set_obs_stats(mean, std)

    clone = mlp(2, 2, hidden=(4,), separate=True, normalize_obs=True)
    clone.load_state_dict(model.state_dict())  # strict: the buffers travel with it
    assert torch.equal(clone.obs_mean, mean) and torch.equal(clone.obs_std, std)
    obs = torch.tensor([[102.0, -3.0], [90.0, 5.0]])
    for a, b in zip(clone(obs), model(obs), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)

    # The statistics act: the same as a plain model fed (obs - mean) / std, clipped.
    plain = mlp(2, 2, hidden=(4,), separate=True)
    plain.load_state_dict(model.state_dict(), strict=False)
    normed = ((obs - mean) / std).clamp(-OBS_CLIP, OBS_CLIP)
    assert normed[1].abs().max() == OBS_CLIP
    for a, b in zip(plain(normed), model(obs), strict=True):
        torch.testing.assert_close(a, b)
    # Not part of the flat parameter vector the optimizer steps.
    assert flatten_parameters(model).numel() == sum(p.numel() for p in params.values())
