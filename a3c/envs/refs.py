"""Your own code by name: ``module:callable`` references to env factories and wrappers.

A run's env and wrappers cross process boundaries (forked workers, the spawned
evaluator, ``--resume``, ``a3c.evaluate`` days later), so they travel as text that each
process imports, as RL-Zoo's ``env_wrapper`` and Gymnasium's ``module:Env-v0`` ids do, and
``config.json`` records exactly what ran.
"""

from __future__ import annotations

import gymnasium as gym

from hogwild.errors import UsageError
from hogwild.refs import reference_to, resolve

__all__ = ["apply_wrapper", "reference_to", "resolve"]


def apply_wrapper(
    env: gym.Env, ref: str, on: str, kind: str = "wrapper", hint: str = ""
) -> gym.Env:
    """``wrapper(env)`` for the wrapper ``ref`` names; whatever it raises is one line naming
    it and ``on``, what it was put on (the env and the layers beneath), with ``env``'s
    observation space, since the usual cause is a wrapper written for another observation;
    ``hint`` ends that line."""
    wrapper = resolve(ref, kind)
    try:
        wrapped = wrapper(env)
    except UsageError:
        raise
    except Exception as e:
        raise UsageError(
            f"{kind} {ref!r} failed on {on} (observation space {env.observation_space}): "
            f"{type(e).__name__}: {' '.join(str(e).split())}" + (f"; {hint}" if hint else "")
        ) from e
    if not isinstance(wrapped, gym.Env):
        raise UsageError(f"{kind} {ref!r} returned a {type(wrapped).__name__}, not a gymnasium.Env")
    return wrapped
