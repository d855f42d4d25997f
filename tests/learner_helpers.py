"""A Learner as a worker builds one, for the PPO and figure tests that drive its update."""

from __future__ import annotations

import torch
from gymnasium.vector import VectorEnv
from policy_helpers import mlp

from a3c.envs import make_vector_env
from a3c.learning.collect import Collector
from a3c.learning.learner import Learner
from a3c.learning.metrics import Tally
from a3c.run.config import A3CConfig
from a3c.run.shared_model import make_optimizer
from a3c.run.telemetry import STATS
from a3c.run.worker import learner_settings
from hogwild.flat import flatten_parameters


def cartpole_setup(cfg: A3CConfig) -> tuple[Learner, VectorEnv]:
    """A learner of a tiny seeded MLP, stepped by the config's own optimizer (as a run's
    workers are, through ``make_optimizer``), and CartPole envs for it."""
    envs = make_vector_env("CartPole-v1", cfg.envs_per_worker, seed=0)
    torch.manual_seed(0)
    model = mlp(4, 2, hidden=(8,))
    local = flatten_parameters(model)
    shared = local.clone()
    learner = Learner(
        learner_settings(cfg), model=model, local=local, shared=shared,
        optimizer=make_optimizer(cfg, shared), rank=0, stats=Tally(STATS),
    )  # fmt: skip
    return learner, envs


def cartpole_learner(cfg: A3CConfig) -> tuple[Learner, object, torch.Tensor]:
    """A learner, one CartPole rollout to feed it, and the shared weights it steps."""
    learner, envs = cartpole_setup(cfg)
    rollout = Collector(envs, learner.model, cfg.n_steps, seed=0).collect()
    envs.close()
    return learner, rollout, learner.shared
