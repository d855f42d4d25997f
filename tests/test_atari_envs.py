"""The Atari wrappers on real ROMs (ale-py ships them): frames, skip, max-pool, lives, scores."""

from __future__ import annotations

import sys
from functools import partial

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

pytest.importorskip("ale_py", reason='needs the atari extra: pip install -e ".[atari]"')
cv2 = pytest.importorskip("cv2", reason='needs OpenCV (atari extra): pip install -e ".[atari]"')

from a3c.actions import DiscreteActions  # noqa: E402
from a3c.envs.atari import (  # noqa: E402
    atari_make_kwargs,
    is_atari_id,
    register_atari_envs,
)
from a3c.envs.episodes import episode_scores  # noqa: E402
from a3c.envs.make import _gym_make, env_spaces, make_atari_env, make_env  # noqa: E402
from hogwild.errors import UsageError  # noqa: E402


def play_until(env, stop, max_steps=5000, seed=0):
    """Random actions until ``stop(obs, reward, terminated, truncated, info)``; the last step."""
    env.action_space.seed(seed)
    for _ in range(max_steps):
        step = env.step(env.action_space.sample())
        if stop(*step):
            return step
    raise AssertionError(f"not reached within {max_steps} steps")


def test_atari_ids():
    assert is_atari_id("ALE/Pong-v5")
    assert is_atari_id("PongNoFrameskip-v4")
    assert is_atari_id("Pong-v4")  # registered by ale-py
    assert is_atari_id("ale_py:ALE/Breakout-v5")
    assert not is_atari_id("CartPole-v1")
    assert not is_atari_id("FrozenLake-v1")
    assert not is_atari_id("Foo-v4")  # the old id shape, but no such game
    assert not is_atari_id("MinAtar/Breakout-v1")


def test_make_turns_the_emulator_frame_skip_off():
    for env_id in ("ALE/Pong-v5", "Pong-v4", "PongNoFrameskip-v4"):
        env = _gym_make(env_id, atari_make_kwargs(env_id, {}))
        assert env.unwrapped._frameskip == 1
        env.close()
    assert gym.spec("ALE/Pong-v5").kwargs["repeat_action_probability"] == 0.25  # kept


def test_missing_ale_py_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ale_py", None)  # import ale_py -> ImportError
    with pytest.raises(UsageError, match=r'pip install -e "\.\[atari\]"'):
        register_atari_envs()


def test_frame_skip_on_a_frameskip_v5_env_is_refused():
    with pytest.raises(UsageError, match="frameskip=1"):
        make_atari_env("ALE/Pong-v5", frameskip=4)


@pytest.mark.parametrize("env_id", ["ALE/Pong-v5", "BreakoutNoFrameskip-v4"])
def test_observations_and_frame_skip(env_id):
    env = make_atari_env(env_id, seed=0)
    assert env.observation_space == gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    obs, _ = env.reset(seed=1)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    ale = env.unwrapped.ale
    for _ in range(10):
        before = ale.getEpisodeFrameNumber()
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        assert not (terminated or truncated)
        assert ale.getEpisodeFrameNumber() == before + 4
        assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
        assert env.observation_space.contains(obs)
    env.close()


def test_42x42_single_frames():
    env = make_atari_env("BreakoutNoFrameskip-v4", seed=0, screen_size=42, frame_stack=1)
    obs, _ = env.reset()
    assert obs.shape == (1, 42, 42) and obs.dtype == np.uint8
    env.close()


def test_the_newest_frame_is_the_max_of_the_last_two_raw_frames():
    """Replays each agent step on the raw emulator (deterministic: no sticky actions)."""
    env = make_atari_env("BreakoutNoFrameskip-v4", seed=0, noop_max=0)
    raw = env.unwrapped
    ale = raw.ale
    for _ in range(5):
        env.step(1)  # FIRE: the ball moves, so consecutive frames differ
    differs = 0
    for k in range(10):
        action = 2 + k % 2
        state = ale.cloneState()
        obs, *_ = env.step(action)
        ale.restoreState(state)
        frames = []
        for _ in range(4):
            raw.step(action)
            frames.append(ale.getScreenGrayscale())
        pooled = np.maximum(frames[2], frames[3])
        expected = cv2.resize(pooled, (84, 84), interpolation=cv2.INTER_AREA)
        assert np.array_equal(obs[-1], expected)
        last = cv2.resize(frames[3], (84, 84), interpolation=cv2.INTER_AREA)
        differs += not np.array_equal(expected, last)
    assert differs > 0  # the pooling is visible, not a no-op
    env.close()


def test_crop_drops_rows_before_the_resize():
    """Pong's field (rows 34-193) at 42x42: the score bar is gone, the field fills the frame."""
    env = make_atari_env(
        "PongNoFrameskip-v4", seed=0, noop_max=0, screen_size=42, crop_top=34, crop_bottom=16
    )
    raw, ale = env.unwrapped, env.unwrapped.ale
    env.reset()
    for _ in range(30):
        state = ale.cloneState()
        obs, *_ = env.step(2)
        ale.restoreState(state)
        frames = []
        for _ in range(4):
            raw.step(2)
            frames.append(ale.getScreenGrayscale())
        field = np.maximum(frames[2], frames[3])[34:194]
        assert obs.shape == (4, 42, 42)
        assert np.array_equal(obs[-1], cv2.resize(field, (42, 42), interpolation=cv2.INTER_AREA))
    whole = cv2.resize(np.maximum(frames[2], frames[3]), (42, 42), interpolation=cv2.INTER_AREA)
    assert not np.array_equal(obs[-1], whole)
    env.close()
    for crop in ({"crop_top": -1}, {"crop_top": 200, "crop_bottom": 10}):
        with pytest.raises(UsageError, match="leave rows of the 210-row screen"):
            make_atari_env("PongNoFrameskip-v4", **crop)


def test_life_loss_ends_the_training_episode_but_not_the_game():
    env = make_atari_env("BreakoutNoFrameskip-v4", seed=0)
    ale = env.unwrapped.ale
    assert ale.lives() == 5
    _, _, terminated, truncated, info = play_until(env, lambda o, r, te, tr, i: te or tr)
    assert terminated and not truncated
    assert ale.lives() == 4 and "episode" not in info
    frame = ale.getEpisodeFrameNumber()
    obs, info = env.reset()
    assert ale.lives() == 4  # the same game goes on
    assert ale.getEpisodeFrameNumber() > frame  # one no-op + FIRE + 2: 12 frames
    assert "episode" not in info and obs.shape == (4, 84, 84)

    # Life after life to the real game over, which alone reports a score and resets.
    lost = 1
    while True:
        _, _, terminated, _, info = play_until(env, lambda o, r, te, tr, i: te or tr, seed=lost)
        lost += 1
        if "episode" in info:
            break
        assert ale.lives() == 5 - lost
        env.reset()
    assert lost == 5 and ale.lives() == 0
    frame = ale.getEpisodeFrameNumber()
    env.reset()
    assert ale.lives() == 5 and ale.getEpisodeFrameNumber() < frame  # a new game
    env.close()


def test_rewards_are_clipped_but_the_episode_reports_the_real_score():
    """SpaceInvaders pays 5-30 per alien; same seed and actions with and without clipping."""
    env_id, seed = "SpaceInvadersNoFrameskip-v4", 3
    runs = {}
    for clip in (False, True):
        env = make_atari_env(env_id, seed=seed, clip_rewards=clip, terminal_on_life_loss=False)
        env.action_space.seed(seed)
        rewards = []
        for _ in range(3000):
            _, reward, terminated, truncated, info = env.step(env.action_space.sample())
            rewards.append(reward)
            if terminated or truncated:
                break
        assert "episode" in info
        runs[clip] = rewards, info["episode"]
        env.close()
    (raw, raw_episode), (clipped, clipped_episode) = runs[False], runs[True]
    assert max(raw) > 1  # the game's own rewards
    assert set(clipped) <= {-1.0, 0.0, 1.0}
    assert clipped == [float(np.sign(r)) for r in raw]
    assert raw_episode["r"] == clipped_episode["r"] == sum(raw) > 1
    assert raw_episode["l"] >= 4 * len(raw)  # emulator frames, no-ops and FIRE included


def test_a_scored_game_is_the_whole_game_with_its_real_rewards():
    """The env evaluation scores on (``scoring=True``), on a game with lives and rewards
    above 1 (SpaceInvaders: 3 lives, 5-30 per alien; no FIRE needed): its return is the
    unclipped reward sum of one whole game, to ``lives() == 0``, as the raw emulator
    counts it when it replays the same frames."""
    env_id, seed = "SpaceInvadersNoFrameskip-v4", 3  # random play: game over in ~560 steps
    env = make_env(env_id, scoring=True)
    raw = env.unwrapped
    frames: list[int] = []  # every action the emulator got: no-op starts, skipped frames
    emulate = raw.step

    def recorded(action):
        frames.append(int(action))
        return emulate(action)

    raw.step = recorded
    env.reset(seed=seed)
    env.action_space.seed(seed)
    assert raw.ale.lives() == 3
    rewards, lives = [], []
    for _ in range(3000):
        _, reward, terminated, truncated, info = env.step(env.action_space.sample())
        rewards.append(float(reward))
        lives.append(raw.ale.lives())
        if terminated or truncated:
            break
    env.close()
    assert terminated and not truncated, "no game over within 3000 steps"
    assert lives[-1] == 0 and raw.ale.game_over()
    assert set(lives[:-1]) == {3, 2, 1}, "life losses did not end the scored episode"
    score = info["episode"]["r"]
    assert score == sum(rewards)
    assert info["episode"]["l"] == len(frames)  # emulator frames, no-ops included
    # The real rewards, not their signs: the training env's clipped sum is much lower.
    assert max(rewards) > 1 and sum(float(np.sign(r)) for r in rewards) < score

    replay = gym.make(env_id)  # the bare emulator: no wrappers, frameskip 1, no sticky actions
    replay.reset(seed=seed)
    replayed: list[float] = []
    for action in frames:
        _, reward, terminated, truncated, _ = replay.step(action)
        replayed.append(float(reward))
        if terminated or truncated:
            break
    assert terminated and len(replayed) == len(frames), "the replay's game ended elsewhere"
    assert replay.unwrapped.ale.lives() == 0
    assert sum(replayed) == score
    replay.close()


def test_episode_scores_on_a_same_step_vector_env():
    envs = SyncVectorEnv(
        [partial(make_atari_env, "BreakoutNoFrameskip-v4", seed=i) for i in range(2)],
        autoreset_mode=AutoresetMode.SAME_STEP,
    )
    envs.reset(seed=0)
    envs.action_space.seed(0)
    found, life_losses = [], 0
    for _ in range(3000):
        _, _, terminated, truncated, info = envs.step(envs.action_space.sample())
        scores = episode_scores(info)
        life_losses += int(terminated.sum()) - len(scores)
        for i, score, length in scores:
            assert terminated[i] or truncated[i]
            assert info["final_info"]["_episode"][i]
            assert score >= 0 and length > 0
            assert envs.envs[i].unwrapped.ale.lives() == 5  # autoreset: a new game
        found += scores
        if len(found) >= 2:
            break
    assert len(found) >= 2
    assert life_losses >= 4 * len(found)  # training episodes ended without a score
    envs.close()


def test_make_env_registers_and_wraps():
    """make_env's hook: the wrapped frames reach the policy as they are, uint8 images."""
    env = make_env("ALE/Pong-v5", seed=0)
    assert env.observation_space == gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    obs, _ = env.reset()
    assert obs.dtype == np.uint8 and env.observation_space.contains(obs)
    env.close()
    spaces = env_spaces("ALE/Pong-v5")
    assert spaces.obs_shape == (4, 84, 84) and spaces.obs_dtype == "uint8"
    assert spaces.action == DiscreteActions(6)


def test_make_env_errors_for_atari_ids(monkeypatch):
    with pytest.raises(UsageError, match="did you mean 'ALE/Pong-v5'"):
        make_env("ALE/Pongg-v5")
    monkeypatch.setitem(sys.modules, "ale_py", None)
    with pytest.raises(UsageError, match=r'needs the atari extra: .*pip install -e "\.\[atari\]"'):
        make_env("BreakoutNoFrameskip-v4")
