"""Scoring a policy: whole episodes on a fresh environment, greedy or stochastic."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from a3c.envs import make_env
from a3c.policy import ActorCritic, ModelSpec


def run_episodes(
    model: ActorCritic,
    env_id: str,
    episodes: int,
    seed: int,
    *,
    greedy: bool = True,
    device: torch.device | str = "cpu",
    env=None,
    env_kwargs: Mapping[str, Any] | None = None,
) -> np.ndarray:
    """Returns of ``episodes`` full episodes (seeded ``seed``, ``seed + 1``, ...) on ``env``,
    or on a fresh ``make_env(env_id, scoring=True, **env_kwargs)``."""
    own_env = env is None
    env = make_env(env_id, scoring=True, **(env_kwargs or {})) if own_env else env
    returns = np.zeros(episodes)
    try:
        with torch.no_grad():
            for i in range(episodes):
                obs, _ = env.reset(seed=seed + i)
                state = model.initial_state(1, device) if model.recurrent else None
                done = False
                while not done:
                    x = torch.as_tensor(obs, device=device).unsqueeze(0)
                    if state is None:
                        a = model.act(x, greedy)
                    else:
                        a, state = model.act_recurrent(x, state, greedy)
                    action = model.dist.to_env(a.cpu())[0]
                    obs, reward, terminated, truncated, _ = env.step(action)
                    returns[i] += float(reward)
                    done = terminated or truncated
    finally:
        if own_env:
            env.close()
    return returns


def build_model(spec: dict) -> ActorCritic:
    """Module-level, so a spawned evaluator can rebuild the model from a plain dict."""
    return ModelSpec.from_dict(spec).build()


def score_greedy(
    model: ActorCritic,
    device: torch.device,
    step: int,
    *,
    env_id: str,
    env_kwargs: Mapping[str, Any],
    episodes: int,
    seed: int,
) -> dict[str, float]:
    """The evaluator's score: mean and spread of greedy returns on fixed seeds."""
    returns = run_episodes(
        model, env_id, episodes, seed, greedy=True, device=device, env_kwargs=env_kwargs
    )
    return {"mean_return": float(returns.mean()), "std_return": float(returns.std())}
