"""A3C building blocks: GAE/n-step targets, the actor-critic model, environment handling."""

from __future__ import annotations

import json
import math
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from policy_helpers import mlp

from a3c.actions import DiscreteActions
from a3c.envs import env_spaces, final_observations, make_env, make_vector_env
from a3c.learning.returns import gae, next_state_values
from a3c.policy import ModelSpec, log_prob_entropy, sample_actions
from hogwild.errors import UsageError


def col(*xs: float) -> torch.Tensor:
    """A [T, 1] float tensor: one environment."""
    return torch.tensor(xs, dtype=torch.float32).unsqueeze(1)


def bcol(*xs: int) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.bool).unsqueeze(1)


# ---------------------------------------------------------------- GAE / n-step returns


def test_nstep_returns_with_termination_mid_rollout() -> None:
    # gamma = 0.5, lambda = 1; the episode terminates at t = 1, the next one runs on.
    rewards = col(1, 2, 3, 4)
    values = col(10, 20, 30, 40)
    terminated = bcol(0, 1, 0, 0)
    # After t = 1 there is nothing to bootstrap from: NaN must be ignored, not propagated.
    next_values = col(20, math.nan, 40, 8)  # 8 = V(obs after the rollout)
    adv, ret = gae(rewards, values, next_values, terminated, terminated, gamma=0.5, lam=1.0)
    # t=3: 4 + .5*8 = 8;  t=2: 3 + .5*8 = 7;  t=1: 2 (terminal);  t=0: 1 + .5*2 = 2
    assert ret.flatten().tolist() == [2.0, 2.0, 7.0, 8.0]
    assert adv.flatten().tolist() == [-8.0, -18.0, -23.0, -32.0]


def test_truncation_mid_rollout_bootstraps_from_final_obs_value() -> None:
    # gamma = 0.5, lambda = 1. The episode is truncated at t = 1 with V(final_obs) = 100;
    # values[2] = 8 is already the *next* episode's first observation.
    rewards = col(1, 1, 1)
    values = col(4, 6, 8)
    truncated = bcol(0, 1, 0)
    terminated = bcol(0, 0, 0)
    final_values = col(0, 100, 0)  # only read where truncated
    next_values = next_state_values(values, torch.tensor([2.0]), truncated, final_values)
    assert next_values.flatten().tolist() == [6.0, 100.0, 2.0]
    adv, ret = gae(rewards, values, next_values, terminated, truncated, gamma=0.5, lam=1.0)
    # t=2: 1 + .5*2 = 2;  t=1: 1 + .5*100 = 51 (not 1 + .5*8, not 1);  t=0: 1 + .5*51
    assert ret.flatten().tolist() == [26.5, 51.0, 2.0]
    assert adv.flatten().tolist() == [22.5, 45.0, -6.0]


def test_gae_lambda_bootstraps_at_rollout_end() -> None:
    # gamma = 0.5, lambda = 0.5, no episode end: the last step bootstraps from V = 8.
    rewards, values = col(1, 0, 2), col(1, 2, 4)
    no = bcol(0, 0, 0)
    next_values = next_state_values(values, torch.tensor([8.0]))
    assert next_values.flatten().tolist() == [2.0, 4.0, 8.0]
    adv, ret = gae(rewards, values, next_values, no, no, gamma=0.5, lam=0.5)
    # deltas: 1 + .5*2 - 1 = 1,  0 + .5*4 - 2 = 0,  2 + .5*8 - 4 = 2
    # A2 = 2,  A1 = 0 + .25*2 = .5,  A0 = 1 + .25*.5 = 1.125
    assert adv.flatten().tolist() == [1.125, 0.5, 2.0]
    assert ret.flatten().tolist() == [2.125, 2.5, 6.0]


def test_gae_multiple_envs_are_independent() -> None:
    # gamma = 0.5, lambda = 0.5, two envs side by side ([T=3, N=2]).
    # env 0: the case above. env 1: terminates at t = 0, then is truncated at the last
    # step t = 2 with V(final_obs) = 4, while the bootstrap value (next episode) is 100.
    rewards = torch.tensor([[1.0, 1.0], [0.0, 1.0], [2.0, 1.0]])
    values = torch.tensor([[1.0, 2.0], [2.0, 2.0], [4.0, 2.0]])
    terminated = torch.tensor([[0, 1], [0, 0], [0, 0]], dtype=torch.bool)
    truncated = torch.tensor([[0, 0], [0, 0], [0, 1]], dtype=torch.bool)
    final_values = torch.tensor([[0.0, 0.0], [0.0, 0.0], [0.0, 4.0]])
    nv = next_state_values(values, torch.tensor([8.0, 100.0]), truncated, final_values)
    adv, ret = gae(rewards, values, nv, terminated, terminated | truncated, gamma=0.5, lam=0.5)
    # env 1 deltas: 1 + 0 - 2 = -1,  1 + .5*2 - 2 = 0,  1 + .5*4 - 2 = 1
    # A2 = 1,  A1 = 0 + .25*1 = .25,  A0 = -1 (terminal: nothing flows back)
    assert adv.tolist() == [[1.125, -1.0], [0.5, 0.25], [2.0, 1.0]]
    assert ret.tolist() == [[2.125, 1.0], [2.5, 2.25], [6.0, 3.0]]


def test_lambda_one_is_discounted_nstep_sum_and_lambda_zero_is_td() -> None:
    g = torch.Generator().manual_seed(0)
    T, N, gamma = 7, 3, 0.9
    rewards, values = torch.randn(T, N, generator=g), torch.randn(T, N, generator=g)
    boot = torch.randn(N, generator=g)
    no = torch.zeros(T, N, dtype=torch.bool)
    nv = next_state_values(values, boot)
    _, ret = gae(rewards, values, nv, no, no, gamma=gamma, lam=1.0)
    for t in range(T):
        expected = sum(gamma**k * rewards[t + k] for k in range(T - t)) + gamma ** (T - t) * boot
        torch.testing.assert_close(ret[t], expected)
    adv0, _ = gae(rewards, values, nv, no, no, gamma=gamma, lam=0.0)
    torch.testing.assert_close(adv0, rewards + gamma * nv - values)


def test_gae_accepts_float_masks_detaches_and_checks_shapes() -> None:
    values = torch.tensor([[1.0], [2.0]], requires_grad=True)
    rewards, nv = col(1, 1), col(2, 3)
    adv_b, ret_b = gae(rewards, values, nv, bcol(1, 0), bcol(1, 0), gamma=0.9, lam=0.95)
    adv_f, ret_f = gae(rewards, values, nv, col(1, 0), col(1, 0), gamma=0.9, lam=0.95)
    assert torch.equal(adv_b, adv_f) and torch.equal(ret_b, ret_f)
    assert not ret_b.requires_grad and not adv_b.requires_grad
    with pytest.raises(ValueError, match="rewards"):
        gae(col(1, 1, 1), values, nv, bcol(0, 0), bcol(0, 0))
    empty = torch.zeros(0, 2)
    with pytest.raises(ValueError, match="time dimension"):
        gae(empty, empty, empty, empty, empty)
    # A single step works too (the rollout-end bootstrap is all there is).
    _, ret = gae(col(1), col(0), col(10), bcol(0), bcol(0), gamma=0.5, lam=0.9)
    assert ret.tolist() == [[6.0]]


# ---------------------------------------------------------------------------- model


@pytest.mark.parametrize("batch", [1, 8])
def test_model_output_shapes(batch: int) -> None:
    model = mlp(4, 3)
    logits, value = model(torch.randn(batch, 4))
    assert logits.shape == (batch, 3) and value.shape == (batch,)
    obs = torch.randn(batch, 4)
    logits2 = model.pi(obs)
    actions = sample_actions(logits2)
    assert actions.shape == (batch,) and actions.dtype == torch.int64
    assert ((actions >= 0) & (actions < 3)).all()
    value2 = model.value(obs)
    assert logits2.shape == (batch, 3) and value2.shape == (batch,)
    assert logits2.requires_grad and value2.requires_grad  # usable for the loss


def test_model_init_is_orthogonal_with_cleanrl_gains() -> None:
    torch.manual_seed(0)
    model = mlp(4, 2, hidden=(64, 32))
    first, second = model.trunk
    eye = torch.eye
    # Orthogonal with gain g: W^T W = g^2 I (tall) or W W^T = g^2 I (wide); g^2 = 2.
    torch.testing.assert_close(first.weight.T @ first.weight, 2 * eye(4), atol=1e-5, rtol=0)
    torch.testing.assert_close(second.weight @ second.weight.T, 2 * eye(32), atol=1e-5, rtol=0)
    policy_w, value_w = model.head.weight[:2], model.head.weight[2:]
    torch.testing.assert_close(policy_w @ policy_w.T, 1e-4 * eye(2), atol=1e-8, rtol=0)
    torch.testing.assert_close(value_w.norm(), torch.tensor(1.0))
    for p in (first.bias, second.bias, model.head.bias):
        assert torch.count_nonzero(p) == 0
    # Policy gain 0.01 => the initial policy is close to uniform.
    probs = torch.softmax(model(torch.randn(16, 4))[0], -1)
    torch.testing.assert_close(probs, torch.full_like(probs, 0.5), atol=0.02, rtol=0)


def test_gumbel_sampling_matches_softmax_and_log_prob_entropy() -> None:
    torch.manual_seed(0)
    p = torch.tensor([0.7, 0.2, 0.1])
    logits = p.log().expand(40_000, 3)
    counts = torch.bincount(sample_actions(logits), minlength=3).float() / 40_000
    torch.testing.assert_close(counts, p, atol=0.01, rtol=0)

    logits = torch.randn(5, 4, requires_grad=True)
    actions = torch.tensor([0, 3, 1, 2, 3])
    lp, ent = log_prob_entropy(logits, actions)
    dist = torch.distributions.Categorical(logits=logits)
    torch.testing.assert_close(lp, dist.log_prob(actions))
    torch.testing.assert_close(ent, dist.entropy())
    (lp.sum() + ent.sum()).backward()
    assert logits.grad is not None
    model = mlp(4, 4)
    obs = torch.randn(6, 4)
    greedy = model.pi(obs).argmax(-1)
    assert greedy.shape == (6,)
    torch.testing.assert_close(model.pi(obs), model(obs)[0], rtol=0, atol=0)


def test_model_spec_rebuilds_the_exact_model() -> None:
    model = mlp(6, 3, hidden=(16,), activation="relu")
    spec = ModelSpec.from_dict(json.loads(json.dumps(model.spec.to_dict())))
    assert spec == model.spec
    assert spec == ModelSpec((6,), DiscreteActions(3), hidden=(16,), activation="relu")
    # A checkpoint from before the policy had parts reads as the same model.
    old = {"obs_dim": 6, "n_actions": 3, "hidden": [16], "activation": "relu"}
    assert ModelSpec.from_dict(old) == spec
    rebuilt = spec.build()
    rebuilt.load_state_dict(model.state_dict())  # strict: same parameter names and shapes
    x = torch.randn(2, 6)
    assert all(torch.equal(a, b) for a, b in zip(model(x), rebuilt(x), strict=True))
    for bad in (
        {"obs_dim": 4},
        {"obs_dim": 4, "n_actions": 0},
        {"obs_dim": 4, "n_actions": 2, "hidden": [8, -1]},
        {"obs_dim": 4, "n_actions": 2, "activation": "gelu"},
        [4, 2],
    ):
        with pytest.raises(UsageError):
            ModelSpec.from_dict(bad)
    with pytest.raises(ValueError):
        mlp(0, 2)


# ----------------------------------------------------------------------- environments


class _TinyEnv(gym.Env):
    """One-step env with configurable spaces, for the validation tests."""

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space) -> None:
        self.observation_space = observation_space
        self.action_space = action_space
        self.last_action = None

    def reset(self, *, seed=None, options=None):  # noqa: ANN001, ANN201
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):  # noqa: ANN001, ANN201
        self.last_action = action
        return self.observation_space.sample(), 0.0, True, False, {}


_TINY = {
    "HogwildTestImage-v0": (spaces.Box(0, 255, (8, 8, 3), np.uint8), spaces.Discrete(2)),
    "HogwildTestText-v0": (spaces.Text(5), spaces.Discrete(2)),
    "HogwildTestSequence-v0": (spaces.Sequence(spaces.Discrete(3)), spaces.Discrete(2)),
    "HogwildTestGraph-v0": (
        spaces.Graph(spaces.Box(0, 1, (2,)), spaces.Discrete(2)),
        spaces.Discrete(2),
    ),
    "HogwildTestTupleAct-v0": (
        spaces.Box(-1, 1, (2,), np.float32),
        spaces.Tuple((spaces.Discrete(2), spaces.Discrete(3))),
    ),
    "HogwildTestIntBox-v0": (spaces.Box(0, 9, (3,), np.int64), spaces.Discrete(3, start=1)),
}
for _id, (_obs, _act) in _TINY.items():
    if _id not in gym.registry:
        gym.register(
            id=_id, entry_point=_TinyEnv, kwargs={"observation_space": _obs, "action_space": _act}
        )


@pytest.mark.parametrize(
    ("env_id", "message"),
    [
        ("NoSuchEnv-v0", "unknown environment id 'NoSuchEnv-v0'"),
        ("cartpole-v1", "did you mean 'CartPole-v1'"),
        ("HogwildTestText-v0", "observation space Text("),
        ("HogwildTestSequence-v0", "observation space Sequence("),
        ("HogwildTestGraph-v0", "observation space Graph("),
        ("HogwildTestTupleAct-v0", "action space Tuple(Discrete(2), Discrete(3))"),
        ("no_such_module_xyz:CartPole-v1", "cannot import module 'no_such_module_xyz'"),
        ("gymnasium:NoSuchEnv-v0", "did not register 'NoSuchEnv-v0'"),
        ("a:b:c", "malformed environment id"),
    ],
)
def test_bad_environments_are_one_line_usage_errors(env_id: str, message: str) -> None:
    for build in (make_env, env_spaces):
        with pytest.raises(UsageError) as info:
            build(env_id)
        assert message in str(info.value)
        assert "\n" not in str(info.value)


def test_bad_env_kwargs_and_env_count_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="bad arguments"):
        make_env("CartPole-v1", no_such_kwarg=1)
    with pytest.raises(UsageError, match="positive integer"):
        make_vector_env("CartPole-v1", 0, seed=0)


def _dims(s) -> tuple[int, int]:  # noqa: ANN001
    """(obs_dim, n_actions) of a float-vector, Discrete-action env's EnvSpaces."""
    assert s.obs_dtype == "float32" and len(s.obs_shape) == 1
    assert isinstance(s.action, DiscreteActions)
    return s.obs_shape[0], s.action.n


def test_module_prefixed_ids_import_and_register(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    assert _dims(env_spaces("gymnasium.envs.classic_control.cartpole:CartPole-v1")) == (4, 2)
    # A user module that registers its env on import, as in `a3c-train --env mymod:MyEnv-v0`.
    mod, env_id = "hogwild_test_envmod", "HogwildTestModEnv-v0"
    (tmp_path / f"{mod}.py").write_text(
        textwrap.dedent(f"""
            import gymnasium as gym
            gym.register(id="{env_id}",
                         entry_point="gymnasium.envs.classic_control.acrobot:AcrobotEnv")
        """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert _dims(env_spaces(f"{mod}:{env_id}")) == (6, 3)
    finally:
        gym.registry.pop(env_id, None)
        sys.modules.pop(mod, None)


def test_discrete_and_integer_observations_become_float32_vectors() -> None:
    env = make_env("FrozenLake-v1", seed=0)
    obs, _ = env.reset()
    assert _dims(env_spaces("FrozenLake-v1")) == (16, 4)
    assert obs.dtype == np.float32 and obs.shape == (16,) and obs.sum() == 1.0 and obs[0] == 1.0
    env = make_env("HogwildTestIntBox-v0", seed=0)
    obs, _ = env.reset()
    assert obs.dtype == np.float32 and obs.shape == (3,)
    assert env.action_space == spaces.Discrete(3)
    env.step(0)
    assert env.unwrapped.last_action == 1  # Discrete(3, start=1): model action 0 -> env 1


def test_vector_env_seeding_and_final_obs_at_truncation() -> None:
    n, seed, horizon = 3, 7, 5
    envs = make_vector_env("CartPole-v1", n, seed=seed, max_episode_steps=horizon)
    assert envs.metadata["autoreset_mode"] == gym.vector.AutoresetMode.SAME_STEP
    obs, _ = envs.reset()
    assert obs.dtype == np.float32 and obs.shape == (n, 4)
    assert len({tuple(row) for row in obs}) == n  # seed + i: distinct sub-envs
    again = make_vector_env("CartPole-v1", n, seed=seed, max_episode_steps=horizon)
    assert np.array_equal(again.reset()[0], obs)  # reproducible without a reset seed ...
    obs, _ = envs.reset(seed=seed)
    assert np.array_equal(again.reset(seed=seed)[0], obs)  # ... and with one

    # Replay the same actions on single envs with the same seeds to know the true last obs.
    singles = [make_env("CartPole-v1", seed=seed + i, max_episode_steps=horizon) for i in range(n)]
    single_obs = np.stack([e.reset(seed=seed + i)[0] for i, e in enumerate(singles)])
    assert np.array_equal(single_obs, obs)

    value = lambda o: o.sum(-1)  # noqa: E731 -- a stand-in value function
    values, next_v, truncs, terms = [], [], [], []
    for t in range(horizon):
        actions = np.array([(t + i) % 2 for i in range(n)])  # CartPole survives 5 steps
        values.append(value(obs))
        obs, _, term, trunc, info = envs.step(actions)
        last = np.stack([e.step(a)[0] for e, a in zip(singles, actions, strict=True)])
        idx, final = final_observations(info, trunc & ~term)
        if t < horizon - 1:
            assert not trunc.any() and idx.size == 0 and final.shape == (0, 0)
            assert np.array_equal(obs, last)
        else:
            assert trunc.all() and not term.any()
            assert idx.tolist() == list(range(n))
            assert np.array_equal(final, last)  # final obs of the truncated episode ...
            assert not np.array_equal(obs, last)  # ... while obs already starts the next one
            assert np.abs(obs).max() <= 0.05  # CartPole's reset distribution
        # What a worker does: V(final_obs) where truncated, V(next obs) otherwise.
        nv = value(obs)
        nv[idx] = value(final)
        next_v.append(nv)
        truncs.append(trunc)
        terms.append(term)
    nv_builder = next_state_values(
        torch.tensor(np.stack(values)),
        torch.tensor(value(obs)),
        torch.tensor(np.stack(truncs)),
        torch.tensor(np.stack(next_v)),
    )
    torch.testing.assert_close(nv_builder, torch.tensor(np.stack(next_v)))
