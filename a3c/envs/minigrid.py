"""MiniGrid (``MiniGrid-Empty-5x5-v0`` ...; the ``minigrid`` package, extra ``[minigrid]``).

``minigrid`` registers its envs with Gymnasium when it is imported, which
:func:`register_minigrid_envs` does the first time a ``MiniGrid-``/``BabyAI-`` id is asked
for; a missing package is one line naming the extra. Its observations are a dict with a
``mission`` text, which no policy here takes: the ``[minigrid]`` preset applies MiniGrid's
own ``ImgObsWrapper`` (``preset_wrappers``), leaving the agent's 7x7 view of (object,
colour, state) codes as a ``uint8`` image. It comes after the user's ``--wrapper`` ones,
which get MiniGrid's dict as its own wrappers expect, and stands aside where they made an
image.
"""

from __future__ import annotations

import gymnasium as gym

from hogwild.errors import UsageError

__all__ = ["is_minigrid_id", "register_minigrid_envs"]

INSTALL_HINT = (
    'pip install "hogwild-a3c[minigrid]" (or, from a checkout, pip install -e ".[minigrid]")'
)


def is_minigrid_id(env_id: str) -> bool:
    """Whether ``env_id`` (possibly ``module:``-prefixed) names a MiniGrid or BabyAI env."""
    return isinstance(env_id, str) and env_id.rpartition(":")[2].startswith(
        ("MiniGrid-", "BabyAI-")
    )


def register_minigrid_envs(env_id: str) -> None:
    """Import ``minigrid`` (which registers its envs), or say which extra installs it."""
    if "MiniGrid-Empty-5x5-v0" in gym.registry:
        return
    try:
        import minigrid  # noqa: F401
    except ImportError as e:
        raise UsageError(f"environment {env_id!r} needs the minigrid extra: {INSTALL_HINT}") from e
