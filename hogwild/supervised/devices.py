"""Where a supervised run computes (``--device``), decided in one place for both strategies:
ddp puts one GPU under each rank; hogwild shares one model on one device, the CPU unless
``cuda`` is asked for (its point is many CPU cores; on one GPU the kernels queue anyway)."""

from __future__ import annotations

import torch

from hogwild.errors import UsageError
from hogwild.supervised.config import FitConfig

__all__ = ["ddp_on_cuda", "hogwild_device"]


def ddp_on_cuda(cfg: FitConfig) -> bool:
    """NCCL and one GPU per rank: asked for with ``cuda``, or ``auto`` with enough GPUs;
    otherwise gloo on the CPU."""
    if cfg.device == "cpu":
        return False
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if cfg.device == "cuda" and gpus < cfg.workers:
        raise UsageError(
            f"--device cuda with --strategy ddp puts one GPU under each rank: "
            f"{cfg.workers} rank(s), {gpus} GPU(s) here"
        )
    return gpus >= cfg.workers


def hogwild_device(cfg: FitConfig) -> torch.device:
    """The device of the one model every Hogwild! worker updates."""
    if cfg.device != "cuda":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is available here; use --device cpu")
    return torch.device("cuda")  # the current one: CUDA_VISIBLE_DEVICES chooses
