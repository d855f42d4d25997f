"""A trained policy from Python: ``a3c.Policy.load(...).predict(...)`` (its ``export``:
tests/test_export.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from a3c.api import Policy, evaluate, load
from a3c.train import main as train_main
from hogwild.errors import UsageError


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    """Short real runs (one worker): a few thousand steps are enough to have a policy."""
    root = tmp_path_factory.mktemp("policies")
    runs = {
        "cartpole": ["--env", "CartPole-v1"],
        "pendulum": ["--env", "Pendulum-v1", "--algo", "a3c"],
        "lstm": ["--env", "CartPole-v1", "--policy", "lstm", "--lstm-size", "16"],
        "frozenlake": ["--env", "FrozenLake-v1"],  # Discrete observations: one-hot inside
        "copybits": ["--env", "policy_helpers:CopyBits-v0"],  # Dict obs, MultiBinary actions
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


def sample_batch(space, n: int, seed: int) -> tuple[list, object]:
    """``n`` observations of ``space``, one by one and as one batch (a dict of arrays for a
    ``Dict`` space, as a vectorised env gives them)."""
    space.seed(seed)
    rows = [space.sample() for _ in range(n)]
    if isinstance(rows[0], dict):
        return rows, {k: np.stack([r[k] for r in rows]) for k in rows[0]}
    return rows, np.stack(rows)


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


@pytest.mark.parametrize("name", ["cartpole", "pendulum", "lstm", "frozenlake", "copybits"])
def test_predict_plays_what_evaluate_scores(checkpoints, name):
    policy = Policy.load(checkpoints[name])
    for seed in (3, 4):
        expected = evaluate(checkpoints[name], episodes=1, seed=seed)[0]
        assert greedy_return(policy, seed) == pytest.approx(expected)


@pytest.mark.parametrize("name", ["cartpole", "pendulum", "frozenlake", "copybits"])
def test_one_observation_or_a_batch(checkpoints, name):
    policy = load(checkpoints[name])
    rows, batch = sample_batch(policy.observation_space, 16, seed=0)
    actions, state = policy.predict(batch)
    assert state is None and len(actions) == 16
    for obs, action in zip(rows, actions, strict=True):
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
    # A batch is its rows, each with its own state.
    for i in range(4):
        row_state = (s0[0][i : i + 1], s0[1][i : i + 1])
        action, (h, _) = policy.predict(obs[i], row_state)
        assert action == a1[i] and torch.allclose(h[0], s1[0][i], atol=1e-6)


def test_the_state_is_what_the_action_depends_on(checkpoints):
    policy = Policy.load(checkpoints["lstm"])
    _, obs = sample_batch(policy.observation_space, 256, seed=2)
    fresh, _ = policy.predict(obs)
    torch.manual_seed(0)
    other = tuple(3 * torch.randn(256, 16) for _ in range(2))
    moved, _ = policy.predict(obs, other)
    assert not np.array_equal(fresh, moved), "the LSTM state changes no action at all"


def test_bad_input_is_one_line(checkpoints, tmp_path):
    with pytest.raises(UsageError):
        Policy.load(tmp_path / "missing.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(UsageError):
        Policy.load(tmp_path / "junk.pt")
    policy = Policy.load(checkpoints["cartpole"])
    with pytest.raises(UsageError, match="does not fit"):
        policy.predict(np.zeros(7))


def test_a_policy_its_own_env_no_longer_fits_is_one_line(tmp_path, capsys):
    """A checkpoint whose env now reads otherwise (a turn-based game's rows told their seat
    only from 2026-12-06 on; here, CartPole saved as if it had 5 numbers) is refused in one
    line by every way in, not run into a shape error."""
    from a3c.evaluate import main as evaluate_main
    from a3c.policy import ModelSpec

    model = ModelSpec((5,), {"type": "discrete", "n": 2}).build()
    path = tmp_path / "older.pt"
    torch.save({"model": model.state_dict(), "model_spec": model.spec.to_dict(),
                "env_id": "CartPole-v1"}, path)  # fmt: skip
    with pytest.raises(UsageError, match="as this version of a3c reads it"):
        Policy.load(path)
    assert evaluate_main([str(path), "--episodes", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "float32 (4,)" in err and "float32 (5,)" in err and len(err.splitlines()) == 1, err
