"""One contiguous buffer for all of a model's parameters (and one for their gradients).

Hogwild! updates are cheapest when the whole model is a single tensor: an optimizer
step, a gradient-norm clip or a parameter copy is then a handful of vector ops, not a
Python loop over layers. Parameters and gradients stay ordinary ``nn.Parameter``
views, so the model's forward, ``state_dict`` and autograd are untouched.
"""

from __future__ import annotations

import torch
from torch import nn


def flatten_parameters(module: nn.Module) -> torch.Tensor:
    """Re-home every parameter of ``module`` as a view into one new flat tensor."""
    params = list(module.parameters())
    if not params:
        raise ValueError("module has no parameters")
    dtypes = {p.dtype for p in params}
    if len(dtypes) != 1:
        raise ValueError(f"parameters must share one dtype, found {sorted(map(str, dtypes))}")
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    assign_views(params, flat, grad=False)
    return flat


def flatten_buffers(module: nn.Module) -> torch.Tensor:
    """Re-home every floating-point buffer of ``module`` (running statistics, say) in one tensor.

    Empty when the module has none. Parameters and buffers are kept apart on purpose: the
    optimizer steps the parameter vector, and must never touch statistics.
    """
    owners = [
        (m, name, b)
        for m in module.modules()
        for name, b in m._buffers.items()
        if b is not None and b.is_floating_point()
    ]
    if not owners:
        return torch.empty(0)
    if len({b.dtype for _, _, b in owners}) > 1:
        raise ValueError("floating-point buffers must share one dtype")
    flat = torch.cat([b.detach().reshape(-1) for _, _, b in owners])
    offset = 0
    for m, name, b in owners:
        m._buffers[name] = flat[offset : offset + b.numel()].view_as(b)
        offset += b.numel()
    return flat


def attach_flat_grad(module: nn.Module, flat: torch.Tensor) -> torch.Tensor:
    """Give every parameter a ``.grad`` that is a view into one zeroed flat tensor.

    Autograd accumulates into an existing ``.grad`` in place, so after ``backward()``
    the returned tensor holds the whole gradient. Zero it with ``grad.zero_()``; never
    call ``module.zero_grad()``, which would replace the views with ``None``.
    """
    grad = torch.zeros_like(flat)
    assign_views(list(module.parameters()), grad, grad=True)
    return grad


def assign_views(params: list[nn.Parameter], flat: torch.Tensor, grad: bool) -> None:
    """Make ``params`` (or, with ``grad``, their ``.grad``) consecutive views of ``flat``."""
    offset = 0
    for p in params:
        n = p.numel()
        view = flat[offset : offset + n].view_as(p)
        if grad:
            p.grad = view
        else:
            p.data = view
        offset += n
    if offset != flat.numel():
        raise ValueError(f"flat tensor has {flat.numel()} elements, parameters {offset}")


def clip_grad_norm_(grad: torch.Tensor, max_norm: float) -> float:
    """Scale a flat gradient in place to global norm ``max_norm`` at most; return its norm.

    ``torch.nn.utils.clip_grad_norm_`` for the one-tensor case: one norm, one multiply.
    A non-finite norm is returned and the gradient left alone (the caller skips it).
    """
    norm = float(grad.norm())
    if norm > max_norm and norm < float("inf"):
        grad.mul_(max_norm / (norm + 1e-6))
    return norm
