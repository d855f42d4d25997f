"""The LSTM policy: its state carried across rollouts, zeroed for exactly the envs whose
episode ended, and the loss's unroll equal to acting step by step."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from a3c.actions import DiscreteActions
from a3c.learning.collect import Collector
from a3c.policy import ModelSpec


class Countdown(gym.Env):
    """Observation ``[steps into the episode, env index]``; the episode ends after
    ``length`` steps (terminated, or truncated with ``truncate``)."""

    observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, index: int, length: int, truncate: bool = False) -> None:
        self.index, self.length, self.truncate = index, length, truncate

    def reset(self, *, seed=None, options=None):  # noqa: ANN001, ANN201
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def _obs(self) -> np.ndarray:
        return np.array([self.t, self.index], np.float32)

    def step(self, action):  # noqa: ANN001, ANN201
        self.t += 1
        end = self.t >= self.length
        return self._obs(), 1.0, end and not self.truncate, end and self.truncate, {}


LENGTHS = (2, 3, 5)  # env 0 truncated, envs 1 and 2 terminated


def _envs() -> SyncVectorEnv:
    return SyncVectorEnv(
        [(lambda i=i: Countdown(i, LENGTHS[i], truncate=i == 0)) for i in range(len(LENGTHS))],
        autoreset_mode=AutoresetMode.SAME_STEP,
    )


def _model():
    torch.manual_seed(0)
    return ModelSpec((2,), DiscreteActions(2), hidden=(8,), lstm=6).build()


def _reference_states(model, steps: int):
    """The state before each global step t, computed env by env from the script."""
    K = len(LENGTHS)
    h, c = model.initial_state(K)
    states = []
    with torch.no_grad():
        for t in range(steps):
            states.append((h.clone(), c.clone()))
            obs = torch.tensor([[t % LENGTHS[k], k] for k in range(K)], dtype=torch.float32)
            h, c = model.lstm(model._features(obs, model.trunk), (h, c))
            ended = torch.tensor([(t + 1) % LENGTHS[k] == 0 for k in range(K)])
            h[ended], c[ended] = 0.0, 0.0
        states.append((h, c))
    return states


def test_state_is_carried_across_rollouts_and_reset_exactly_for_ended_envs():
    model, T = _model(), 4
    collector = Collector(_envs(), model, T, seed=0)
    reference = _reference_states(model, 3 * T)
    for r in range(3):
        rollout = collector.collect()
        h0, c0 = rollout.state
        torch.testing.assert_close(h0, reference[r * T][0], rtol=0, atol=1e-6)
        torch.testing.assert_close(c0, reference[r * T][1], rtol=0, atol=1e-6)
        torch.testing.assert_close(collector.state[0], reference[(r + 1) * T][0], atol=1e-6, rtol=0)
        # Zero rows exactly where an episode just ended: env k after steps that are
        # multiples of its length.
        ended = [((r + 1) * T) % n == 0 for n in LENGTHS]
        for k, e in enumerate(ended):
            assert bool((collector.state[0][k] == 0).all()) == e, (r, k)
    collector.envs.close()


def test_unroll_equals_acting_step_by_step_including_truncated_final_observations():
    model, T = _model(), 5
    collector = Collector(_envs(), model, T, seed=0)
    collector.collect()  # start mid-episode, from a nonzero state
    r = collector.collect()
    assert r.truncated.any() and r.final_obs.shape[0] == int(r.truncated.sum())
    with torch.no_grad():
        pi, values = model.unroll(r.obs, r.state, r.dones, r.next_obs, r.truncated, r.final_obs)
        h, c = r.state
        n = model.n_pi
        want_pi, want_v, finals, m = [], [], [], 0
        for t in range(T):
            h, c = model.lstm(model._features(r.obs[t], model.trunk), (h, c))
            out = model.head(h)
            want_pi.append(out[:, :n])
            want_v.append(out[:, n])
            for k in r.truncated[t].nonzero().squeeze(1).tolist():
                fh, _ = model.lstm(
                    model._features(r.final_obs[m : m + 1], model.trunk),
                    (h[k : k + 1], c[k : k + 1]),
                )
                finals.append(model.head(fh)[:, n])
                m += 1
            keep = (~r.dones[t]).float().unsqueeze(1)
            h, c = h * keep, c * keep
        boot = model.head(model.lstm(model._features(r.next_obs, model.trunk), (h, c))[0])[:, n]
    K = len(LENGTHS)
    torch.testing.assert_close(pi[: T * K], torch.cat(want_pi))
    torch.testing.assert_close(values[: T * K], torch.cat(want_v))
    torch.testing.assert_close(values[T * K : T * K + K], boot)
    torch.testing.assert_close(values[T * K + K :], torch.cat(finals))
    collector.envs.close()


def test_lstm_spec_round_trips_and_refuses_separate_nets():
    model = _model()
    spec = ModelSpec.from_dict(model.spec.to_dict())
    assert spec.lstm == 6 and spec.build().recurrent
    with pytest.raises(ValueError, match="separate"):
        ModelSpec((2,), DiscreteActions(2), lstm=4, separate=True).build()


def test_an_lstm_on_images_acts_and_unrolls():
    spec = ModelSpec((4, 10, 10), DiscreteActions(3), "uint8", lstm=8)
    model = spec.build()
    assert model.recurrent and model.encoder is not None
    obs = torch.randint(0, 256, (3, 2, 4, 10, 10), dtype=torch.uint8)  # T=3, K=2
    state = model.initial_state(2)
    actions, (h, _) = model.act_recurrent(obs[0], state)
    assert actions.shape == (2,) and h.shape == (2, 8)
    dones = torch.tensor([[False, True], [False, False], [True, False]])
    none = torch.zeros(3, 2, dtype=torch.bool)
    pi, v = model.unroll(obs, state, dones, obs[-1], none, obs.new_empty(0, 4, 10, 10))
    assert pi.shape == (3 * 2 + 2, 3) and v.shape == (3 * 2 + 2,)
