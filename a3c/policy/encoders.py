"""Convolutional encoders for image observations: ``[B, C, H, W]`` images -> ``[B, F]`` features.

Inputs are pixel intensities 0..255 (Atari frames; MinAtar grids as 0/255, see
:mod:`a3c.envs.minatar`), ``uint8`` or any float dtype: ``forward`` casts to float and
multiplies by ``scale`` (1/255 by default; pass ``scale=1.0`` for inputs already in
[0, 1]), so ``uint8`` and float copies of the same image give the same features. With
``channels_last=True`` the input is ``[B, H, W, C]`` and is permuted inside. With
``center="background"`` each channel's background, its most common pixel value, is then
subtracted, so that a flat background is 0 whatever its colour (``"mean"``, the frame's
mean, is kept for checkpoints that used it).

* :class:`A3CConv` (Mnih et al., 2016, after the 2013 DQN): conv 16 8x8/4, conv 32
  4x4/2, FC 256; 676 k parameters on 4x84x84 (664 k of them in the FC).
* :class:`NatureConv` (Mnih et al., 2015): conv 32 8x8/4, 64 4x4/2, 64 3x3/1, FC 512;
  1.68 M parameters on 4x84x84.
* :class:`SmallConv` (MinAtar, Young & Tian, 2019): conv 16 3x3/1, FC 128, for small
  images (MinAtar's 10x10), which the strided nets would shrink to nothing.

Every layer is followed by a ReLU, the output (``out_features`` wide) included.
Initialisation as CleanRL: orthogonal weights with gain sqrt(2), zero biases.
:func:`conv_encoder` picks one by name, ``"auto"`` by image size.

What each costs per batch: ``python benchmarks/costs.py`` (docs/benchmarks.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

__all__ = [
    "CENTERS",
    "ENCODERS",
    "A3CConv",
    "ConvEncoder",
    "NatureConv",
    "SmallConv",
    "conv_encoder",
    "frame_background",
]

#: Images smaller than this (height or width) get :class:`SmallConv` from ``"auto"``.
SMALL_IMAGE = 36
#: What a frame is centred on before the conv net: nothing, its mean, its background.
CENTERS = ("none", "mean", "background")
#: The background is the most common value of a grid of about this many pixels a side.
BACKGROUND_GRID = 21
PIXEL_VALUES = 256


def frame_background(frames: Tensor) -> Tensor:
    """Each channel's most common pixel value, ``[B, C, H, W]`` (0..255) -> ``[B, C, 1, 1]``,
    counted on every k-th row and column (k = size // 21: 441 of an 84x84 frame's pixels)."""
    b, c, h, w = frames.shape
    k = max(1, min(h, w) // BACKGROUND_GRID)
    cells = frames[:, :, ::k, ::k].reshape(b * c, -1)
    if cells.is_floating_point():
        cells = cells.round().clamp(0, PIXEL_VALUES - 1)
    cells = cells.long()
    counts = torch.zeros(b * c, PIXEL_VALUES, dtype=torch.float32, device=frames.device)
    counts.scatter_add_(1, cells, torch.ones_like(cells, dtype=torch.float32))
    return counts.argmax(1).view(b, c, 1, 1)


class ConvEncoder(nn.Module):
    """Conv layers + one FC layer, ReLU after each; see the module docstring.

    ``obs_shape`` is one observation's shape, ``(C, H, W)``, or ``(H, W, C)`` with
    ``channels_last=True``. ``convs`` lists ``(out_channels, kernel, stride)``.
    """

    def __init__(
        self,
        obs_shape: Sequence[int],
        convs: Sequence[tuple[int, int, int]],
        hidden: int,
        *,
        channels_last: bool = False,
        scale: float = 1.0 / 255.0,
        center: str = "none",
    ) -> None:
        super().__init__()
        if len(obs_shape) != 3 or min(obs_shape) < 1:
            raise ValueError(f"expected an image shape (C, H, W), got {tuple(obs_shape)}")
        c, h, w = (obs_shape[2], obs_shape[0], obs_shape[1]) if channels_last else obs_shape
        self.obs_shape = tuple(int(d) for d in obs_shape)
        self.channels_last = channels_last
        self.scale = float(scale)
        if center not in CENTERS:
            raise ValueError(f"center must be one of {', '.join(CENTERS)}, got {center!r}")
        self.center = center

        layers: list[nn.Module] = []
        oh, ow = h, w
        for out_ch, kernel, stride in convs:
            oh, ow = (oh - kernel) // stride + 1, (ow - kernel) // stride + 1
            if oh < 1 or ow < 1:
                raise ValueError(
                    f"{type(self).__name__} needs larger images than {h}x{w} "
                    f"(its convolutions leave nothing); use SmallConv for small images"
                )
            layers += [nn.Conv2d(c, out_ch, kernel, stride), nn.ReLU()]
            c = out_ch
        self.conv = nn.Sequential(*layers)
        self.fc = nn.Linear(c * oh * ow, hidden)
        self.out_features = hidden
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Orthogonal weights (gain sqrt(2)), zero biases."""
        for m in self.modules():
            if isinstance(m, nn.Conv2d | nn.Linear):
                nn.init.orthogonal_(m.weight, gain=math.sqrt(2.0))
                if m.bias is not None:  # always, as built here
                    nn.init.zeros_(m.bias)

    def forward(self, obs: Tensor) -> Tensor:
        """``[B, C, H, W]`` (``[B, H, W, C]`` if ``channels_last``) -> ``[B, out_features]``."""
        if obs.dim() != 4:
            raise ValueError(f"expected a batch of images [B, C, H, W], got shape {obs.shape}")
        if self.channels_last:
            obs = obs.permute(0, 3, 1, 2)
        if torch.is_grad_enabled() and obs.device.type == "cpu":
            # Learning in NHWC memory: oneDNN's CPU convolution backward is faster in it
            # (A3CConv, batch 256: 75-110 ms against 118-155; benchmarks/costs.py), Pong
            # steps 12-21% faster with A3C or APPO. Acting (no grad, batch 8) gains
            # nothing, so it stays NCHW. docs/benchmarks.md, "Per-step costs".
            obs = obs.contiguous(memory_format=torch.channels_last)
        x = obs.to(self.fc.weight.dtype) * self.scale
        # On a flat background that is not 0 (Pong's grey) Adam moved a first-layer filter's
        # weights all one way, by its fan-in x the rate at once, and the layer's units died
        # (docs/tuning.md, "Dead starts"). The mean would make other games' black
        # backgrounds flat and not 0 (Breakout's -0.16, RoadRunner's -0.33).
        if self.center == "background":
            x = x - frame_background(obs).to(x.dtype) * self.scale
        elif self.center == "mean":
            x = x - x.mean((2, 3), keepdim=True)
        x = self.conv(x)
        return torch.relu(self.fc(x.flatten(1)))


class A3CConv(ConvEncoder):
    """The A3C paper's encoder: conv 16 8x8/4, conv 32 4x4/2, FC 256."""

    def __init__(self, obs_shape: Sequence[int], **kwargs) -> None:
        super().__init__(obs_shape, [(16, 8, 4), (32, 4, 2)], 256, **kwargs)


class NatureConv(ConvEncoder):
    """Nature DQN's encoder: conv 32 8x8/4, 64 4x4/2, 64 3x3/1, FC 512."""

    def __init__(self, obs_shape: Sequence[int], **kwargs) -> None:
        super().__init__(obs_shape, [(32, 8, 4), (64, 4, 2), (64, 3, 1)], 512, **kwargs)


class SmallConv(ConvEncoder):
    """MinAtar's encoder for small images: conv 16 3x3/1, FC 128."""

    def __init__(self, obs_shape: Sequence[int], **kwargs) -> None:
        super().__init__(obs_shape, [(16, 3, 1)], 128, **kwargs)


ENCODERS: dict[str, type[ConvEncoder]] = {
    "a3c": A3CConv,
    "nature": NatureConv,
    "small": SmallConv,
}


def conv_encoder(
    name: str, obs_shape: Sequence[int], *, channels_last: bool = False, **kwargs
) -> ConvEncoder:
    """Build the encoder ``name`` (``"a3c"``, ``"nature"``, ``"small"`` or ``"auto"``).

    ``"auto"``: :class:`SmallConv` when the image's height or width is below
    ``SMALL_IMAGE`` (36), else :class:`A3CConv`. ``kwargs`` (``scale``) go to the class.
    """
    if len(obs_shape) != 3:
        raise ValueError(f"expected an image shape, got {tuple(obs_shape)}")
    if name == "auto":
        h, w = obs_shape[:2] if channels_last else obs_shape[1:]
        name = "small" if min(h, w) < SMALL_IMAGE else "a3c"
    try:
        cls = ENCODERS[name]
    except KeyError:
        raise ValueError(
            f"unknown conv encoder {name!r}; choose from {', '.join([*ENCODERS, 'auto'])}"
        ) from None
    return cls(obs_shape, channels_last=channels_last, **kwargs)
