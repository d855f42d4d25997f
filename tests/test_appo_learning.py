"""Asynchronous PPO learns: real 2-worker runs on CartPole, Pendulum (a Gaussian policy)
and, with an LSTM, the CartPole whose velocities are hidden (it needs memory)."""

from __future__ import annotations

import pytest

from a3c.run.presets import config_for
from a3c.run.trainer import train

pytestmark = pytest.mark.slow


def _appo(env: str, tmp_path, **kw):
    settings = dict(workers=2, eval_interval=0.0, logdir=str(tmp_path), seed=1)
    return train(config_for(env, **{"algo": "appo", **settings, **kw}))


def test_appo_solves_cartpole(tmp_path):
    """With APPO's own 32-step rollouts (seeds 1-3 solved after 55k, 54k, 56k steps)."""
    r = _appo("CartPole-v1", tmp_path, total_steps=300_000)
    assert r.exit_code == 0
    # A random policy's episodes last ~22 steps.
    assert r.solved_at is not None, f"best 100-episode mean {r.best_mean_100}"


def test_appo_learns_pendulum_with_a_gaussian_policy(tmp_path):
    r = _appo("Pendulum-v1", tmp_path, total_steps=400_000, target_return=-400.0)
    assert r.exit_code == 0
    # A random policy scores ~-1200; -400 is a pendulum swung up and mostly held.
    assert r.solved_at is not None, f"best 100-episode mean {r.best_mean_100}"


def test_recurrent_appo_learns_what_needs_memory(tmp_path):
    r = _appo(
        "policy_helpers:CartPoleNoVel-v1",
        tmp_path,
        policy="lstm",
        total_steps=400_000,
        target_return=195.0,
    )
    assert r.exit_code == 0
    # Without memory an MLP's best 100-episode mean stays below 120 (test_memory_learning.py).
    assert r.solved_at is not None, f"best 100-episode mean {r.best_mean_100}"


@pytest.mark.parametrize(
    "env_id, target",
    [("policy_helpers:MatchDigits-v0", 9.0), ("policy_helpers:CopyBits-v0", 9.5)],
)
def test_appo_learns_multidiscrete_and_dict_observation_envs(env_id, target, tmp_path):
    # Random: 3.3 (MatchDigits), 5.0 (CopyBits); test_continuous_learning has A3C's runs.
    r = _appo(env_id, tmp_path, total_steps=300_000, target_return=target)
    assert r.exit_code == 0
    assert r.solved_at is not None, f"best 100-episode mean {r.best_mean_100}"


#: What each image env needs beside the core install: (modules, the extra that has them).
IMAGE_ENV_NEEDS = {
    "MinAtar/Breakout-v1": (("minatar",), "minatar"),
    "PongNoFrameskip-v4": (("ale_py", "cv2"), "atari"),
}


@pytest.mark.parametrize(
    "env_id, policy",
    [
        ("MinAtar/Breakout-v1", "auto"),
        ("MinAtar/Breakout-v1", "lstm"),
        ("PongNoFrameskip-v4", "auto"),
    ],
)
def test_appo_steps_on_image_envs(env_id, policy, tmp_path):
    """Conv encoders (and a conv + LSTM policy) on uint8 images: updates happen, finite."""
    from hogwild.checkpoint import load_checkpoint

    modules, extra = IMAGE_ENV_NEEDS[env_id]
    for module in modules:
        pytest.importorskip(module, reason=f'needs the {extra} extra: pip install -e ".[{extra}]"')

    r = _appo(env_id, tmp_path, policy=policy, n_steps=16, envs_per_worker=2, total_steps=640,
              minibatches=2, epochs=2)  # fmt: skip
    assert r.exit_code == 0
    ckpt = load_checkpoint(r.run_dir / "checkpoint.pt")
    # 640 steps, 32 per rollout, 2 x 2 optimizer steps each (SharedAdam/RMSprop counts).
    assert int(ckpt["optimizer"]["steps"].sum()) >= 4 * (640 // 32 - 2)
    assert all(bool(v.isfinite().all()) for v in ckpt["model"].values())
