"""MinAtar games: registered on demand, channel-first uint8 images of 0/255."""

from __future__ import annotations

import sys

import gymnasium as gym
import numpy as np
import pytest

from a3c.actions import DiscreteActions
from a3c.envs import env_spaces, make_env
from a3c.envs.minatar import is_minatar_id, register_minatar_envs, wrap_minatar
from hogwild.errors import UsageError


def test_minatar_ids():
    assert is_minatar_id("MinAtar/Breakout-v1")
    assert is_minatar_id("minatar.gym:MinAtar/Seaquest-v0")
    assert not is_minatar_id("ALE/Breakout-v5")
    assert not is_minatar_id("BreakoutNoFrameskip-v4")


def test_missing_minatar_names_the_extra(monkeypatch):
    for env_id in [k for k in gym.registry if k.startswith("MinAtar/")]:
        monkeypatch.delitem(gym.registry, env_id)
    monkeypatch.setitem(sys.modules, "minatar", None)  # import minatar.gym -> ImportError
    monkeypatch.setitem(sys.modules, "minatar.gym", None)
    with pytest.raises(UsageError, match=r'pip install -e "\.\[minatar\]"'):
        register_minatar_envs()
    with pytest.raises(UsageError, match="'MinAtar/Breakout-v1' needs the minatar extra"):
        make_env("MinAtar/Breakout-v1")


@pytest.mark.parametrize(
    ("game", "channels", "actions"), [("Breakout", 4, 3), ("SpaceInvaders", 6, 4)]
)
def test_channel_first_uint8_images(game, channels, actions):
    pytest.importorskip("minatar", reason='needs the minatar extra: pip install -e ".[minatar]"')
    register_minatar_envs()
    raw = gym.make(f"MinAtar/{game}-v1")
    assert raw.observation_space.shape == (10, 10, channels)  # MinAtar's own: bool, HWC
    env = wrap_minatar(raw)
    assert env.observation_space == gym.spaces.Box(0, 255, (channels, 10, 10), np.uint8)
    assert env.action_space == gym.spaces.Discrete(actions)
    obs, _ = env.reset(seed=0)
    env.action_space.seed(0)
    for _ in range(20):
        grid = env.unwrapped.game.state()  # the bool (10, 10, C) grid behind obs
        assert obs.dtype == np.uint8 and obs.flags.c_contiguous
        assert np.array_equal(obs, grid.transpose(2, 0, 1) * np.uint8(255))
        assert env.observation_space.contains(obs) and obs.any()
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            obs, _ = env.reset()
    env.close()


def test_make_env_registers_and_wraps():
    """make_env's hook: the wrapped grids reach the policy as they are, uint8 images."""
    pytest.importorskip("minatar", reason='needs the minatar extra: pip install -e ".[minatar]"')
    env = make_env("MinAtar/Breakout-v1", seed=0)
    assert env.observation_space == gym.spaces.Box(0, 255, (4, 10, 10), np.uint8)
    obs, _ = env.reset()
    assert obs.dtype == np.uint8 and env.observation_space.contains(obs) and obs.any()
    env.close()
    spaces = env_spaces("MinAtar/Breakout-v1")
    assert spaces.obs_shape == (4, 10, 10) and spaces.obs_dtype == "uint8"
    assert spaces.action == DiscreteActions(3)
