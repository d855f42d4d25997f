"""The action spec: what the policy is told of an env's adapted (0-based, 1-D) action space,
one record per kind, and the plain dict that checkpoints keep of it.

:mod:`a3c.envs` describes a space with it and :mod:`a3c.policy` picks a distribution by it;
it lives outside both because neither imports the other (the envs stay free of torch, the
policy of gymnasium), and it imports neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from hogwild.errors import UsageError

__all__ = [
    "ActionSpec",
    "BoxActions",
    "DiscreteActions",
    "MultiBinaryActions",
    "MultiDiscreteActions",
    "action_spec_from_dict",
    "check_action_spec",
]


@dataclass(frozen=True)
class DiscreteActions:
    """``Discrete(n)``: one of ``0 .. n-1``."""

    n: int
    kind: ClassVar[str] = "discrete"

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "n": self.n}


@dataclass(frozen=True)
class MultiDiscreteActions:
    """``MultiDiscrete(nvec)``: part ``i`` is one of ``0 .. nvec[i]-1``."""

    nvec: tuple[int, ...]
    kind: ClassVar[str] = "multi_discrete"

    def __post_init__(self) -> None:
        object.__setattr__(self, "nvec", tuple(self.nvec))

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "nvec": list(self.nvec)}


@dataclass(frozen=True)
class MultiBinaryActions:
    """``MultiBinary(n)``: ``n`` independent 0/1 parts."""

    n: int
    kind: ClassVar[str] = "multi_binary"

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "n": self.n}


@dataclass(frozen=True)
class BoxActions:
    """A float ``Box`` of ``len(low)`` dimensions; bounds may be infinite."""

    low: tuple[float, ...]
    high: tuple[float, ...]
    kind: ClassVar[str] = "box"

    def __post_init__(self) -> None:
        object.__setattr__(self, "low", tuple(self.low))
        object.__setattr__(self, "high", tuple(self.high))

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "low": list(self.low), "high": list(self.high)}


ActionSpec = DiscreteActions | MultiDiscreteActions | MultiBinaryActions | BoxActions


def _positive_ints(xs: Any) -> bool:
    return (
        isinstance(xs, list)
        and len(xs) > 0
        and all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in xs)
    )


def _bounds(d: dict[str, Any]) -> bool:
    low, high = d.get("low"), d.get("high")
    return (
        isinstance(low, list)
        and isinstance(high, list)
        and 0 < len(low) == len(high)
        and all(isinstance(v, (int, float)) for v in low + high)
    )


def action_spec_from_dict(d: Any, error: type[Exception] = UsageError) -> ActionSpec:
    """The record a checkpoint's action dict describes; ``error`` in one line if malformed."""
    kind = d.get("type") if isinstance(d, dict) else None
    if kind == DiscreteActions.kind and _positive_ints([d.get("n")]):
        return DiscreteActions(d["n"])
    if kind == MultiBinaryActions.kind and _positive_ints([d.get("n")]):
        return MultiBinaryActions(d["n"])
    if kind == MultiDiscreteActions.kind and _positive_ints(d.get("nvec")):
        return MultiDiscreteActions(d["nvec"])
    if kind == BoxActions.kind and _bounds(d):
        return BoxActions(d["low"], d["high"])
    raise error(f"malformed action space description {d!r}")


def check_action_spec(spec: Any, error: type[Exception] = UsageError) -> None:
    """Raise ``error`` in one line unless ``spec`` is a well-formed record (one whose dict
    a checkpoint could hold)."""
    if not isinstance(spec, ActionSpec):
        raise error(f"malformed action space description {spec!r}")
    action_spec_from_dict(spec.to_dict(), error)
