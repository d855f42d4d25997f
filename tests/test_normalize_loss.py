"""Running statistics, return scaling, the A3C loss, the model's nets and buffers, and the
evaluator's snapshots: a3c.learning.normalize, a3c.learning.loss, a3c.learning.returns,
a3c.policy, hogwild.flat, hogwild.evaluator."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.multiprocessing as tmp
from engine_helpers import (
    build_probe_with_buffers,
    child_pids,
    collect_scores,
    score_probe_buffers,
    wait_for,
)
from policy_helpers import mlp
from torch import nn

from a3c.envs import make_vector_env
from a3c.learning.collect import Collector
from a3c.learning.loss import A3CFigures, a3c_loss
from a3c.learning.normalize import EPS, ReturnScaler, RunningMeanStd, merge_rows
from a3c.learning.returns import value_fit
from a3c.learning.rollout import Rollout
from a3c.learning.settings import UpdateSettings
from a3c.policy import OBS_CLIP, ActorCritic, log_prob_entropy
from hogwild.evaluator import Evaluator
from hogwild.flat import flatten_buffers, flatten_parameters

pytestmark = pytest.mark.usefixtures("hang_guard")

# -- RunningMeanStd -------------------------------------------------------------------------

OFFSET = torch.tensor([1e6, -5e3, 0.0], dtype=torch.float64)
SCALE = torch.tensor([1.0, 1e-3, 10.0], dtype=torch.float64)


def _batches(seed: int, sizes: tuple[int, ...]) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [OFFSET + SCALE * torch.randn(n, 3, generator=g, dtype=torch.float64) for n in sizes]


SIZES = ((50, 1, 0, 173, 7), (3, 0, 120), (1, 1, 64))


def _fill(rms: RunningMeanStd, writers: int) -> np.ndarray:
    """Each writer adds batches of its own sizes (empty and single-sample ones included)."""
    seen = []
    for w in range(writers):
        for x in _batches(seed=w, sizes=SIZES[w]):
            rms.add(w, x)
            seen.append(x.numpy())
    return np.concatenate(seen)


def _assert_matches_numpy(rms: RunningMeanStd, data: np.ndarray) -> None:
    mean, var = rms.mean_var()
    assert mean.dtype == var.dtype == torch.float64
    np.testing.assert_allclose(mean.numpy(), data.mean(0), rtol=1e-13, atol=0)
    # E[x^2] - mean^2 would be off by ~1e-4 (relative) for the feature at 1e6 +- 1.
    np.testing.assert_allclose(var.numpy(), data.var(0), rtol=1e-9, atol=0)
    assert float(rms.merged()[0]) == len(data)


def test_running_mean_std_merges_writers_exactly_despite_a_large_offset():
    rms = RunningMeanStd(writers=3, dim=3)
    data = _fill(rms, writers=3)
    assert len(data) == 231 + 123 + 66
    _assert_matches_numpy(rms, data)
    # Each writer's row holds exactly its own samples; the last row, other nodes', none.
    assert rms.rows[:, 0].tolist() == [231.0, 123.0, 66.0, 0.0]
    own = np.concatenate([x.numpy() for x in _batches(seed=1, sizes=SIZES[1])])
    np.testing.assert_allclose(rms.rows[1, 1:4].numpy(), own.mean(0), rtol=1e-13)
    np.testing.assert_allclose(rms.rows[1, 4:].numpy(), own.var(0) * len(own), rtol=1e-9)
    # merge_rows of all rows is the same as merged(); rows are not modified by reading.
    before = rms.rows.clone()
    torch.testing.assert_close(merge_rows(rms.rows), rms.merged(), rtol=0, atol=0)
    assert torch.equal(rms.rows, before)


def test_running_mean_std_other_nodes_row_counts_their_samples_once():
    here, there = RunningMeanStd(writers=2, dim=3), RunningMeanStd(writers=1, dim=3)
    mine = _fill(here, writers=2)
    theirs = np.concatenate([x.numpy() for x in _batches(seed=9, sizes=(40, 3))])
    for x in _batches(seed=9, sizes=(40, 3)):
        there.add(0, x)
    torch.testing.assert_close(here.local(), here.merged(), rtol=0, atol=0)
    here.set_remote([there.local()])
    _assert_matches_numpy(here, np.concatenate([mine, theirs]))
    torch.testing.assert_close(here.local()[0], torch.tensor(float(len(mine)), dtype=torch.float64))
    here.set_remote([there.local()])  # set, not added: a second round counts nothing twice
    _assert_matches_numpy(here, np.concatenate([mine, theirs]))
    here.set_remote([])
    _assert_matches_numpy(here, mine)


def test_running_mean_std_before_any_sample_and_state_round_trip():
    rms = RunningMeanStd(writers=2, dim=3)
    mean, var = rms.mean_var()
    assert mean.tolist() == [0.0] * 3 and var.tolist() == [1.0] * 3
    data = _fill(rms, writers=2)
    state = rms.state()
    assert state.shape == (1 + 2 * 3,) and state.dtype == torch.float64

    resumed = RunningMeanStd(writers=4, dim=3)  # another worker count: still one merged row
    resumed.load(state)
    assert torch.equal(resumed.rows[0], state) and not resumed.rows[1:].any()
    torch.testing.assert_close(resumed.state(), state, rtol=0, atol=0)
    _assert_matches_numpy(resumed, data)
    # Both go on with the same samples and stay the statistics of everything seen.
    more = _batches(seed=77, sizes=(30,))[0]
    rms.add(1, more)
    resumed.add(3, more)
    everything = np.concatenate([data, more.numpy()])
    _assert_matches_numpy(rms, everything)
    _assert_matches_numpy(resumed, everything)
    # load() accepts what a checkpoint gives back (a float32 tensor or a list) as float64.
    resumed.load(state.tolist())
    torch.testing.assert_close(resumed.state(), state, rtol=0, atol=0)


@pytest.mark.parametrize("shape", [(5,), (1, 7), (9,), ()])
def test_running_mean_std_load_rejects_a_wrong_shape(shape):
    rms = RunningMeanStd(writers=1, dim=3)
    rms.add(0, torch.ones(2, 3))
    before = rms.rows.clone()
    with pytest.raises(ValueError, match=r"shape .*expected \(7,\)"):
        rms.load(torch.zeros(shape))
    assert torch.equal(rms.rows, before)  # nothing half-loaded


def _add_in_child(rms: RunningMeanStd, writer: int, seed: int) -> None:
    torch.set_num_threads(1)
    for x in _batches(seed, sizes=(64, 5)):
        rms.add(writer, x)


def _run_forked(rms: RunningMeanStd, writer: int, seed: int) -> None:
    proc = tmp.get_context("fork").Process(target=_add_in_child, args=(rms, writer, seed))
    proc.start()
    proc.join(30)
    assert proc.exitcode == 0, proc.exitcode


def test_running_mean_std_row_written_by_another_process_is_seen():
    rms = RunningMeanStd(writers=2, dim=3).share_memory()
    assert rms.rows.is_shared()
    mine = _batches(seed=3, sizes=(20,))[0]
    rms.add(0, mine)
    _run_forked(rms, writer=1, seed=4)
    assert rms.rows[1, 0] == 69.0
    child = np.concatenate([x.numpy() for x in _batches(seed=4, sizes=(64, 5))])
    _assert_matches_numpy(rms, np.concatenate([mine.numpy(), child]))
    # Control: without share_memory() the child's row stays in the child.
    private = RunningMeanStd(writers=2, dim=3)
    _run_forked(private, writer=1, seed=4)
    assert not private.rows.any()


# -- ReturnScaler ---------------------------------------------------------------------------

REWARDS = np.array([[1.0, -2.0], [0.5, 3.0], [2.0, 1.0], [-1.0, 0.0], [4.0, 2.0]])
DONES = np.array([[False, False], [True, False], [False, True], [False, False], [True, True]])


def _hand_returns(gamma: float) -> list[float]:
    """R = gamma * R + r per env, folded in before the reset at an episode's end."""
    out, running = [], [0.0, 0.0]
    for rewards, dones in zip(REWARDS.tolist(), DONES.tolist(), strict=True):
        for k in range(2):
            running[k] = gamma * running[k] + rewards[k]
            out.append(running[k])
            if dones[k]:
                running[k] = 0.0
    return out


def test_return_scaler_folds_in_discounted_returns_reset_at_episode_ends():
    gamma = 0.9
    stats = RunningMeanStd(writers=2, dim=1)
    scaler = ReturnScaler(stats, writer=1, num_envs=2, gamma=gamma)
    assert scaler.scale() == pytest.approx(1 / math.sqrt(1 + EPS), rel=1e-12)
    for t in range(3):
        scaler.observe(REWARDS[t], DONES[t])
    assert not stats.rows.any()  # nothing shared before flush()
    scaler.flush()
    scaler.flush()  # nothing new: adds nothing
    for t in range(3, 5):  # the running returns carry over a flush
        scaler.observe(REWARDS[t], DONES[t])
    scaler.flush()

    hand = np.array(_hand_returns(gamma))
    # e.g. env 0: 1, 0.9 + 0.5 (done), 2, 1.8 - 1, 0.72 + 4 (done)
    np.testing.assert_allclose(hand[0::2], [1.0, 1.4, 2.0, 0.8, 4.72])
    np.testing.assert_allclose(hand[1::2], [-2.0, 1.2, 2.08, 0.0, 2.0])
    assert stats.rows[0].tolist() == [0.0, 0.0, 0.0]  # only its own writer's row
    assert stats.rows[1, 0] == len(hand)
    mean, var = stats.mean_var()
    assert float(mean[0]) == pytest.approx(hand.mean(), rel=1e-12)
    assert float(var[0]) == pytest.approx(hand.var(), rel=1e-12)
    assert scaler.scale() == pytest.approx(1 / math.sqrt(hand.var() + 1e-8), rel=1e-12)


def test_a_collector_hands_out_rewards_scaled_by_the_returns_shared_before_them():
    """The collector owns the scaling: a rollout's rewards come out divided by the std of
    the returns shared before it, and its own returns are shared once it is scaled."""
    stats = RunningMeanStd(writers=2, dim=1)
    stats.add(0, np.array([[0.0], [4.0]]))  # another worker's returns: variance 4
    envs = make_vector_env("CartPole-v1", 2, seed=0)
    torch.manual_seed(0)
    collector = Collector(envs, mlp(4, 2), 5, seed=0, return_rms=stats, writer=1, gamma=0.9)
    rollout = collector.collect()
    envs.close()
    # CartPole pays 1 a step: every reward is 1 / sqrt(4 + eps).
    np.testing.assert_allclose(rollout.rewards.numpy(), 1 / math.sqrt(4 + EPS), rtol=1e-6)
    assert stats.rows[1, 0] == rollout.rewards.numel()


# -- a3c_loss -------------------------------------------------------------------------------

GAMMA = 0.9


def _rollout() -> Rollout:
    """T=3 steps of K=2 envs.

    env 0: truncated at t=1 (bootstrapped from its final observation), then a new episode
    bootstrapped from ``next_obs``. env 1: terminated at t=0 (no bootstrap), then a new
    episode truncated at the rollout's last step (from its final observation, not
    ``next_obs``).
    """
    g = torch.Generator().manual_seed(1)
    obs = torch.randn(3, 2, 2, generator=g)
    truncated = torch.tensor([[False, False], [True, False], [False, True]])
    terminated = torch.tensor([[False, True], [False, False], [False, False]])
    return Rollout(
        obs=obs,
        actions=torch.tensor([[0, 1], [1, 1], [0, 0]]),
        rewards=torch.tensor([[1.0, -2.0], [0.5, 3.0], [2.5, -1.0]]),
        terminated=terminated,
        dones=terminated | truncated,
        next_obs=torch.randn(2, 2, generator=g),
        truncated=truncated,
        # row-major order of truncated: (t=1, env 0), then (t=2, env 1)
        final_obs=torch.tensor([[2.0, -1.0], [-1.5, 0.5]]),
    )


def _hand_targets(model: ActorCritic, r: Rollout, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """GAE advantages and value targets, one scalar at a time, from the model's values."""
    with torch.no_grad():
        v = model.value(r.obs.reshape(6, 2)).view(3, 2).double().numpy()
        boot = model.value(r.next_obs).double().numpy()
        final = model.value(r.final_obs).double().numpy()
    rew = r.rewards.double().numpy()
    # What comes after each step: the next step's state, the rollout's next_obs, a final
    # observation (truncation) or nothing (termination).
    after = {
        (0, 0): v[1, 0],
        (1, 0): final[0],
        (2, 0): boot[0],
        (0, 1): 0.0,
        (1, 1): v[2, 1],
        (2, 1): final[1],
    }
    episode_goes_on = {(0, 0): True, (1, 0): False, (0, 1): False, (1, 1): True}
    adv = np.zeros((3, 2))
    for k in range(2):
        for t in (2, 1, 0):
            delta = rew[t, k] + GAMMA * after[t, k] - v[t, k]
            carry = adv[t + 1, k] if t < 2 and episode_goes_on[t, k] else 0.0
            adv[t, k] = delta + GAMMA * lam * carry
    return adv, adv + v


def _model(separate: bool = False, normalize_obs: bool = False) -> ActorCritic:
    torch.manual_seed(0)
    return mlp(2, 2, hidden=(4,), separate=separate, normalize_obs=normalize_obs)


def _log_probs(model: ActorCritic, r: Rollout) -> tuple[np.ndarray, np.ndarray]:
    with torch.no_grad():
        lp, ent = log_prob_entropy(model.pi(r.obs.reshape(6, 2)), r.actions.reshape(6))
    return lp.double().numpy(), ent.double().numpy()


@pytest.mark.parametrize("separate", [False, True])
@pytest.mark.parametrize("lam", [1.0, 0.8])
def test_a3c_loss_targets_bootstrap_truncations_and_not_terminations(separate, lam):
    model, r = _model(separate), _rollout()
    s = UpdateSettings(gamma=GAMMA, gae_lambda=lam, value_coef=0.5, entropy_coef=0.01)
    loss, figures = a3c_loss(model, r, s)
    assert isinstance(figures, A3CFigures) and not figures.stacked().requires_grad

    adv, ret = _hand_targets(model, r, lam)
    with torch.no_grad():
        v = model.value(r.obs.reshape(6, 2)).view(3, 2).double().numpy()
    if lam == 1.0:  # n-step returns, written out
        with torch.no_grad():
            vf = model.value(r.final_obs).double().numpy()
            vb = model.value(r.next_obs).double().numpy()
        want = np.zeros((3, 2))
        want[2] = [2.5 + GAMMA * vb[0], -1.0 + GAMMA * vf[1]]
        want[1] = [0.5 + GAMMA * vf[0], 3.0 + GAMMA * want[2, 1]]
        want[0] = [1.0 + GAMMA * want[1, 0], -2.0]
        np.testing.assert_allclose(ret, want, rtol=1e-12)
    lp, ent = _log_probs(model, r)
    policy_loss = -(lp * adv.reshape(6)).mean()
    value_loss = ((ret - v) ** 2).mean()
    explained = 1 - (ret - v).var(ddof=1) / ret.var(ddof=1)
    want = {
        "policy_loss": policy_loss,
        "value_loss": value_loss,
        "entropy": ent.mean(),
        "explained_variance": explained,
        "flat_values": 0.0,  # the values vary: not flat
    }
    got = {name: float(getattr(figures, name)) for name in want}
    np.testing.assert_allclose(list(got.values()), list(want.values()), rtol=1e-5, atol=1e-6)
    assert set(want) == set(A3CFigures.names())
    total = policy_loss + 0.5 * value_loss - 0.01 * ent.mean()
    assert float(loss.detach()) == pytest.approx(total, rel=1e-5, abs=1e-6)


def test_a3c_loss_normalized_advantage_and_huber_value_loss():
    model, r = _model(), _rollout()
    adv, ret = _hand_targets(model, r, lam=1.0)
    with torch.no_grad():
        v = model.value(r.obs.reshape(6, 2)).view(3, 2).double().numpy()
    lp, _ = _log_probs(model, r)

    s = UpdateSettings(gamma=GAMMA, normalize_advantage=True, value_loss="huber")
    loss, figures = a3c_loss(model, r, s)
    norm = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)
    policy_loss = -(lp * norm.reshape(6)).mean()
    assert float(figures.policy_loss) == pytest.approx(policy_loss, rel=1e-5, abs=1e-6)
    d = np.abs(ret - v)
    assert (d < 1).any() and (d > 1).any(), d  # both branches of the Huber loss are used
    huber = np.where(d < 1, 0.5 * d**2, d - 0.5).mean()
    assert float(figures.value_loss) == pytest.approx(huber, rel=1e-5)
    total = float(figures.policy_loss) + 0.5 * huber
    assert float(loss.detach()) == pytest.approx(total, rel=1e-5, abs=1e-6)

    # The plain settings are different figures: the options do act.
    _, plain = a3c_loss(model, r, UpdateSettings(gamma=GAMMA))
    assert float(plain.value_loss) == pytest.approx(((ret - v) ** 2).mean(), rel=1e-5)
    assert float(plain.value_loss) > float(figures.value_loss)
    assert float(plain.policy_loss) != float(figures.policy_loss)


def test_a3c_loss_without_truncations_reads_no_final_observation():
    model, r = _model(), _rollout()
    r.truncated = torch.zeros(3, 2, dtype=torch.bool)
    r.dones = r.terminated.clone()
    r.final_obs = torch.empty(0, 2)
    _, figures = a3c_loss(model, r, UpdateSettings(gamma=GAMMA))
    with torch.no_grad():
        v = model.value(r.obs.reshape(6, 2)).view(3, 2).double().numpy()
        vb = model.value(r.next_obs).double().numpy()
    rew = r.rewards.double().numpy()
    ret = np.zeros((3, 2))
    ret[2] = rew[2] + GAMMA * vb
    ret[1] = rew[1] + GAMMA * ret[2]
    ret[0, 0] = rew[0, 0] + GAMMA * ret[1, 0]
    ret[0, 1] = rew[0, 1]  # terminated
    assert float(figures.value_loss) == pytest.approx(((ret - v) ** 2).mean(), rel=1e-5)


@pytest.mark.parametrize("separate", [False, True])
def test_values_are_flat_only_when_the_net_gives_every_observation_one_value(separate):
    """A real CartPole rollout: a fresh net's values vary with the observation; with its
    first layers' weights zeroed (what a dead ReLU layer does: no input gets through)
    they do not, while the returns still do; constant returns are nothing to explain."""
    envs = make_vector_env("CartPole-v1", 4, seed=0)
    torch.manual_seed(0)
    model = mlp(4, 2, hidden=(16, 16), separate=separate)
    rollout = Collector(envs, model, 64, seed=0).collect()
    envs.close()
    fit = a3c_loss(model, rollout, UpdateSettings())[1]
    assert float(fit.flat_values) == 0.0 and float(fit.explained_variance) != 0.0

    with torch.no_grad():
        for layer in model.modules():
            if isinstance(layer, nn.Linear) and layer.in_features == 4:
                layer.weight.zero_()
    fit = a3c_loss(model, rollout, UpdateSettings())[1]
    assert float(fit.flat_values) == 1.0 and abs(float(fit.explained_variance)) < 1e-6

    def fit_of(pred: torch.Tensor, target: torch.Tensor) -> tuple[float, float]:
        fit = value_fit(pred, target)
        return float(fit.explained_variance), float(fit.flat_values)

    values = torch.linspace(0.0, 1.0, 64)
    assert fit_of(values, values) == (1.0, 0.0)
    assert fit_of(torch.full((64,), 0.3), torch.full((64,), 2.0)) == (0.0, 0.0)
    assert fit_of(torch.full((64,), 0.3), values) == (0.0, 1.0)


def _grads(loss: torch.Tensor, model: ActorCritic) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    loss.backward()
    return {
        name: torch.zeros_like(p) if p.grad is None else p.grad.clone()
        for name, p in model.named_parameters()
    }


def test_separate_nets_keep_the_policy_gradient_out_of_the_value_net():
    model, r = _model(separate=True), _rollout()
    loss, _ = a3c_loss(model, r, UpdateSettings(gamma=GAMMA, value_coef=0.0, entropy_coef=0.0))
    grads = _grads(loss, model)
    for name in ("value_trunk.0.weight", "value_trunk.0.bias"):
        assert not grads[name].any(), name
    assert not grads["head.weight"][2:].any() and not grads["head.bias"][2:].any()
    assert grads["trunk.0.weight"].abs().sum() > 0 and grads["head.weight"][:2].abs().sum() > 0

    # The value loss alone reaches the value net only.
    loss, _ = a3c_loss(model, r, UpdateSettings(gamma=GAMMA, value_coef=1.0))
    policy_loss = a3c_loss(model, r, UpdateSettings(gamma=GAMMA, value_coef=0.0))[0]
    grads = _grads(loss - policy_loss, model)
    assert grads["value_trunk.0.weight"].abs().sum() > 0
    assert torch.allclose(grads["trunk.0.weight"], torch.zeros(4, 2), atol=1e-7)

    # A shared trunk gets the value loss's gradient too.
    shared = _model(separate=False)
    loss, _ = a3c_loss(shared, r, UpdateSettings(gamma=GAMMA, value_coef=1.0))
    policy_loss = a3c_loss(shared, r, UpdateSettings(gamma=GAMMA, value_coef=0.0))[0]
    assert _grads(loss - policy_loss, shared)["trunk.0.weight"].abs().sum() > 1e-3


# -- ActorCritic ----------------------------------------------------------------------------


@pytest.mark.parametrize("separate", [False, True])
def test_logits_and_value_agree_with_forward(separate):
    model = _model(separate=separate)
    obs = torch.randn(5, 2)
    logits, value = model(obs)
    assert logits.shape == (5, 2) and value.shape == (5,)
    torch.testing.assert_close(model.pi(obs), logits, rtol=0, atol=0)
    torch.testing.assert_close(model.value(obs), value, rtol=0, atol=0)
    names = {n for n, _ in model.named_parameters()}
    assert any(n.startswith("value_trunk") for n in names) == separate


def test_separate_nets_share_no_layer():
    model = _model(separate=True)
    obs = torch.randn(5, 2)
    logits, value = model(obs)
    assert not torch.equal(model.trunk[0].weight, model.value_trunk[0].weight)
    with torch.no_grad():
        model.trunk[0].weight.add_(1.0)
    torch.testing.assert_close(model.value(obs), value, rtol=0, atol=0)
    assert not torch.allclose(model.pi(obs), logits)
    with torch.no_grad():
        model.value_trunk[0].weight.add_(1.0)
    assert not torch.allclose(model.value(obs), value)


def test_observation_statistics_are_buffers_not_parameters():
    model = _model(separate=True, normalize_obs=True)
    params = dict(model.named_parameters())
    assert "obs_mean" not in params and "obs_std" not in params
    assert {n for n, _ in model.named_buffers()} == {"obs_mean", "obs_std"}
    mean, std = torch.tensor([100.0, -3.0]), torch.tensor([2.0, 0.01])
    model.set_obs_stats(mean, std)

    clone = mlp(2, 2, hidden=(4,), separate=True, normalize_obs=True)
    clone.load_state_dict(model.state_dict())  # strict: the buffers travel with it
    assert torch.equal(clone.obs_mean, mean) and torch.equal(clone.obs_std, std)
    obs = torch.tensor([[102.0, -3.0], [90.0, 5.0]])
    for a, b in zip(clone(obs), model(obs), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)

    # The statistics act: the same as a plain model fed (obs - mean) / std, clipped.
    plain = mlp(2, 2, hidden=(4,), separate=True)
    plain.load_state_dict(model.state_dict(), strict=False)
    normed = ((obs - mean) / std).clamp(-OBS_CLIP, OBS_CLIP)
    assert normed[1].abs().max() == OBS_CLIP
    for a, b in zip(plain(normed), model(obs), strict=True):
        torch.testing.assert_close(a, b)
    # Not part of the flat parameter vector the optimizer steps.
    assert flatten_parameters(model).numel() == sum(p.numel() for p in params.values())


# -- flatten_buffers ------------------------------------------------------------------------


def test_flatten_buffers_makes_them_views_of_one_tensor():
    model = _model(normalize_obs=True)
    model.set_obs_stats(torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0]))
    flat = flatten_buffers(model)
    assert flat.tolist() == [1.0, 2.0, 3.0, 4.0]  # values kept, in registration order
    assert model.obs_mean.data_ptr() == flat.data_ptr()
    flat.copy_(torch.tensor([5.0, 6.0, 7.0, 8.0]))
    assert model.obs_mean.tolist() == [5.0, 6.0] and model.obs_std.tolist() == [7.0, 8.0]
    assert model.state_dict()["obs_std"].tolist() == [7.0, 8.0]
    model.set_obs_stats(torch.zeros(2), torch.ones(2))  # and the other way round
    assert flat.tolist() == [0.0, 0.0, 1.0, 1.0]
    other = _model(normalize_obs=True)
    other.load_state_dict({**model.state_dict(), "obs_mean": torch.tensor([9.0, 9.0])})
    flat_other = flatten_buffers(other)
    flat_other.copy_(flat)
    assert other.obs_mean.tolist() == [0.0, 0.0]


def test_flatten_buffers_skips_integer_buffers_and_may_be_empty():
    assert flatten_buffers(_model()).numel() == 0
    assert flatten_buffers(nn.Linear(3, 2)).shape == (0,)
    bn = nn.BatchNorm1d(3)  # running_mean, running_var (float), num_batches_tracked (int)
    flat = flatten_buffers(bn)
    assert flat.numel() == 6 and bn.num_batches_tracked.dtype == torch.int64
    bn.train()
    bn(torch.randn(8, 3) + 5.0)  # batch norm updates its statistics in place: in flat
    assert flat[:3].min() > 0.1 and int(bn.num_batches_tracked) == 1
    torch.testing.assert_close(flat[:3], bn.running_mean, rtol=0, atol=0)


# -- Evaluator snapshots --------------------------------------------------------------------


@pytest.fixture
def evaluator():
    before = child_pids()
    made: list[Evaluator] = []

    def make(numel: int, buffers_numel: int) -> Evaluator:
        ev = Evaluator(
            build_probe_with_buffers,
            score_probe_buffers,
            numel,
            buffers_numel=buffers_numel,
            device="cpu",
            seed=0,
            slots=2,
        )
        made.append(ev)
        return ev

    yield make
    for ev in made:
        ev.stop(timeout=5)
    assert tmp.active_children() == []
    assert wait_for(lambda: not (child_pids() - before), 2.0), child_pids() - before


def test_evaluator_keeps_exactly_the_snapshot_it_sent(evaluator):
    model = build_probe_with_buffers()
    params, buffers = flatten_parameters(model), flatten_buffers(model)
    assert buffers.numel() == 8
    ev = evaluator(params.numel(), buffers.numel())
    params.copy_(torch.randn(params.numel()))
    buffers.copy_(torch.arange(8.0))
    offered = {"params": params.clone(), "buffers": buffers.clone()}
    assert ev.offer(params, 7, buffers, keep=lambda: {"note": "kept"}) is True
    # The live vectors go on changing (workers keep writing them) before any score.
    params.add_(1000.0)
    buffers.mul_(-1.0)

    ev.start()
    scores = collect_scores(ev, lambda s: bool(s), "a score")
    [(step, metrics, snapshot)] = scores
    assert step == 7
    assert snapshot.step == 7 and snapshot.kept == {"note": "kept"}
    assert torch.equal(snapshot.params, offered["params"])
    assert torch.equal(snapshot.buffers, offered["buffers"])
    assert snapshot.params.data_ptr() != params.data_ptr()
    # ...and what the evaluator scored was that same snapshot, buffers included.
    assert metrics["shift_sum"] == float(offered["buffers"][:4].sum()) == 6.0
    assert metrics["scale_first"] == 4.0
    assert metrics["param_sum"] == pytest.approx(float(offered["params"].sum()), abs=1e-5)
    assert not ev.snapshots  # handed over, not kept


def test_evaluator_snapshot_history_is_bounded():
    ev = Evaluator(build_probe_with_buffers, score_probe_buffers, 10, buffers_numel=8, device="cpu")
    try:
        # Never started: every offer beyond the free slots is refused, nothing is kept.
        called: list[int] = []
        sent = [
            ev.offer(
                torch.full((10,), float(i)), i, torch.zeros(8), keep=lambda i=i: called.append(i)
            )
            for i in range(4)
        ]
        assert sent == [True, True, False, False]
        assert called == [0, 1]  # what is kept is made only for a snapshot that is sent
        assert [s.step for s in ev.snapshots.values()] == [0, 1]
        assert list(ev.snapshots.values())[1].params.tolist() == [1.0] * 10
        assert not list(ev.snapshots.values())[0].buffers.any()
    finally:
        ev.stop(timeout=5)


def test_two_offers_at_one_step_each_meet_their_own_score(evaluator):
    """Two snapshots offered at the same step (no telemetry in between, or a resume) are
    two evaluations: each score comes back with exactly the parameters it scored."""
    model = build_probe_with_buffers()
    params, buffers = flatten_parameters(model), flatten_buffers(model)
    ev = evaluator(params.numel(), buffers.numel())
    first, second = torch.randn(params.numel()), torch.randn(params.numel())
    assert ev.offer(first, 5, buffers, keep=lambda: "first") is True
    assert ev.offer(second, 5, buffers, keep=lambda: "second") is True
    ev.start()
    scores = collect_scores(ev, lambda s: len(s) >= 2, "two scores")
    assert [step for step, _, _ in scores] == [5, 5]
    for _, metrics, snapshot in scores:
        assert snapshot is not None
        sent = {"first": first, "second": second}[snapshot.kept]
        assert torch.equal(snapshot.params, sent)
        assert metrics["param_sum"] == pytest.approx(float(sent.sum()), abs=1e-4)
