"""Environments for A3C: construction and validation (:mod:`.make`), the spaces the
policy sees (:mod:`.spaces`), and the env families' own wrappers."""

from a3c.envs.make import (
    env_spaces,
    final_observations,
    is_multiagent_id,
    make_env,
    make_vector_env,
)

__all__ = [
    "env_spaces",
    "final_observations",
    "is_multiagent_id",
    "make_env",
    "make_vector_env",
]
