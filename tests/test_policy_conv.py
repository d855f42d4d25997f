"""Conv encoders for image observations: shapes, input conventions, init, gradients."""

from __future__ import annotations

import math

import pytest
import torch

from a3c.actions import DiscreteActions
from a3c.policy import ActorCritic, ModelSpec
from a3c.policy.encoders import A3CConv, NatureConv, SmallConv, conv_encoder, frame_background
from hogwild.errors import UsageError


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


def screen(background: int) -> torch.Tensor:
    """Two 4-frame stacks of a flat ``background`` with a paddle, a ball and a row of
    bricks drawn on it, as Atari frames are: ``uint8 [2, 4, 84, 84]``."""
    frames = torch.full((2, 4, 84, 84), background, dtype=torch.uint8)
    frames[:, :, 30:46, 8:11] = 236  # a paddle
    frames[0, :, 40:42, 50:52] = 200  # the ball, where the stacks differ
    frames[1, :, 20:22, 60:62] = 200
    frames[:, :, 10:14, :] = 140  # bricks
    return frames


def test_the_background_is_a_frames_most_common_value():
    frames = screen(87)
    frames[1, 2] = 0  # one channel black
    assert frame_background(frames).flatten().tolist() == [87] * 6 + [0] + [87]
    assert frame_background(frames.float()).flatten().tolist() == [87] * 6 + [0] + [87]
    small = torch.zeros(3, 4, 10, 10, dtype=torch.uint8)
    small[:, :, :3] = 255  # a 10x10 grid: every pixel counted, 70 of them 0
    assert frame_background(small).flatten().tolist() == [0] * 12


@pytest.mark.parametrize("center", ["background", "mean"])
def test_centred_frames_make_a_flat_background_zero(center):
    """Centred, a frame and the same frame with every pixel of a channel raised alike give
    the same features; without centring they differ."""
    torch.manual_seed(0)
    frame = torch.randint(0, 200, (2, 4, 84, 84), dtype=torch.uint8)
    brighter = frame + 40
    centred, plain = A3CConv((4, 84, 84), center=center), A3CConv((4, 84, 84))
    plain.load_state_dict(centred.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(centred(frame), centred(brighter), atol=1e-5, rtol=1e-5)
        assert not torch.allclose(plain(frame), plain(brighter))


def test_the_background_is_taken_off_a_grey_screen_and_a_black_one_is_left_as_it_is():
    """Pong's grey field reads as the same game on black; Breakout's black screen is read
    as it is, where the mean would have lowered every pixel by the bricks' share."""
    torch.manual_seed(0)
    centred = A3CConv((4, 84, 84), center="background")
    plain, by_mean = A3CConv((4, 84, 84)), A3CConv((4, 84, 84), center="mean")
    plain.load_state_dict(centred.state_dict())
    by_mean.load_state_dict(centred.state_dict())
    grey, black = screen(87), screen(0)
    objects_on_black = grey - 87  # every drawn value is above the grey: none wraps
    with torch.no_grad():
        torch.testing.assert_close(centred(black), plain(black))
        torch.testing.assert_close(centred(grey), plain(objects_on_black), atol=1e-5, rtol=1e-5)
        assert not torch.allclose(by_mean(black), plain(black), atol=1e-3)


def test_a_centring_policy_keeps_it_in_its_spec():
    spec = ModelSpec((4, 84, 84), DiscreteActions(6), obs_dtype="uint8", center_frames="background")
    assert ModelSpec.from_dict(spec.to_dict()) == spec
    assert spec.build().encoder.center == "background"
    # Checkpoints of before 2026-12-04 say true for the frame's mean, false for none.
    for saved, center in ((True, "mean"), (False, "none")):
        old = ModelSpec.from_dict({**spec.to_dict(), "center_frames": saved})
        assert old.center_frames == center and old.build().encoder.center == center
    with pytest.raises(UsageError, match="center_frames must be one of none, mean, background"):
        ModelSpec.from_dict({**spec.to_dict(), "center_frames": "median"})
