"""a3c.learning.loss: a3c_loss's targets (truncations bootstrapped, terminations not),
its figures and options, and which nets its policy and value terms reach."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from rollout_helpers import GAMMA, _hand_targets, _model, _rollout

from a3c.learning.loss import A3CFigures, a3c_loss
from a3c.learning.rollout import Rollout
from a3c.learning.settings import UpdateSettings
from a3c.policy import ActorCritic, log_prob_entropy

pytestmark = pytest.mark.usefixtures("hang_guard")


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
