"""A policy saved by ``a3c.train``, loaded for inference, and its score.

``python -m a3c.evaluate`` is the command around :func:`evaluate`; :class:`a3c.use.agent.Policy`
acts with a loaded policy from Python.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from a3c.actions import ActionSpec, BoxActions, MultiDiscreteActions
from a3c.envs import env_spaces
from a3c.policy import ActorCritic, ModelSpec
from a3c.scoring import play_episodes
from hogwild.checkpoint import load_checkpoint
from hogwild.errors import UsageError


class SavedPolicy(NamedTuple):
    model: ActorCritic
    env_id: str
    env_kwargs: dict[str, Any]  # make_env keywords of the run (--env-kwargs, --wrapper): as trained


def load_policy(path: str | Path, env: str | None = None) -> SavedPolicy:
    """The model saved in an A3C checkpoint, ready for inference, and the env to play it on:
    its own, or ``env``, if that env's spaces fit the policy (else a one-line UsageError:
    its own env's may have changed since, or how this version of a3c adapts them)."""
    ckpt = load_checkpoint(path, required=("model", "model_spec", "env_id"))
    env_kwargs = dict(ckpt.get("env_kwargs") or {})  # absent from older checkpoints
    model = ModelSpec.from_dict(ckpt["model_spec"]).build()
    try:
        model.load_state_dict(ckpt["model"])
    except (RuntimeError, KeyError) as e:
        first = str(e).splitlines()[0]
        raise UsageError(f"{path}: weights do not fit the saved model ({first})") from None
    trained_on = str(ckpt["env_id"])
    env_id = env or trained_on
    spaces, spec = env_spaces(env_id, **env_kwargs), model.spec
    if (spaces.obs_shape, spaces.obs_dtype, spaces.action, spaces.action_mask) != (
        spec.obs_shape,
        spec.obs_dtype,
        spec.action,
        spec.action_mask,
    ):
        since = "" if env_id != trained_on else ", as this version of a3c reads it"
        raise UsageError(
            f"env {env_id} has observations {spaces.obs_dtype} {spaces.obs_shape}{since}, and"
            f" actions {_action_text(spaces.action)}; the policy in {path} takes"
            f" {spec.obs_dtype} {spec.obs_shape} and acts in"
            f" {_action_text(spec.action)} ({trained_on})"
        )
    return SavedPolicy(model.eval(), env_id, env_kwargs)


def _action_text(action: ActionSpec) -> str:
    if isinstance(action, BoxActions):
        return f"Box of {len(action.low)}"
    size = list(action.nvec) if isinstance(action, MultiDiscreteActions) else action.n
    return f"{action.kind} {size}"


def evaluate(
    checkpoint: str | Path,
    episodes: int = 10,
    *,
    seed: int = 0,
    stochastic: bool = False,
    env: str | None = None,
) -> np.ndarray:
    """The returns of ``episodes`` episodes of a saved policy (greedy unless ``stochastic``).

    What ``python -m a3c.evaluate CHECKPOINT`` scores: episode i is reset with seed
    ``seed + i`` (and stochastic draws are seeded with ``seed``, which reseeds torch's
    global generator), on the checkpoint's env unless ``env`` names another. A bad checkpoint
    raises :class:`hogwild.errors.UsageError` with a one-line message.
    """
    if episodes < 1:
        raise UsageError(f"episodes must be at least 1, got {episodes}")
    model, env_id, env_kwargs = load_policy(checkpoint, env)
    if stochastic:  # the action draws repeat with the seed too, as in the command
        torch.manual_seed(seed)
    played = play_episodes(
        model, env_id, episodes, seed, greedy=not stochastic, env_kwargs=env_kwargs
    )
    return played.returns
