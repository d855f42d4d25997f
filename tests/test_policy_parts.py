"""The policy's parts: each action distribution against torch.distributions, sampling,
greedy actions, clipping and squashing, and the spaces the envs are adapted to."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.distributions as D
from gymnasium import spaces
from policy_helpers import SpaceEnv, register_space_env

from a3c.actions import (
    BoxActions,
    DiscreteActions,
    MultiBinaryActions,
    MultiDiscreteActions,
    action_spec_from_dict,
)
from a3c.envs import env_spaces, make_env, make_vector_env
from a3c.envs.spaces import action_spec
from a3c.policy import ModelSpec
from a3c.policy.distributions import (
    Bernoulli,
    Categorical,
    DiagGaussian,
    MultiCategorical,
    make_distribution,
)
from hogwild.errors import UsageError


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# ------------------------------------------------------------------ log-prob and entropy


@pytest.mark.parametrize("nvec", [[3, 3], [3, 2, 4], [1, 5]])
def test_multi_categorical_matches_independent_categoricals(nvec):
    dist = MultiCategorical(nvec)
    x = torch.randn(6, sum(nvec), requires_grad=True)
    actions = torch.stack([torch.randint(n, (6,)) for n in nvec], 1)
    lp, ent = dist.log_prob_entropy(x, actions)
    parts = [D.Categorical(logits=p) for p in x.split(nvec, 1)]
    want_lp = sum(c.log_prob(actions[:, i]) for i, c in enumerate(parts))
    want_ent = sum(c.entropy() for c in parts)
    torch.testing.assert_close(lp, want_lp)
    torch.testing.assert_close(ent, want_ent)
    (lp.sum() + ent.sum()).backward()
    assert torch.isfinite(x.grad).all()
    assert dist.max_entropy == pytest.approx(sum(math.log(n) for n in nvec))


def test_bernoulli_matches_torch():
    dist = Bernoulli(5)
    x = torch.randn(7, 5) * 3
    actions = (torch.rand(7, 5) < 0.5).to(torch.int8)
    lp, ent = dist.log_prob_entropy(x, actions)
    want = D.Bernoulli(logits=x)
    torch.testing.assert_close(lp, want.log_prob(actions.float()).sum(-1))
    torch.testing.assert_close(ent, want.entropy().sum(-1))


def test_diag_gaussian_matches_torch_and_learns_its_log_std():
    dist = DiagGaussian([-2.0, -1.0], [2.0, 1.0], log_std_init=-0.5)
    mean = torch.randn(9, 2, requires_grad=True)
    actions = torch.randn(9, 2) * 3
    lp, ent = dist.log_prob_entropy(mean, actions)
    want = D.Normal(mean, dist.log_std.exp())
    torch.testing.assert_close(lp, want.log_prob(actions).sum(-1))
    torch.testing.assert_close(ent, want.entropy().sum(-1))
    (lp.sum() + ent.sum()).backward()
    assert dist.log_std.grad is not None and mean.grad is not None


def test_squashed_gaussian_carries_the_tanh_log_det():
    dist = DiagGaussian([-1.0, -1.0], [1.0, 1.0], log_std_init=0.3, squash=True)
    mean, u = torch.randn(8, 2), torch.randn(8, 2) * 1.5
    lp, _ = dist.log_prob_entropy(mean, u)
    base = D.Normal(mean, dist.log_std.detach().exp())
    squashed = D.TransformedDistribution(base, [D.TanhTransform()])
    torch.testing.assert_close(lp, squashed.log_prob(torch.tanh(u)).sum(-1), atol=1e-4, rtol=1e-4)
    # ... and the env gets the squashed action, mapped onto the bounds.
    wide = DiagGaussian([0.0], [10.0], squash=True)
    np.testing.assert_allclose(wide.to_env(torch.tensor([[0.0], [50.0]])), [[5.0], [10.0]])
    with pytest.raises(UsageError, match="finite bounds"):
        DiagGaussian([-math.inf], [math.inf], squash=True)


# ---------------------------------------------------------------- sampling and greedy


def test_sampling_frequencies_and_moments_match_the_distributions():
    n = 40_000
    probs = torch.tensor([[0.6, 0.3, 0.1, 0.0], [0.25, 0.75, 0.0, 0.0]])
    x = torch.cat([probs[0, :3].log(), probs[1, :2].log()]).expand(n, 5)
    draws = MultiCategorical([3, 2]).sample(x)
    assert draws.shape == (n, 2) and draws.dtype == torch.int64
    for part, k in ((0, 3), (1, 2)):
        freq = torch.bincount(draws[:, part], minlength=k).float() / n
        torch.testing.assert_close(freq, probs[part, :k], atol=0.01, rtol=0)

    p = torch.tensor([0.1, 0.5, 0.9])
    coins = Bernoulli(3).sample(torch.logit(p).expand(n, 3))
    assert coins.dtype == torch.int8 and set(coins.unique().tolist()) <= {0, 1}
    torch.testing.assert_close(coins.float().mean(0), p, atol=0.01, rtol=0)

    gauss = DiagGaussian([-1.0, -1.0], [1.0, 1.0], log_std_init=math.log(0.5))
    mean = torch.tensor([0.3, -2.0])
    a = gauss.sample(mean.expand(n, 2))
    torch.testing.assert_close(a.mean(0), mean, atol=0.02, rtol=0)
    torch.testing.assert_close(a.std(0), torch.tensor([0.5, 0.5]), atol=0.02, rtol=0)


def test_greedy_actions():
    x = torch.tensor([[0.1, 2.0, -1.0, 3.0, 0.0]])
    assert Categorical(5).greedy(x).tolist() == [3]
    assert MultiCategorical([3, 2]).greedy(x).tolist() == [[1, 0]]
    assert Bernoulli(5).greedy(x).tolist() == [[1, 1, 0, 1, 0]]
    assert torch.equal(DiagGaussian([-1.0] * 5, [1.0] * 5).greedy(x), x)


def test_clipping_gives_the_env_in_bound_actions_and_the_loss_the_sampled_ones():
    """The worker's composition: act() stores raw draws, to_env() clips, the loss scores
    the raw draw (so its log-probability is the one that was sampled)."""
    spec = ModelSpec((3,), BoxActions((-0.5,), (0.5,)), log_std_init=1.0)
    model = spec.build()
    obs = torch.randn(500, 3)
    with torch.no_grad():
        raw = model.act(obs)
        env = model.dist.to_env(raw)
        lp, _ = model.dist.log_prob_entropy(model.pi(obs), raw)
    assert (raw.abs() > 0.5).any(), "with std e^1 many draws fall outside the bounds"
    assert env.min() >= -0.5 and env.max() <= 0.5
    np.testing.assert_array_equal(env, np.clip(raw.numpy(), -0.5, 0.5))
    want = D.Normal(model.pi(obs).detach(), math.e).log_prob(raw).sum(-1)
    torch.testing.assert_close(lp, want)
    # Infinite bounds: nothing to clip.
    free = DiagGaussian([-math.inf], [math.inf])
    assert free.to_env(torch.tensor([[1e6]])).item() == 1e6


SPECS = (
    DiscreteActions(4),
    MultiDiscreteActions((3, 4)),
    MultiBinaryActions(3),
    BoxActions((-1.0,), (1.0,)),
)


def test_distribution_speed_is_not_asserted_but_each_one_runs_on_a_batch_of_8():
    for spec in SPECS:
        model = ModelSpec((4,), spec).build()
        a = model.act(torch.randn(8, 4))
        assert a.shape == (8, *model.dist.action_shape) and a.dtype == model.dist.action_dtype
    for bad in (BoxActions((), ()), DiscreteActions(0), {"type": "discrete", "n": 4}):
        with pytest.raises(UsageError, match="malformed action space description"):
            make_distribution(bad)


def test_action_specs_travel_as_the_plain_dicts_checkpoints_keep():
    plain = [
        {"type": "discrete", "n": 4},
        {"type": "multi_discrete", "nvec": [3, 4]},
        {"type": "multi_binary", "n": 3},
        {"type": "box", "low": [-1.0], "high": [1.0]},
    ]
    assert [spec.to_dict() for spec in SPECS] == plain
    assert [action_spec_from_dict(d) for d in plain] == list(SPECS)
    assert MultiDiscreteActions([3, 4]) == SPECS[1] and BoxActions([-1], [1]) == SPECS[3]
    assert ModelSpec((4,), plain[1]).action == SPECS[1]  # as from JSON: kept as its record
    for bad in (
        "discrete",
        None,
        {"n": 2},
        {"type": "discrete", "n": True},
        {"type": "multi_discrete", "nvec": (3, 2)},  # a checkpoint holds lists
        {"type": "box", "low": [-1.0, 0.0], "high": [1.0]},
        {"type": "gaussian", "n": 2},
    ):
        with pytest.raises(UsageError) as e:
            action_spec_from_dict(bad)
        assert str(e.value) == f"malformed action space description {bad!r}"
    with pytest.raises(ValueError, match=r"description \{'type': 'discrete', 'n': 0\}$"):
        ModelSpec((4,), DiscreteActions(0)).build()


# ----------------------------------------------------------------------------- spaces

register_space_env(
    "HogwildSpacesAll-v0",
    spaces.Dict(
        {
            "pos": spaces.Box(-1, 1, (2, 2), np.float64),
            "flag": spaces.Discrete(3, start=1),
            "keys": spaces.MultiBinary(2),
            "pair": spaces.Tuple((spaces.Discrete(2), spaces.MultiDiscrete([2, 3]))),
        }
    ),
    spaces.MultiDiscrete(np.array([[2, 3], [4, 2]]), start=np.array([[1, 0], [0, -1]])),
)
register_space_env(
    "HogwildSpacesBox2D-v0",
    spaces.Box(-1, 1, (3,), np.float32),
    spaces.Box(-np.ones((2, 2)), np.ones((2, 2)), dtype=np.float64),
)
register_space_env(
    "HogwildSpacesInfBox-v0",
    spaces.Box(-1, 1, (3,), np.float32),
    spaces.Box(-np.inf, np.inf, (2,), np.float32),
)


def test_dict_observations_flatten_and_actions_become_zero_based_vectors():
    s = env_spaces("HogwildSpacesAll-v0")
    # 4 (Box 2x2) + 3 (Discrete one-hot) + 2 (MultiBinary) + 2 + 5 (Tuple) = 16 floats.
    assert s.obs_shape == (16,) and s.obs_dtype == "float32"
    assert s.action == MultiDiscreteActions((2, 3, 4, 2))
    env = make_env("HogwildSpacesAll-v0", seed=0)
    obs, _ = env.reset()
    assert obs.dtype == np.float32 and obs.shape == (16,)
    env.step(np.array([1, 2, 3, 1]))
    inner: SpaceEnv = env.unwrapped
    np.testing.assert_array_equal(inner.last_action, [[2, 2], [3, 0]])  # reshaped, shifted
    assert inner.action_space.contains(inner.last_action)


def test_box_actions_of_any_shape_and_infinite_bounds(caplog):
    s = env_spaces("HogwildSpacesBox2D-v0")
    assert s.action == BoxActions((-1.0,) * 4, (1.0,) * 4)
    env = make_env("HogwildSpacesBox2D-v0", seed=0)
    env.reset()
    env.step(np.array([0.1, 0.2, 0.3, 0.4], dtype=np.float32))
    assert env.unwrapped.last_action.shape == (2, 2)
    assert env.unwrapped.last_action.dtype == np.float64
    with caplog.at_level("WARNING"):
        s = env_spaces("HogwildSpacesInfBox-v0")
    assert "infinite bounds" in caplog.text
    assert s.action.low == (-math.inf,) * 2
    assert action_spec(spaces.MultiBinary([2, 3])) == MultiBinaryActions(6)


def test_pendulum_is_a_box_of_one_and_steps_with_clipped_actions():
    s = env_spaces("Pendulum-v1")
    assert s.obs_shape == (3,) and s.action == BoxActions((-2.0,), (2.0,))
    envs = make_vector_env("Pendulum-v1", 2, seed=0)
    envs.reset(seed=0)
    model = ModelSpec(s.obs_shape, s.action, log_std_init=2.0).build()
    torch.manual_seed(0)
    raw = model.act(torch.zeros(2, 3))
    assert raw.shape == (2, 1) and (raw.abs() > 2.0).any(), raw  # std e^2: out of bounds
    actions = model.dist.to_env(raw)
    np.testing.assert_array_equal(actions, np.clip(raw.numpy(), -2.0, 2.0))
    obs, reward, *_ = envs.step(actions)
    assert obs.shape == (2, 3) and np.isfinite(reward).all()
    # What each env applied is the clipped action.
    applied = [float(np.asarray(env.unwrapped.last_u).item()) for env in envs.envs]
    assert applied == pytest.approx(actions[:, 0].tolist())
    envs.close()


register_space_env(
    "HogwildSpacesImageHWC-v0", spaces.Box(0, 255, (12, 12, 3), np.uint8), spaces.Discrete(2)
)
register_space_env("HogwildSpacesGrid-v0", spaces.Box(0, 1, (10, 10), np.bool_), spaces.Discrete(3))


@pytest.mark.parametrize(
    "env_id, shape, channels_last",
    [("HogwildSpacesImageHWC-v0", (12, 12, 3), True), ("HogwildSpacesGrid-v0", (1, 10, 10), False)],
)
def test_images_stay_bytes_and_get_a_conv_encoder(env_id, shape, channels_last):
    s = env_spaces(env_id)
    assert s.obs_shape == shape and s.obs_dtype == "uint8"
    spec = ModelSpec(s.obs_shape, s.action, s.obs_dtype, conv="auto")
    assert spec.image and spec.channels_last == channels_last
    model = spec.build()
    assert type(model.encoder).__name__ == "SmallConv"  # under 36 pixels
    env = make_env(env_id, seed=0)
    obs, _ = env.reset()
    assert obs.dtype == np.uint8 and obs.shape == shape and set(np.unique(obs)) <= set(range(256))
    pi, v = model(torch.from_numpy(np.stack([obs, obs])))
    assert pi.shape == (2, s.action.n) and v.shape == (2,)
    with pytest.raises(UsageError, match="shared conv net"):
        ModelSpec(s.obs_shape, s.action, s.obs_dtype, separate=True).check(UsageError)
