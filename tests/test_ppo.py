"""Asynchronous PPO's update (a3c.learning.ppo, the Learner) and its settings."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from learner_helpers import cartpole_learner, cartpole_setup
from policy_helpers import mlp
from rollout_helpers import GAMMA, _hand_targets, _model, _rollout

from a3c.actions import DiscreteActions
from a3c.envs import make_vector_env
from a3c.learning.loss import a3c_loss
from a3c.learning.ppo import PPOFigures, behaviour, minibatches, ppo_loss, refresh_targets
from a3c.learning.settings import UpdateSettings
from a3c.policy import ModelSpec
from a3c.run.config import A3CConfig
from a3c.run.worker import learner_settings
from a3c.train import main as train_main
from hogwild.errors import UsageError


def _grads(model, loss) -> torch.Tensor:
    model.zero_grad()
    loss.backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])


@pytest.mark.parametrize("separate", [False, True])
def test_one_epoch_at_ratio_one_is_a2c(separate):
    """Acting weights = learning weights, the whole rollout as one minibatch, nothing
    normalised: the clipped surrogate's gradient is the policy gradient of A2C/A3C."""
    model, r = _model(separate), _rollout()
    b = behaviour(model, r, GAMMA, 0.9)
    s = UpdateSettings(clip_range=0.2, value_coef=0.5, entropy_coef=0.01, normalize_advantage=False)
    loss, figures = ppo_loss(model, r, b, torch.arange(6), s)
    assert isinstance(figures, PPOFigures)
    assert float(figures.approx_kl) == pytest.approx(0.0, abs=1e-7)
    assert float(figures.clip_fraction) == 0
    a2c = UpdateSettings(gamma=GAMMA, gae_lambda=0.9, value_coef=0.5, entropy_coef=0.01)
    a2c_loss, a2c_figures = a3c_loss(model, r, a2c)
    torch.testing.assert_close(_grads(model, loss), _grads(model, a2c_loss))
    # The same value loss, entropy and fit; the surrogate's value is -mean(adv), not A2C's.
    for name in ("value_loss", "entropy", "explained_variance", "flat_values"):
        torch.testing.assert_close(getattr(figures, name), getattr(a2c_figures, name))
    assert float(figures.policy_loss) == pytest.approx(-float(b.advantages.mean()), rel=1e-5)


def test_a_clipped_sample_gives_no_policy_gradient():
    model, r = _model(), _rollout()
    b = behaviour(model, r, GAMMA, 0.9)
    s = UpdateSettings(clip_range=0.2, value_coef=0.0, normalize_advantage=False)
    flat_adv = b.advantages.flatten()
    j = int(flat_adv.abs().argmax())
    one = torch.tensor([j])
    # Inside the clip range (ratio 1): a gradient.
    loss, _ = ppo_loss(model, r, b, one, s)
    assert _grads(model, loss).abs().sum() > 0
    # The behaviour was far less likely to take that action where the advantage is
    # positive (ratio e > 1.2), or far more likely where it is negative (ratio 1/e < 0.8):
    # the surrogate is clipped, constant in the weights.
    sign = 1.0 if flat_adv[j] > 0 else -1.0
    b.log_p.view(-1)[j] -= sign * 1.0
    loss, figures = ppo_loss(model, r, b, one, s)
    assert float(figures.clip_fraction) == 1.0
    assert _grads(model, loss).abs().sum() == 0
    # ...while the other side of the clip (moving back towards the behaviour) still pulls.
    b.log_p.view(-1)[j] += 2 * sign * 1.0
    loss, _ = ppo_loss(model, r, b, one, s)
    assert _grads(model, loss).abs().sum() > 0


def test_value_clipping_bounds_the_value_move():
    model, r = _model(), _rollout()
    b = behaviour(model, r, GAMMA, 0.9)
    b.values += 5.0  # the acting policy's values were far from today's
    free = UpdateSettings(value_coef=1.0, normalize_advantage=False)
    clipped = UpdateSettings(value_coef=1.0, normalize_advantage=False, clip_range_vf=0.1)
    idx = torch.arange(6)
    _, f_free = ppo_loss(model, r, b, idx, free)
    _, f_clip = ppo_loss(model, r, b, idx, clipped)
    v_moved = b.values.flatten() - 0.1  # today's values are > 0.1 below: clipped to -0.1
    want = (b.returns.flatten() - v_moved).pow(2).mean()
    assert float(f_clip.value_loss) == pytest.approx(float(want), rel=1e-5)
    assert float(f_free.value_loss) != pytest.approx(float(f_clip.value_loss))


def test_minibatches_cover_every_sample_or_every_sequence_once():
    flat = minibatches(5, 4, 3, recurrent=False)
    assert len(flat) == 3 and sorted(torch.cat(flat).tolist()) == list(range(20))
    envs = minibatches(5, 4, 2, recurrent=True)
    assert [len(m) for m in envs] == [2, 2] and sorted(torch.cat(envs).tolist()) == [0, 1, 2, 3]


def test_recurrent_minibatch_unrolls_whole_sequences_from_their_stored_state():
    spec = ModelSpec((2,), DiscreteActions(2), hidden=(4,), lstm=3)
    torch.manual_seed(0)
    model = spec.build()
    r = _rollout()
    r.state = (torch.randn(2, 3), torch.randn(2, 3))
    b = behaviour(model, r, GAMMA, 0.9)
    s = UpdateSettings(normalize_advantage=False)
    # Env 1 alone, from its own stored state: the same figures as its share of the whole.
    _, both = ppo_loss(model, r, b, torch.tensor([0, 1]), s)
    _, first = ppo_loss(model, r, b, torch.tensor([0]), s)
    _, second = ppo_loss(model, r, b, torch.tensor([1]), s)
    for name in ("policy_loss", "value_loss", "entropy"):
        half = (getattr(first, name) + getattr(second, name)) / 2
        torch.testing.assert_close(half, getattr(both, name))
    assert float(both.approx_kl) == pytest.approx(0.0, abs=1e-6)  # the behaviour, unrolled alike


@pytest.mark.parametrize("separate", [False, True])
def test_refreshed_targets_follow_the_moved_value_and_keep_the_behaviour(separate):
    model, r = _model(separate), _rollout()
    b = behaviour(model, r, GAMMA, 0.8)
    same = refresh_targets(model, r, b, GAMMA, 0.8)
    torch.testing.assert_close(same.advantages, b.advantages)
    torch.testing.assert_close(same.returns, b.returns)
    with torch.no_grad():  # the value moves (as other workers' steps move it)
        model.head.bias[-1] += 1.5
        model.head.weight[-1] *= -2.0
    fresh = refresh_targets(model, r, b, GAMMA, 0.8)
    adv, ret = _hand_targets(model, r, 0.8)
    np.testing.assert_allclose(fresh.advantages.double().numpy(), adv, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fresh.returns.double().numpy(), ret, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(fresh.returns, b.returns)
    assert fresh.log_p is b.log_p and fresh.values is b.values


@pytest.mark.parametrize("recompute", [False, True])
def test_a_learner_recomputes_targets_between_epochs_only_when_asked(recompute, monkeypatch):
    import a3c.learning.ppo as ppo_module

    calls = []
    real = ppo_module.refresh_targets
    monkeypatch.setattr(ppo_module, "refresh_targets", lambda *a: calls.append(1) or real(*a))
    cfg = A3CConfig(
        algo="appo", n_steps=16, envs_per_worker=4, epochs=3, minibatches=4, lr=1e-2,
        normalize_reward=False, recompute_advantages=recompute,
    )  # fmt: skip
    learner, rollout, shared = cartpole_learner(cfg)
    learner.learn(rollout, steps=0)
    assert learner.stats["updates"] == 3 * 4
    assert len(calls) == (2 if recompute else 0)


@pytest.mark.parametrize("target_kl, steps", [(None, 3 * 4), (1e-9, 1)])
def test_target_kl_stops_a_workers_epochs(target_kl, steps):
    cfg = A3CConfig(
        algo="appo", n_steps=16, envs_per_worker=4, epochs=3, minibatches=4, lr=1e-2,
        target_kl=target_kl, normalize_reward=False,
    )  # fmt: skip
    learner, rollout, shared = cartpole_learner(cfg)
    before = shared.clone()
    learner.learn(rollout, steps=0)
    assert learner.stats["updates"] == steps
    assert learner.stats["kl_stops"] == (0 if target_kl is None else 1)
    assert not torch.equal(shared, before)
    assert learner.stats["approx_kl"] > 0 or target_kl is not None


def test_a3c_steps_rollouts_smaller_than_min_batch_on_their_mean_gradient():
    """Rollouts of 2 samples: one step per 3 of them (MIN_BATCH 5), with their mean
    gradient clipped as one; one sample's gradient clipped alone collapsed CartPole."""
    from a3c.learning.collect import Collector
    from a3c.learning.loss import MIN_BATCH

    cfg = A3CConfig(
        n_steps=1, envs_per_worker=2, optimizer="sgd", lr=0.1, max_grad_norm=0.01,
        normalize_reward=False,
    )  # fmt: skip
    assert MIN_BATCH == 5
    learner, envs = cartpole_setup(cfg)
    model, shared = learner.model, learner.shared
    collector = Collector(envs, model, 1, seed=0)
    start, grads, value_losses = shared.clone(), [], []
    for i in range(3):
        torch.testing.assert_close(shared, start, rtol=0, atol=0)
        rollout = collector.collect()
        loss, figures = a3c_loss(model, rollout, learner.settings.update)
        grad = torch.autograd.grad(loss, list(model.parameters()))
        grads.append(torch.cat([g.flatten() for g in grad]))
        value_losses.append(float(figures.value_loss))
        learner.learn(rollout, steps=0)
        assert learner.stats["updates"] == (1 if i == 2 else 0)
    envs.close()
    mean = torch.stack(grads).mean(0)
    assert float(mean.norm()) > cfg.max_grad_norm  # the clip is on the mean
    expected = start - cfg.lr * mean * (cfg.max_grad_norm / (float(mean.norm()) + 1e-6))
    torch.testing.assert_close(shared, expected)
    assert learner.stats["value_loss"] == pytest.approx(np.mean(value_losses), rel=1e-5)


def test_entropy_and_clip_range_decay_to_their_floor():
    cfg = A3CConfig(
        algo="appo", total_steps=1000, entropy_coef=0.01, entropy_coef_final=0.0,
        clip_range=0.3, clip_range_final=0.1,
    )  # fmt: skip
    settings = learner_settings(cfg)

    def update(steps: int) -> UpdateSettings:
        return settings.schedules.update(settings.update, steps)

    assert update(500).entropy_coef == pytest.approx(0.005)
    assert update(0).clip_range == pytest.approx(0.3)
    assert update(500).clip_range == pytest.approx(0.2)
    assert update(10_000).clip_range == pytest.approx(0.1)
    assert update(10_000).entropy_coef == 0.0


@pytest.mark.parametrize(
    "algo, flag, normalized",
    [
        ("appo", None, True),  # per minibatch by default for APPO (SB3, CleanRL)...
        ("a3c", None, False),  # ...not for A3C (the paper's)
        ("appo", False, False),
        ("a3c", True, True),
        ("appo", True, True),
        ("a3c", False, False),
    ],
)
def test_advantages_are_standardised_by_default_for_appo_alone(algo, flag, normalized):
    cfg = A3CConfig(algo=algo, normalize_advantage=flag)
    assert learner_settings(cfg).update.normalize_advantage is normalized


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--epochs", "0"], "epochs (--epochs) must be at least 1"),
        (["--clip-range", "-1"], "clip_range (--clip-range) must be above 0"),
        (["--minibatches", "257"], "more than the 256 samples of a rollout"),  # 32 x 8
        (["--policy", "lstm", "--minibatches", "9"], "more than the 8 envs per worker"),
    ],
)
def test_bad_appo_settings_are_one_line_and_exit_2(flags, words, capsys, tmp_path):
    argv = ["--algo", "appo", "--preset", "none", "--logdir", str(tmp_path), *flags]
    assert train_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1, err
    with pytest.raises(UsageError):
        A3CConfig(algo="appo", n_steps=5, envs_per_worker=8, minibatches=41)


def test_behaviour_recorded_while_acting_is_the_behaviour_of_a_second_pass():
    """Acting keeps APPO's log-probabilities and values; only the bootstrap rows (the next
    observations and the truncated episodes' last ones) still pass through the model.
    Separate nets do not record: their values would cost a pass per step."""
    from a3c.learning.collect import Collector

    envs = make_vector_env("CartPole-v1", 3, seed=0, max_episode_steps=7)
    torch.manual_seed(0)
    separate = Collector(envs, mlp(4, 2, separate=True), 4, seed=0, record=True).collect()
    assert separate.log_p is None and separate.values is None
    model = mlp(4, 2, hidden=(8,))
    recorded = Collector(envs, model, 16, seed=0, record=True).collect()
    envs.close()
    assert recorded.log_p is not None and recorded.values is not None
    assert recorded.truncated.any() and recorded.final_obs.shape[0] > 0
    second_pass = dataclasses.replace(recorded, log_p=None, values=None)
    got = behaviour(model, recorded, GAMMA, 0.95)
    want = behaviour(model, second_pass, GAMMA, 0.95)
    for name in ("log_p", "values", "advantages", "returns"):
        torch.testing.assert_close(getattr(got, name), getattr(want, name))
    for name in ("explained_variance", "flat_values"):
        got_fit, want_fit = float(getattr(got.fit, name)), float(getattr(want.fit, name))
        assert got_fit == pytest.approx(want_fit, abs=1e-5)


@pytest.mark.parametrize("algo", ["a3c", "appo"])
def test_max_nonfinite_counts_rollouts_for_both_algorithms(algo):
    """--max-nonfinite 3 means three rollouts in a row that could not be learned from in
    full, for A3C's one step and APPO's 16 alike; one of APPO's 16 steps skipped is enough
    (that sample would veto A3C's whole step), and a clean rollout starts the count anew."""
    from a3c.learning.learner import NonFiniteUpdates

    limit, steps_per_rollout = 3, {"a3c": 1, "appo": 4 * 4}[algo]
    cfg = A3CConfig(
        algo=algo, n_steps=16, envs_per_worker=4, epochs=4, minibatches=4, lr=1e-3,
        normalize_reward=False, max_nonfinite=limit,
    )  # fmt: skip
    learner, good, shared = cartpole_learner(cfg)
    all_nan = dataclasses.replace(good, obs=torch.full_like(good.obs, float("nan")))
    one_nan = dataclasses.replace(good, obs=good.obs.clone())
    one_nan.obs[0, 0] = float("nan")  # one sample of 64: one minibatch of APPO's four

    learner.learn(all_nan, steps=0)  # every step skipped: one rollout, not 16 updates
    assert learner.stats["skipped"] == steps_per_rollout
    learner.learn(one_nan, steps=0)
    if algo == "appo":
        assert 0 < learner.stats["updates"] < steps_per_rollout  # the rest stepped
    learner.learn(good, steps=0)  # a clean rollout: the count starts again
    assert torch.isfinite(shared).all()
    for rollout in (all_nan, one_nan):
        learner.learn(rollout, steps=0)
    with pytest.raises(NonFiniteUpdates, match=f"{limit} rollouts in a row"):
        learner.learn(all_nan, steps=0)
