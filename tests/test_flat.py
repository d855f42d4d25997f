"""hogwild.flat's flatten_buffers: a model's float buffers become views of one tensor,
in both directions; integer buffers are left out."""

from __future__ import annotations

import pytest
import torch
from rollout_helpers import _model
from torch import nn

from hogwild.flat import flatten_buffers

pytestmark = pytest.mark.usefixtures("hang_guard")


def test_flatten_buffers_makes_them_views_of_one_tensor():
    model = _model(normalize_obs=True)
    model.set_obs_stats(torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0]))
    flat = flatten_buffers(model)
    assert flat.tolist() == [1.0, 2.0, 3.0, 4.0]  # values kept, in registration order
    assert model.obs_mean.data_ptr() == flat.data_ptr()
    flat.copy_(torch.tensor([5.0, 6.0, 7.0, 8.0]))
    assert model.obs_mean.tolist() == [5.0, 6.0] and model.obs_std.tolist() == [7.0, 8.0]
    assert model.state_dict()["obs_std"].tolist() == [7.0, 8.0]
    model.set_obs_stats(torch.zeros(2), torch.ones(2))  # and the other way round
    assert flat.tolist() == [0.0, 0.0, 1.0, 1.0]
    other = _model(normalize_obs=True)
    other.load_state_dict({**model.state_dict(), "obs_mean": torch.tensor([9.0, 9.0])})
    flat_other = flatten_buffers(other)
    flat_other.copy_(flat)
    assert other.obs_mean.tolist() == [0.0, 0.0]


def test_flatten_buffers_skips_integer_buffers_and_may_be_empty():
    assert flatten_buffers(_model()).numel() == 0
    assert flatten_buffers(nn.Linear(3, 2)).shape == (0,)
    bn = nn.BatchNorm1d(3)  # running_mean, running_var (float), num_batches_tracked (int)
    flat = flatten_buffers(bn)
    assert flat.numel() == 6 and bn.num_batches_tracked.dtype == torch.int64
    bn.train()
    bn(torch.randn(8, 3) + 5.0)  # batch norm updates its statistics in place: in flat
    assert flat[:3].min() > 0.1 and int(bn.num_batches_tracked) == 1
    torch.testing.assert_close(flat[:3], bn.running_mean, rtol=0, atol=0)
