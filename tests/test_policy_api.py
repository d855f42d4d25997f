"""A trained policy from Python: ``a3c.Policy.load(...).predict(...)`` and ``export``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from a3c import Policy, evaluate, load
from a3c.train import main as train_main
from hogwild.errors import UsageError

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    """Short real runs (one worker): a few thousand steps are enough to have a policy."""
    root = tmp_path_factory.mktemp("policies")
    runs = {
        "cartpole": ["--env", "CartPole-v1"],
        "pendulum": ["--env", "Pendulum-v1", "--algo", "a3c"],
        "lstm": ["--env", "CartPole-v1", "--policy", "lstm", "--lstm-size", "16"],
        "frozenlake": ["--env", "FrozenLake-v1"],  # Discrete observations: one-hot inside
    }
    out = {}
    for name, argv in runs.items():
        logdir = root / name
        code = train_main(
            [*argv, "--workers", "1", "--total-steps", "3000", "--eval-interval", "0",
             "--logdir", str(logdir)]
        )  # fmt: skip
        assert code == 0
        (run,) = logdir.iterdir()
        out[name] = run / "checkpoint.pt"
    return out


def greedy_return(policy: Policy, seed: int) -> float:
    env = policy.make_env()
    obs, _ = env.reset(seed=seed)
    state, total, done = None, 0.0, False
    while not done:
        action, state = policy.predict(obs, state)
        obs, reward, terminated, truncated, _ = env.step(action)
        total += float(reward)
        done = terminated or truncated
    env.close()
    return total


@pytest.mark.parametrize("name", ["cartpole", "pendulum", "lstm", "frozenlake"])
def test_predict_plays_what_evaluate_scores(checkpoints, name):
    policy = Policy.load(checkpoints[name])
    for seed in (3, 4):
        expected = evaluate(checkpoints[name], episodes=1, seed=seed)[0]
        assert greedy_return(policy, seed) == pytest.approx(expected)


@pytest.mark.parametrize("name", ["cartpole", "pendulum", "frozenlake"])
def test_one_observation_or_a_batch(checkpoints, name):
    policy = load(checkpoints[name])
    space = policy.observation_space
    space.seed(0)
    batch = [space.sample() for _ in range(16)]
    actions, state = policy.predict(np.stack(batch))
    assert state is None and len(actions) == 16
    for obs, action in zip(batch, actions, strict=True):
        single, _ = policy.predict(obs)
        assert np.shape(single) == np.shape(action) and np.allclose(single, action)
        assert policy.action_space.contains(np.asarray(single, dtype=policy.action_space.dtype))


def test_continuous_actions_stay_in_bounds_when_stochastic(checkpoints):
    policy = Policy.load(checkpoints["pendulum"])
    obs = np.stack([policy.observation_space.sample() for _ in range(256)])
    actions, _ = policy.predict(obs, deterministic=False)
    assert actions.shape == (256, 1)
    assert np.all(actions >= -2.0) and np.all(actions <= 2.0)


def test_a_recurrent_policy_threads_its_state(checkpoints):
    policy = Policy.load(checkpoints["lstm"])
    assert policy.recurrent
    obs = np.stack([policy.observation_space.sample() for _ in range(4)])
    a0, s0 = policy.predict(obs)
    a1, s1 = policy.predict(obs, s0)
    assert s0[0].shape == (4, 16) and not torch.equal(s0[0], s1[0])  # the state moved on
    # A fresh state, or the old one reset where an episode starts, acts as at the start.
    again, s_again = policy.predict(obs, s1, episode_start=[True] * 4)
    assert np.array_equal(again, a0) and torch.equal(s_again[0], s0[0])
    zero = policy.initial_state(4)
    assert torch.equal(policy.predict(obs, zero)[1][0], s0[0])


def run_exported(path: Path, obs: np.ndarray, tmp_path: Path) -> np.ndarray:
    """The exported file, run by a Python that imports neither a3c nor hogwild."""
    np.save(tmp_path / "obs.npy", obs)
    code = f"""
import sys, numpy as np, torch
module = torch.jit.load({str(path)!r})
out = module(torch.as_tensor(np.load({str(tmp_path / "obs.npy")!r})))
assert not [m for m in sys.modules if m.split(".")[0] in ("a3c", "hogwild")], "imported us"
np.save({str(tmp_path / "actions.npy")!r}, out.numpy())
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return np.load(tmp_path / "actions.npy")


@pytest.mark.parametrize("name", ["cartpole", "pendulum"])
def test_the_exported_module_acts_exactly_as_predict(checkpoints, name, tmp_path):
    policy = Policy.load(checkpoints[name])
    space = policy.observation_space
    space.seed(1)
    obs = np.stack([space.sample() for _ in range(64)]).astype(np.float32)
    path = policy.export(tmp_path / "policy.pt")
    exported = run_exported(path, obs, tmp_path)
    expected, _ = policy.predict(obs)
    assert exported.shape == np.shape(expected)
    assert np.array_equal(exported, expected) or np.allclose(exported, expected, atol=1e-6)


def test_what_cannot_be_exported_says_so(checkpoints, tmp_path):
    with pytest.raises(UsageError, match="recurrent"):
        Policy.load(checkpoints["lstm"]).export(tmp_path / "x.pt")
    with pytest.raises(UsageError, match="adapter"):
        Policy.load(checkpoints["frozenlake"]).export(tmp_path / "x.pt")


def test_bad_input_is_one_line(checkpoints, tmp_path):
    with pytest.raises(UsageError):
        Policy.load(tmp_path / "missing.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(UsageError):
        Policy.load(tmp_path / "junk.pt")
    policy = Policy.load(checkpoints["cartpole"])
    with pytest.raises(UsageError, match="does not fit"):
        policy.predict(np.zeros(7))
