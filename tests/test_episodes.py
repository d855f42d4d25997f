"""episode_scores: the ended episodes' real returns out of a (vector) env's info."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from a3c.envs.episodes import episode_scores


def _recorded_cartpole():
    return gym.wrappers.RecordEpisodeStatistics(gym.make("CartPole-v1"))


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP])
def test_vector_env_scores_match_the_steps_counted(mode):
    n = 3
    envs = SyncVectorEnv([_recorded_cartpole] * n, autoreset_mode=mode)
    envs.reset(seed=0)
    envs.action_space.seed(0)
    steps, returns = np.zeros(n, int), np.zeros(n)
    skip = np.zeros(n, bool)  # NEXT_STEP: the step after an end only resets
    found = []
    for _ in range(300):
        _, reward, terminated, truncated, info = envs.step(envs.action_space.sample())
        steps += ~skip
        returns += np.where(skip, 0.0, reward)
        scores = episode_scores(info)
        ended = terminated | truncated
        assert [i for i, _, _ in scores] == list(np.flatnonzero(ended))
        for i, ret, length in scores:
            assert (ret, length) == (returns[i], steps[i])  # CartPole: return == length
            found.append(i)
        steps[ended], returns[ended] = 0, 0.0
        skip = ended if mode == AutoresetMode.NEXT_STEP else skip
    if mode == AutoresetMode.SAME_STEP:
        assert "episode" not in info  # SAME_STEP: only under info["final_info"]
    assert len(found) > 10 and set(found) == set(range(n))
    envs.close()


def test_same_step_layout_and_reset_info():
    """The exact layout, plus an "episode" that a wrapper's reset() passed on."""
    info = {
        "final_info": {
            "episode": {"r": np.array([0.0, 7.0, 2.0]), "l": np.array([0, 40, 12])},
            "_episode": np.array([False, True, True]),
        },
        "_final_info": np.array([False, True, True]),
        "episode": {"r": np.array([5.0, 0.0, 0.0]), "l": np.array([99, 0, 0])},
        "_episode": np.array([True, False, False]),
    }
    assert episode_scores(info) == [(0, 5.0, 99), (1, 7.0, 40), (2, 2.0, 12)]
    assert episode_scores({}) == []
    assert episode_scores({"final_info": {}, "_final_info": np.zeros(2, bool)}) == []


def test_single_env_info():
    assert episode_scores({"episode": {"r": 3.0, "l": 10, "t": 0.1}}) == [(0, 3.0, 10)]
