"""A run's identity: seeded reproducibility, resume continues the same run, the LR schedule."""

from __future__ import annotations

import pytest
import torch

from a3c.run.config import A3CConfig
from a3c.run.trainer import train
from a3c.run.worker import learner_settings
from hogwild.checkpoint import load_checkpoint


def one_worker_run(tmp_path, name: str, **kw) -> dict:
    settings = dict(
        env="Acrobot-v1",
        workers=1,
        envs_per_worker=4,
        total_steps=2_000,
        target_return=1e9,
        eval_interval=0.0,
        logdir=str(tmp_path),
        run_name=name,
        seed=7,
    )
    cfg = A3CConfig(**{**settings, **kw})
    r = train(cfg)
    assert r.exit_code == 0
    return load_checkpoint(r.run_dir / "checkpoint.pt")


def test_one_worker_runs_are_reproducible(tmp_path):
    a = one_worker_run(tmp_path, "a")
    b = one_worker_run(tmp_path, "b")
    assert a["env_steps"] == b["env_steps"]
    for k, v in a["model"].items():
        torch.testing.assert_close(v, b["model"][k], rtol=0, atol=0, msg=k)
    torch.testing.assert_close(a["return_rms"], b["return_rms"], rtol=0, atol=0)


def test_another_seed_gives_another_run(tmp_path):
    a = one_worker_run(tmp_path, "a")
    other = one_worker_run(tmp_path, "b", seed=8)
    assert not torch.equal(a["model"]["head.weight"], other["model"]["head.weight"])


def test_resume_starts_from_the_saved_model_and_statistics(tmp_path):
    first = one_worker_run(tmp_path, "r")
    (run,) = tmp_path.glob("*_r")
    # Resuming with no steps left to take changes nothing: the same model, optimizer
    # state and statistics come back, in the same run folder.
    r = train(
        A3CConfig(
            env="Acrobot-v1",
            workers=1,
            envs_per_worker=4,
            total_steps=first["env_steps"],
            target_return=1e9,
            eval_interval=0.0,
            logdir=str(tmp_path),
            resume=str(run / "checkpoint.pt"),
        )
    )
    assert r.run_dir == run
    again = load_checkpoint(run / "checkpoint.pt")
    assert again["env_steps"] == first["env_steps"]
    for k, v in first["model"].items():
        torch.testing.assert_close(v, again["model"][k], rtol=0, atol=0, msg=k)
    torch.testing.assert_close(first["obs_rms"], again["obs_rms"])
    torch.testing.assert_close(first["return_rms"], again["return_rms"])


def _learning_rate(cfg: A3CConfig, steps: int) -> float:
    return learner_settings(cfg).schedules.learning_rate(steps)


def test_linear_schedule_decays_by_global_steps():
    cfg = A3CConfig(lr=1e-3, lr_schedule="linear", total_steps=1000)
    assert _learning_rate(cfg, 0) == 1e-3
    assert abs(_learning_rate(cfg, 250) - 7.5e-4) < 1e-12
    assert _learning_rate(cfg, 1000) == 0.0
    assert _learning_rate(cfg, 5000) == 0.0
    assert _learning_rate(A3CConfig(lr=1e-3), 999) == 1e-3


def test_warmup_raises_the_rate_from_zero_then_the_schedule_takes_over():
    cfg = A3CConfig(lr=1e-3, lr_warmup_steps=100, lr_schedule="linear", total_steps=1000)
    assert _learning_rate(cfg, 0) == pytest.approx(1e-5)  # the first update: 1/100 of it
    assert _learning_rate(cfg, 49) == pytest.approx(1e-3 * 0.5 * (1 - 49 / 1000))
    assert _learning_rate(cfg, 500) == pytest.approx(5e-4)  # warmed up: the decay alone
    assert _learning_rate(A3CConfig(lr=1e-3, lr_warmup_steps=100), 100) == 1e-3
