"""Reduced precision for any of the engine's apps: ``--amp {off,bf16,fp16}`` checked once
and applied as one ``torch.autocast`` context, with fp16's ``GradScaler``.

Only the forward pass runs under autocast; parameters, their gradients, the shared
optimizer's state and its steps stay fp32, so a lock-free step is the same whatever the
precision of the pass that made its gradient.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from dataclasses import dataclass

import torch

from hogwild.errors import UsageError

__all__ = ["AMP_DTYPES", "Precision", "check_amp", "native_bf16", "resolve_amp", "torch_has_amp"]

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def torch_has_amp() -> bool:
    """``torch.amp`` with its device-generic ``GradScaler`` (torch 2.3 on)."""
    return hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler")


def native_bf16() -> bool:
    """Whether this CPU has bf16 instructions (AVX512-BF16 or AMX): without them oneDNN
    emulates bf16, and it can be slower than fp32."""
    capabilities = getattr(torch.cpu, "get_capabilities", None)
    if capabilities is None:
        return False
    found = capabilities()
    return bool(found.get("avx512_bf16") or found.get("amx_bf16"))


def resolve_amp(amp: str) -> str:
    """``auto`` (for a process that computes on the CPU): bf16 where the CPU has bf16
    instructions, else off; any other value as it is."""
    if amp != "auto":
        return amp
    return "bf16" if torch_has_amp() and native_bf16() else "off"


def check_amp(amp: str, device_type: str, why_cpu: str = "this run trains on the CPU") -> None:
    """Refuse, as one line, an ``--amp`` that this torch or this device cannot run."""
    if amp in ("off", "auto"):
        return
    if not torch_has_amp():
        raise UsageError(
            f"--amp {amp} needs torch.amp.GradScaler (torch 2.3 or newer), "
            f"this is torch {torch.__version__}; use --amp off"
        )
    if amp == "fp16" and device_type != "cuda":
        raise UsageError(f"--amp fp16 runs on CUDA only, and {why_cpu}; use --amp bf16")
    if amp == "bf16" and device_type == "cuda" and not torch.cuda.is_bf16_supported():
        raise UsageError("--amp bf16: this GPU has no bf16 support; use --amp fp16")


class Precision:
    """How one process computes: fp32, or autocast to bf16 or fp16 (fp16 with its own
    ``GradScaler``, so that small gradients do not underflow)."""

    def __init__(self, amp: str = "off", device_type: str = "cpu") -> None:
        self.amp = amp
        self.device_type = device_type
        self.dtype = AMP_DTYPES.get(amp)
        self.scaler = torch.amp.GradScaler(device_type) if amp == "fp16" else None
        self._holder: torch.nn.Parameter | None = None

    def autocast(self) -> AbstractContextManager:
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        (loss if self.scaler is None else self.scaler.scale(loss)).backward()

    def unscale(self, grad: torch.Tensor) -> None:
        """fp16: divide a flat gradient (:func:`hogwild.flat.attach_flat_grad`) by the loss
        scale before it is clipped, noting whether it is finite for :meth:`update`; an
        optimizer of the engine's own steps on it then (the scaler cannot step one)."""
        if self.scaler is None:
            return
        if self._holder is None or self._holder.grad is not grad:
            self._holder = torch.nn.Parameter(grad.detach(), requires_grad=False)
            self._holder.grad = grad
        self.scaler.unscale_(_Holder([{"params": [self._holder]}]))  # type: ignore[arg-type]

    def update(self) -> None:
        """fp16: after :meth:`unscale` and the step (or its skip), grow or cut the scale."""
        if self.scaler is not None:
            self.scaler.update()

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """``optimizer.step()``; with a scaler, skipped on non-finite gradients."""
        if self.scaler is None:
            optimizer.step()
        else:
            self.scaler.step(optimizer)
            self.scaler.update()


@dataclass
class _Holder:
    """What ``GradScaler.unscale_`` reads of an optimizer: its parameter groups."""

    param_groups: list[dict]
