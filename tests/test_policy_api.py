"""A trained policy from Python: ``a3c.Policy.load(...).predict(...)`` and ``export``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces
from policy_helpers import register_space_env

from a3c.api import Policy, evaluate, load
from a3c.envs import env_spaces
from a3c.policy import ModelSpec
from a3c.train import main as train_main
from hogwild.errors import UsageError

REPO = Path(__file__).resolve().parents[1]
# torch 2.13 calls TorchScript deprecated; an exported file is still loaded with it.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated")


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


def run_exported(path: Path, obs: np.ndarray, tmp_path: Path) -> np.ndarray:
    """The exported file, run by a Python that imports neither a3c nor hogwild, on
    ``obs [T, B, ...]``: T steps of B envs, an LSTM's state threaded from zero."""
    np.save(tmp_path / "obs.npy", obs)
    code = f"""
import json, sys, numpy as np, torch
meta = {{"policy.json": ""}}
module = torch.jit.load({str(path)!r}, _extra_files=meta)
size = json.loads(meta["policy.json"])["state_size"]
out = []
with torch.no_grad():
    for obs in torch.as_tensor(np.load({str(tmp_path / "obs.npy")!r})):
        if size:
            if not out:
                h = c = torch.zeros(len(obs), size)
            actions, h, c = module(obs, h, c)
        else:
            actions = module(obs)
        out.append(actions.numpy())
assert not [m for m in sys.modules if m.split(".")[0] in ("a3c", "hogwild")], "imported us"
np.save({str(tmp_path / "actions.npy")!r}, np.stack(out))
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return np.load(tmp_path / "actions.npy")


@pytest.mark.parametrize("name", ["cartpole", "pendulum", "frozenlake", "lstm"])
def test_the_exported_module_acts_exactly_as_predict(checkpoints, name, tmp_path):
    policy = Policy.load(checkpoints[name])
    steps = 5 if policy.recurrent else 1
    obs = np.stack([sample_batch(policy.observation_space, 32, seed=t)[1] for t in range(steps)])
    path = policy.export(tmp_path / "policy.pt")
    exported = run_exported(path, obs, tmp_path)
    state, expected = None, []
    for batch in obs:
        actions, state = policy.predict(batch, state)
        expected.append(actions)
    assert exported.shape == np.shape(expected) and exported.dtype == np.asarray(expected).dtype
    assert np.array_equal(exported, expected) or np.allclose(exported, expected, atol=1e-6)


def test_dict_observations_cannot_be_exported(checkpoints, tmp_path):
    with pytest.raises(UsageError, match="use predict"):
        Policy.load(checkpoints["copybits"]).export(tmp_path / "x.pt")
    assert not (tmp_path / "x.pt").exists()


def test_bad_input_is_one_line(checkpoints, tmp_path):
    with pytest.raises(UsageError):
        Policy.load(tmp_path / "missing.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(UsageError):
        Policy.load(tmp_path / "junk.pt")
    policy = Policy.load(checkpoints["cartpole"])
    with pytest.raises(UsageError, match="does not fit"):
        policy.predict(np.zeros(7))


# Untrained policies on one-step envs with awkward spaces: every adapter the run puts
# between env and model has to come out the same from predict and from the exported file.
ODD_SPACES = {
    "Float64Grid_MultiDiscreteStart-v0": (
        spaces.Box(-5.0, 5.0, (2, 3), np.float64),
        spaces.MultiDiscrete([[2, 3], [4, 5]], start=[[1, 1], [0, -2]]),
        {"normalize_obs": True},
    ),
    "IntBox_SquashedMatrix-v0": (
        spaces.Box(0, 9, (5,), np.int32),
        spaces.Box(-1.0, 2.0, (2, 2), np.float64),
        {"squash": True},
    ),
    "DiscreteStart_LSTM-v0": (
        spaces.Discrete(5, start=3),
        spaces.Discrete(3, start=-1),
        {"lstm": 8},
    ),
    "BoolImage_MultiBinary-v0": (
        spaces.Box(0, 1, (10, 10), np.bool_),
        spaces.MultiBinary([2, 2]),
        {},
    ),
}


@pytest.mark.parametrize("env_id", sorted(ODD_SPACES))
def test_every_adapter_is_exported(env_id, tmp_path):
    obs_space, act_space, kwargs = ODD_SPACES[env_id]
    register_space_env(env_id, obs_space, act_space)
    torch.manual_seed(0)
    shape, dtype, action = env_spaces(env_id)
    model = ModelSpec(shape, action, dtype, **kwargs).build()
    with torch.no_grad():
        model.head.weight.normal_()  # decisive logits: actions that vary with the input
        for name, p in model.named_parameters():
            if name.endswith("bias"):  # else a ReLU net ignores the input's scale
                p.uniform_(-0.1, 0.1)
        if model.normalize_obs:
            model.set_obs_stats(torch.rand(model.spec.obs_dim), 1 + torch.rand(model.spec.obs_dim))
    policy = Policy(model, env_id, {})
    assert policy.observation_space == obs_space and policy.action_space == act_space
    module = torch.jit.load(str(policy.export(tmp_path / "policy.pt")))
    rows, batch = sample_batch(obs_space, 64, seed=5)
    state = policy.initial_state(64)
    actions, _ = policy.predict(batch, state)
    with torch.no_grad():
        x = torch.as_tensor(batch)
        exported = module(x, *state)[0] if state else module(x)
    assert exported.dtype == torch.from_numpy(actions).dtype
    assert np.allclose(exported.numpy(), actions, atol=1e-6)
    assert all(act_space.contains(a) for a in actions)
    assert len({np.asarray(a).tobytes() for a in actions}) > 1, "a constant policy tests little"
    single, _ = policy.predict(rows[0], policy.initial_state(1))
    assert np.allclose(single, actions[0], atol=1e-5)
