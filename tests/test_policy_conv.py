"""Conv encoders for image observations: shapes, input conventions, init, gradients."""

from __future__ import annotations

import math

import pytest
import torch

from a3c.actions import DiscreteActions
from a3c.policy import ActorCritic, ModelSpec
from a3c.policy.encoders import A3CConv, NatureConv, SmallConv, conv_encoder


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread, as in the workers. On the busy 2-core dev machine, 2 threads made
    orthogonal_'s QR of A3CConv's 2592x256 FC weight take 3.5 s instead of 15 ms."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize(
    ("cls", "shape", "out"),
    [
        (A3CConv, (4, 84, 84), 256),
        (NatureConv, (4, 84, 84), 512),
        (A3CConv, (4, 42, 42), 256),
        (SmallConv, (4, 10, 10), 128),
        (SmallConv, (10, 10, 10), 128),
    ],
)
def test_output_shapes(cls, shape, out):
    net = cls(shape)
    x = torch.randint(0, 256, (3, *shape), dtype=torch.uint8)
    y = net(x)
    assert net.out_features == out
    assert y.shape == (3, out) and y.dtype == torch.float32
    assert (y >= 0).all()  # ReLU output


def test_auto_picks_by_image_size():
    assert type(conv_encoder("auto", (4, 84, 84))) is A3CConv
    assert type(conv_encoder("auto", (4, 10, 10))) is SmallConv
    assert type(conv_encoder("auto", (10, 10, 7), channels_last=True)) is SmallConv
    assert type(conv_encoder("nature", (4, 84, 84))) is NatureConv
    with pytest.raises(ValueError, match="unknown conv encoder"):
        conv_encoder("resnet", (4, 84, 84))
    with pytest.raises(ValueError, match="larger images"):
        conv_encoder("a3c", (4, 10, 10))


def test_uint8_and_float_give_the_same_features():
    torch.manual_seed(0)
    net = A3CConv((4, 84, 84))
    x = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    torch.testing.assert_close(net(x), net(x.float()))
    unscaled = A3CConv((4, 84, 84), scale=1.0)
    unscaled.load_state_dict(net.state_dict())
    torch.testing.assert_close(unscaled(x.float() / 255), net(x))


def test_channels_last_equals_channels_first():
    torch.manual_seed(0)
    first = SmallConv((4, 10, 10))
    last = SmallConv((10, 10, 4), channels_last=True)
    last.load_state_dict(first.state_dict())
    x = torch.randint(0, 2, (5, 10, 10, 4), dtype=torch.uint8) * 255
    torch.testing.assert_close(last(x), first(x.permute(0, 3, 1, 2)))


@pytest.mark.parametrize("cls", [A3CConv, NatureConv])
def test_learning_in_nhwc_memory_changes_nothing(cls):
    """With grad on, ``forward`` runs in NHWC memory (faster backward on CPU): the features
    and the gradients are those of the plain NCHW layout, and acting's are the same too."""
    torch.manual_seed(0)
    net = cls((4, 84, 84))
    x = torch.randint(0, 256, (16, 4, 84, 84), dtype=torch.uint8)

    def nchw(obs: torch.Tensor) -> torch.Tensor:
        h = net.conv(obs.float().contiguous() * net.scale)
        return torch.relu(net.fc(h.flatten(1)))

    def grads(features: torch.Tensor) -> list[torch.Tensor]:
        return torch.autograd.grad(features.square().mean(), list(net.parameters()))

    learned = net(x)
    torch.testing.assert_close(learned, nchw(x), rtol=1e-4, atol=1e-5)
    for got, want in zip(grads(net(x)), grads(nchw(x)), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-6)
    with torch.no_grad():
        torch.testing.assert_close(net(x), learned.detach(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("shape", "channel_last_memory"),
    [((4, 84, 84), True), ((4, 10, 10), True), ((84, 84, 3), False), ((8,), False)],
)
def test_rollout_buffers_are_laid_out_as_the_net_learns(shape, channel_last_memory):
    """A rollout of (C, H, W) frames is kept channel-last in memory: the minibatches that
    learning gathers from it are already in the conv net's NHWC learning layout, with the
    same values. HWC images are so already, and vectors have no channels."""
    image = len(shape) == 3
    spec = ModelSpec(shape, DiscreteActions(3), obs_dtype="uint8" if image else "float32")
    buffer = ActorCritic(spec).empty_obs(5, 2)
    assert buffer.shape == (5, 2, *shape)
    assert buffer.dtype == (torch.uint8 if image else torch.float32)
    values = torch.randint(0, 256, buffer.shape).to(buffer.dtype)
    buffer.copy_(values)
    batch = buffer.flatten(0, 1)[torch.tensor([7, 0, 3])]
    assert torch.equal(batch, values.flatten(0, 1)[torch.tensor([7, 0, 3])])
    if image:
        assert batch.is_contiguous(memory_format=torch.channels_last) == channel_last_memory
        assert batch.is_contiguous() == (not channel_last_memory)


def test_orthogonal_init_and_zero_biases():
    net = NatureConv((4, 84, 84))
    for layer in [*net.conv, net.fc]:
        if not hasattr(layer, "weight"):
            continue
        w = layer.weight.detach().flatten(1)
        rows, cols = w.shape
        gram = w @ w.T if rows <= cols else w.T @ w
        torch.testing.assert_close(gram, 2.0 * torch.eye(min(rows, cols)), atol=1e-4, rtol=0)
        assert not layer.bias.any()
    assert math.isclose(net.scale, 1 / 255)


@pytest.mark.parametrize("shape", [(4, 84, 84), (4, 10, 10)])
def test_gradients_reach_every_parameter(shape):
    torch.manual_seed(0)
    net = conv_encoder("auto", shape)
    head = torch.nn.Linear(net.out_features, 6)
    x = torch.randint(0, 256, (8, *shape), dtype=torch.uint8)
    head(net(x)).logsumexp(-1).mean().backward()
    for name, p in net.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_rejects_unbatched_input():
    with pytest.raises(ValueError, match="batch"):
        SmallConv((4, 10, 10))(torch.zeros(4, 10, 10, dtype=torch.uint8))


def test_centred_frames_make_a_flat_background_zero():
    """With ``center``, a frame and the same frame on a brighter background (every pixel of
    a channel raised alike) give the same features; without it they differ."""
    torch.manual_seed(0)
    frame = torch.randint(0, 200, (2, 4, 84, 84), dtype=torch.uint8)
    brighter = frame + 40
    centred, plain = A3CConv((4, 84, 84), center=True), A3CConv((4, 84, 84))
    plain.load_state_dict(centred.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(centred(frame), centred(brighter), atol=1e-5, rtol=1e-5)
        assert not torch.allclose(plain(frame), plain(brighter))


def test_a_centring_policy_keeps_it_in_its_spec():
    spec = ModelSpec((4, 84, 84), DiscreteActions(6), obs_dtype="uint8", center_frames=True)
    assert ModelSpec.from_dict(spec.to_dict()) == spec
    assert spec.build().encoder.center
    assert (
        not ModelSpec.from_dict({**spec.to_dict(), "center_frames": False}).build().encoder.center
    )
