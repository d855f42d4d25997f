"""The dead-layer figure: the share of the first conv layer's units never positive."""

from __future__ import annotations

import torch

from a3c.actions import DiscreteActions
from a3c.learning.dead_units import DeadUnits
from a3c.policy import ModelSpec

FRAMES = (4, 84, 84)


def conv_model():
    torch.manual_seed(0)
    return ModelSpec(FRAMES, DiscreteActions(6), conv="a3c", obs_dtype="uint8").build()


def frames(n: int = 32) -> torch.Tensor:
    return torch.randint(0, 256, (n, *FRAMES), dtype=torch.uint8)


def test_a_fresh_net_has_no_dead_units_and_a_killed_one_is_all_dead():
    model = conv_model()
    dead = DeadUnits(model.first_conv)
    with dead.watch():
        model(frames())
    assert dead.share == 0.0
    with torch.no_grad():
        model.first_conv.bias[:4] = -1e3  # 4 of 16 units can never be positive
    with dead.watch():
        model(frames())
    assert dead.share == 4 / 16


def test_nothing_is_read_outside_a_watch():
    model = conv_model()
    dead = DeadUnits(model.first_conv)
    with torch.no_grad():
        model.first_conv.bias.fill_(-1e3)
    model(frames())
    assert dead.share == 0.0
    assert not model.first_conv._forward_hooks  # the hook went with the watch


def test_an_mlp_has_no_first_conv_and_its_watch_reads_nothing():
    model = ModelSpec((4,), DiscreteActions(2)).build()
    dead = DeadUnits(model.first_conv)
    with dead.watch():
        model(torch.zeros(3, 4))
    assert model.first_conv is None and dead.share == 0.0
