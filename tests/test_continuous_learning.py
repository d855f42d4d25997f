"""Real 2-worker runs on environments that are not Discrete + vector: Pendulum-v1 (a
Gaussian policy), a MultiDiscrete env and a Dict-observation, MultiBinary-action env."""

from __future__ import annotations

import pytest

from a3c.evaluate import main as evaluate_main
from a3c.run.presets import config_for
from a3c.run.trainer import train
from a3c.use.saved import load_policy
from hogwild.checkpoint import load_checkpoint

pytestmark = pytest.mark.slow

RANDOM_PENDULUM = -1200.0


@pytest.fixture(scope="module")
def pendulum(tmp_path_factory):
    cfg = config_for(
        "Pendulum-v1",
        algo="a3c",  # the preset's choice is APPO (test_appo_learning); A3C's Gaussian here
        workers=2,
        total_steps=600_000,
        target_return=-250.0,
        eval_interval=0.0,
        logdir=str(tmp_path_factory.mktemp("runs")),
        seed=3,
    )
    return cfg, train(cfg)


def test_pendulum_learns_with_a_gaussian_policy(pendulum):
    cfg, r = pendulum
    assert cfg.preset == "Pendulum-v1"
    assert r.exit_code == 0
    assert r.solved_at is not None, f"100-episode mean {r.mean_return_100} (random ~-1200)"
    assert r.mean_return_100 > -600 > RANDOM_PENDULUM


def test_pendulum_checkpoint_resumes_and_evaluates(pendulum, capsys):
    cfg, r = pendulum
    path = r.run_dir / "checkpoint.pt"
    model, env_id, _ = load_policy(path)
    assert env_id == "Pendulum-v1" and model.dist.log_std.shape == (1,)
    assert evaluate_main([str(path), "--episodes", "20"]) == 0
    out = capsys.readouterr().out
    mean = float(out.split("greedy return")[1].split()[0])
    # Greedy (the Gaussian's mean) after a training mean of -250: 10-episode means of
    # -191 to -710 seen, single start states down to -1500, so the bound is "clearly not
    # random" (-1200), 20 episodes to keep the mean's spread well inside it.
    assert mean > -900, out

    before = load_checkpoint(path)
    resumed = train(
        config_for(
            "Pendulum-v1",
            workers=2,
            total_steps=r.env_steps + 30_000,
            target_return=1e9,
            eval_interval=0.0,
            logdir=cfg.logdir,
            resume=str(path),
        )
    )
    assert resumed.exit_code == 0
    after = load_checkpoint(path)
    assert after["env_steps"] >= before["env_steps"] + 30_000
    assert not after["model"]["dist.log_std"].equal(before["model"]["dist.log_std"])
    assert resumed.mean_return_100 > -600, "a resume continues the learned policy"


@pytest.mark.parametrize(
    "env_id, target, random",
    # MatchDigits: 8.5 of 10, not 9.0: one CI run (2026-11-24) plateaued at 8.6 in 300k
    # steps while 10 of 10 runs here solved 9.0; either is far above random (3.3).
    [("policy_helpers:MatchDigits-v0", 8.5, 3.3), ("policy_helpers:CopyBits-v0", 9.5, 5.0)],
)
def test_multidiscrete_and_dict_observation_envs_are_learned(env_id, target, random, tmp_path):
    r = train(
        config_for(
            env_id,
            workers=2,
            total_steps=300_000,
            target_return=target,
            eval_interval=0.0,
            logdir=str(tmp_path),
        )
    )
    assert r.exit_code == 0
    assert r.solved_at is not None, f"100-episode mean {r.mean_return_100} (random {random})"
