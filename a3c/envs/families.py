"""Which family an env id belongs to: the one answer that presets, env construction and
the benchmarks all ask for."""

from __future__ import annotations

import functools
import importlib
import sys

import gymnasium as gym

from a3c.envs import atari, minatar, minigrid
from a3c.envs.multiagent import is_multiagent, is_multiagent_class
from a3c.envs.refs import resolve
from hogwild.errors import UsageError

__all__ = ["FAMILIES", "family_of", "is_mujoco_id", "is_multiagent_id"]

#: The families with a preset table of their own, in the order ids are tested.
FAMILIES = ("minatar", "minigrid", "atari", "mujoco", "pettingzoo")


def is_mujoco_id(env_id: str) -> bool:
    """Whether ``env_id`` is one of Gymnasium's MuJoCo robots (``Walker2d-v5`` ...)."""
    if not isinstance(env_id, str):
        return False
    name = env_id.rpartition(":")[2]
    return name in gym.registry and str(gym.registry[name].entry_point).startswith(
        "gymnasium.envs.mujoco"
    )


def family_of(env_id: str) -> str | None:
    """``"minatar"``, ``"minigrid"``, ``"atari"``, ``"mujoco"``, ``"pettingzoo"`` (any factory
    of PettingZoo envs), or None for the rest."""
    if minatar.is_minatar_id(env_id):
        return "minatar"
    if minigrid.is_minigrid_id(env_id):
        return "minigrid"
    if atari.is_atari_id(env_id):
        return "atari"
    if is_mujoco_id(env_id):
        return "mujoco"
    if is_multiagent_id(env_id):  # builds the env once: asked last
        return "pettingzoo"
    return None


@functools.cache
def is_multiagent_id(env_id: str) -> bool:
    """Whether ``env_id`` names a factory of PettingZoo envs (``module:factory`` only: a
    registered id is a Gymnasium env): a PettingZoo env class, or a function that returns
    such an env when called without arguments (it is called once to look)."""
    module, _, name = env_id.rpartition(":") if isinstance(env_id, str) else ("", "", "")
    if not module or name in gym.registry:
        return False
    try:
        importlib.import_module(module)
    except ImportError:
        return False  # make_env says why, in one line
    factory = getattr(sys.modules[module], name, None)
    if isinstance(factory, type):  # a class (Shimmy's OpenSpiel games) may need arguments
        return is_multiagent_class(factory)
    if not callable(factory):
        return False
    try:
        env = resolve(env_id, "env factory")()
    except (TypeError, ValueError, UsageError):
        return False  # a factory that needs arguments: make_env calls it with them
    multiagent = is_multiagent(env)
    if multiagent or isinstance(env, gym.Env):
        env.close()
    return multiagent
