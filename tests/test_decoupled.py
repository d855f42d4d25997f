"""Decoupled PPO (``--algo ppo``, a3c.run.decoupled): actors and one learner as real
processes on real envs; the lag figures and cap; a killed actor or learner, signals,
bad input."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import warm_python
from proc_helpers import child_pids, folder_state, pid_gone, under_load, wait_until
from run_helpers import RecentEpisodes
from tb_helpers import scalar_points

from a3c.api import config_for
from a3c.run.config import A3CConfig
from a3c.run.trainer import train
from a3c.train import main as train_main
from hogwild.checkpoint import load_checkpoint

ROOT = Path(__file__).resolve().parents[1]


def ppo_run(tmp_path: Path, callbacks=(), **kw) -> tuple[A3CConfig, object]:
    kw.setdefault("target_return", 1e9)
    cfg = config_for(
        "CartPole-v1", algo="ppo", eval_interval=0, log_interval=0.2,
        logdir=str(tmp_path), seed=2, **kw,
    )  # fmt: skip
    return cfg, train(cfg, callbacks=list(callbacks))


@pytest.mark.slow
def test_eight_workers_learn_cartpole_and_log_their_lag(tmp_path):
    """Seven actors and a learner on 2 cores: progress per step holds (the learner takes
    every gradient on the weights it updates), and the lag is logged within its bound."""
    # The user's settings (CartPole's preset, PPO's defaults). Their 100-episode mean
    # passed 150 at 45k steps, mostly spent waiting for 64 envs' 500-step episodes to end;
    # the last 10 averaged 100 at 7.5k-25k (a random policy's 10-episode means: below 42).
    recent = RecentEpisodes(10, 100.0)
    cfg, result = ppo_run(tmp_path, [recent], workers=8, total_steps=60_000)
    assert result.exit_code == 0
    assert recent.reached_at is not None, f"not by {result.env_steps} steps"
    tags = scalar_points(result.run_dir)
    lag_max = max(v for _, v in tags["charts/policy_lag_max"])
    # 16 updates a rollout. Without the tokens, rollouts queued 2 deep behind all 7 actors
    # (a lag of 320 with 32-step rollouts); with them, a few wait at the start, ~2 later.
    assert 0 < lag_max < 16 * 2 * 7, lag_max
    assert 0 < max(v for _, v in tags["charts/policy_lag"]) <= lag_max
    assert sum(v for _, v in tags["charts/stale_rollouts"]) == 0, lag_max
    assert 1 <= min(v for _, v in tags["charts/rollouts_in_flight"]) <= 7
    for tag in ("losses/clip_fraction", "losses/explained_variance", "losses/grad_norm"):
        assert tag in tags


def test_rollouts_past_the_lag_cap_are_dropped(tmp_path):
    """``--max-policy-lag 0``: the learner learns only from rollouts of its current weights
    and counts the others, which still count as steps."""
    cfg, result = ppo_run(tmp_path, workers=3, total_steps=3_000, max_policy_lag=0)
    assert result.exit_code == 0 and result.env_steps >= 3_000
    tags = scalar_points(result.run_dir)
    assert sum(v for _, v in tags["charts/stale_rollouts"]) > 0
    assert max(v for _, v in tags["charts/policy_lag"]) == 0  # of the rollouts learned
    assert max(v for _, v in tags["charts/policy_lag_max"]) > 0  # of those seen


def test_atari_frames_travel_to_the_learner(tmp_path):
    """Pong's frames are stored channel-last and its next observations not: both reach
    the learner whole (a shape mismatch failed the first actor's hand-over)."""
    pytest.importorskip("ale_py", reason="the [atari] extra is not installed")
    cfg = config_for(
        "PongNoFrameskip-v4", algo="ppo", workers=2, total_steps=512, n_steps=32,
        eval_interval=0, logdir=str(tmp_path), seed=1, lr_warmup_steps=0,
    )  # fmt: skip
    result = train(cfg)
    assert result.exit_code == 0 and result.env_steps >= 512
    assert sum(v for _, v in scalar_points(result.run_dir)["losses/entropy"]) > 0


def start(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen, list[int]]:
    """``a3c.train --algo ppo`` with 3 workers, once it is training; its workers' pids,
    rank 0 (the learner) first."""
    proc = warm_python.Popen(
        [
            sys.executable, "-m", "a3c.train", "--algo", "ppo", "--workers", "3",
            "--total-steps", "100000000", "--target-return", "1e9", "--eval-interval", "0",
            "--logdir", str(tmp_path), *extra,
        ],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    wait_until(
        lambda: len(child_pids(proc.pid)) >= 3 and list(tmp_path.glob("*/events.out.tfevents.*")),
        what="training did not start",
        progress=lambda: folder_state(tmp_path),
        procs=[proc],
    )
    time.sleep(2.0)
    return proc, sorted(child_pids(proc.pid))


def ended(proc: subprocess.Popen, seconds: float) -> str:
    bound = under_load(seconds)
    try:
        _, err = proc.communicate(timeout=bound)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"the run did not exit within {bound:.0f} s")
    return err


@pytest.mark.parametrize("role", ["learner", "actor"])
def test_a_killed_learner_or_actor_stops_the_run_with_a_checkpoint(tmp_path, role):
    """Neither can be restarted in place (an actor's slots are on the learner's side of
    the pool, a CUDA learner's state on its device): the run stops, keeps a checkpoint,
    leaves no process behind, even with --on-worker-failure restart (the default)."""
    proc, kids = start(tmp_path)
    os.kill(kids[0] if role == "learner" else kids[-1], signal.SIGKILL)
    err = ended(proc, 20)
    assert proc.returncode == 1, err
    assert "was killed by SIGKILL" in err and "aborting" in err
    assert "Traceback" not in err
    assert load_checkpoint(next(tmp_path.glob("*/checkpoint.pt")))["env_steps"] > 0
    deadline = time.monotonic() + under_load(10)
    while not all(pid_gone(k) for k in kids):
        assert time.monotonic() < deadline, "a worker outlived the run"
        time.sleep(0.05)


def test_sigterm_while_it_learns_stops_every_process_with_a_checkpoint(tmp_path):
    """(SIGINT takes the same path: tests/test_a3c_train.py checks both signals.)"""
    proc, kids = start(tmp_path)
    proc.send_signal(signal.SIGTERM)
    err = ended(proc, 10)
    assert proc.returncode == 143, err
    assert "Traceback" not in err
    ckpt = load_checkpoint(next(tmp_path.glob("*/checkpoint.pt")))
    assert ckpt["env_steps"] > 0 and ckpt["optimizer"]["steps"].sum() > 0
    deadline = time.monotonic() + under_load(10)
    while not all(pid_gone(k) for k in kids):
        assert time.monotonic() < deadline, "a worker outlived the run"
        time.sleep(0.05)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--workers", "1"], "needs --workers 2 or more"),
        (["--recompute-advantages"], "--recompute-advantages"),
        (["--max-policy-lag", "-1"], "max_policy_lag"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(argv, message, capsys):
    assert train_main(["--algo", "ppo", "--workers", "2", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is here: the refusal is for none")
def test_a_cuda_learner_without_cuda_is_refused(tmp_path, capsys):
    argv = ["--algo", "ppo", "--workers", "2", "--learner-device", "cuda"]
    assert train_main([*argv, "--logdir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--learner-device cuda: no CUDA device" in err and err.count("\n") == 1, err
    assert not list(tmp_path.iterdir())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
def test_a_cuda_learner_learns_and_publishes_to_the_actors(tmp_path):
    cfg, result = ppo_run(tmp_path, workers=3, total_steps=40_000, learner_device="cuda")
    assert result.exit_code == 0
    assert result.best_mean_100 is not None and result.best_mean_100.mean > 100
    ckpt = load_checkpoint(result.run_dir / "checkpoint.pt")
    assert ckpt["optimizer"]["steps"].sum() > 0  # the learner's state, published
    assert all(math.isfinite(float(v.abs().sum())) for v in ckpt["model"].values())
