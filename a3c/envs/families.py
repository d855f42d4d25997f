"""Which family an env id belongs to: the one answer that presets, env construction and
the benchmarks all ask for."""

from __future__ import annotations

import gymnasium as gym

from a3c.envs import atari, minatar, minigrid

__all__ = ["FAMILIES", "family_of", "is_mujoco_id"]

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
    from a3c.envs.make import is_multiagent_id  # builds the env once: asked last

    if is_multiagent_id(env_id):
        return "pettingzoo"
    return None
