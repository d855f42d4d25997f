"""Your own code by name: ``module:callable`` references (factories of models, data, envs).

What a run is made of crosses process boundaries (forked workers, spawned ranks and
evaluators, ``--resume`` days later), so it travels as text that each process imports, as
RL-Zoo's ``env_wrapper`` and Gymnasium's ``module:Env-v0`` ids do, and ``config.json``
records exactly what ran.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from hogwild.errors import UsageError

__all__ = ["reference_to", "resolve"]


def resolve(ref: str, what: str) -> Callable[..., Any]:
    """The callable that ``"package.module:name"`` (or ``name.attr``) names; one-line errors."""
    module_name, sep, name = ref.partition(":") if isinstance(ref, str) else ("", "", "")
    if not (sep and module_name and name) or ":" in name:
        raise UsageError(f"{what} {ref!r} must be written module:callable, e.g. mypkg.envs:wrap")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise UsageError(f"cannot import module {module_name!r} of {what} {ref!r}: {e}") from e
    for part in name.split("."):
        if not hasattr(target, part):
            raise UsageError(f"module {module_name!r} has no {name!r} ({what} {ref!r})")
        target = getattr(target, part)
    if not callable(target):
        raise UsageError(f"{what} {ref!r} is a {type(target).__name__}, not a callable")
    return target


def reference_to(fn: Callable[..., Any] | str, what: str) -> str:
    """``"module:qualname"`` of a module-level callable, the text that :func:`resolve` reads
    back in every process; lambdas and nested functions cannot be imported, so refused."""
    module: str | None
    if isinstance(fn, str):
        module, _, qualname = fn.partition(":")
    else:
        module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
        if not module or not qualname or "<" in qualname:
            raise UsageError(
                f"{what} {fn!r} must be a module-level function or class (each process "
                "imports it by name); pass it, or write 'module:name'"
            )
    if module == "__main__":
        # Workers re-import the script, but a resume or a later load runs from
        # elsewhere, where __main__ is another program.
        raise UsageError(
            f"{what} {qualname!r} is defined in the script being run (__main__), which "
            "--resume, evaluation and loading could not import later: move it into "
            "a module of its own and import it from there"
        )
    return fn if isinstance(fn, str) else f"{module}:{qualname}"
