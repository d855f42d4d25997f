"""The A3C run configuration: one dataclass, written beside every run and into checkpoints."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass
class A3CConfig:
    env: str = "CartPole-v1"
    workers: int = max(os.cpu_count() or 1, 1)
    envs_per_worker: int = 8
    n_steps: int = 5
    total_steps: int = 5_000_000
    time_limit: float | None = None
    target_return: float | None = None
    target_metric: str = "train"
    gamma: float = 0.98
    gae_lambda: float = 0.95
    optimizer: str = "rmsprop"
    lr: float = 7e-4
    lr_schedule: str = "constant"
    entropy_coef: float = 0.0
    value_coef: float = 0.5
    max_grad_norm: float = 0.5
    hidden: tuple[int, ...] = (128, 128)
    activation: str = "tanh"
    normalize_obs: bool = False
    normalize_reward: bool = False
    normalize_advantage: bool = False
    value_loss: str = "mse"
    separate_networks: bool = False
    seed: int = 1
    threads_per_worker: int = 1
    start_method: str = "fork"
    on_worker_failure: str = "restart"
    max_restarts: int = 20
    max_nonfinite: int = 10
    eval_interval: float = 5.0
    eval_episodes: int = 10
    eval_device: str = "auto"
    checkpoint_interval: float = 60.0
    log_interval: float = 1.0
    logdir: str = "runs"
    run_name: str | None = None
    resume: str | None = None
    sync_every: float = 2.0
    dist_timeout: float = 60.0

    @property
    def rollout_size(self) -> int:
        return self.n_steps * self.envs_per_worker
