"""How Atari games end in a3c.envs.atari's stack, on real ROMs: the scoring env presses
FIRE after a lost life and flags it, the training env does neither, and
``max_episode_steps`` counts agent steps across a game's lives (GameStepLimit).
"""

from __future__ import annotations

import importlib.util

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from a3c.envs.atari import FireOnLifeLoss
from a3c.envs.episodes import episode_scores
from a3c.envs.make import make_env
from hogwild.errors import UsageError

NOOP = 0  # Breakout's and Pong's first action
BOUNDED = 5_000  # agent steps: a NOOP game of Breakout ends in ~120, ALE's cap is 27 000
LIMIT = 50  # max_episode_steps for the step-limit tests

atari = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("ale_py", "cv2")),
    reason='needs the atari extra: pip install -e ".[atari]"',
)


def play(env: gym.Env, action: int, seed: int = 0, limit: int = BOUNDED) -> tuple[int, tuple]:
    """Step ``action`` until the episode ends: (steps, last step); fails past ``limit``."""
    env.reset(seed=seed)
    for n in range(1, limit + 1):
        step = env.step(action)
        if step[2] or step[3]:
            return n, step
    raise AssertionError(f"the episode did not end within {limit} agent steps")


@atari
def test_a_noop_game_of_breakout_ends_and_flags_each_lost_life():
    """NOOP only: FIRE is pressed for every life lost, and each loss is flagged."""
    env = make_env("BreakoutNoFrameskip-v4", scoring=True)
    env.reset(seed=0)
    lives, flags = env.unwrapped.ale.lives(), 0
    steps = 0
    terminated = truncated = False
    while not (terminated or truncated) and steps < BOUNDED:
        _, _, terminated, truncated, info = env.step(NOOP)
        flags += bool(info.get("life_lost"))
        steps += 1
    env.close()
    assert terminated and not truncated and info["lives"] == 0 and steps < BOUNDED
    assert flags == lives - 1  # the last life ends the game instead


@atari
def test_the_training_env_is_unchanged():
    """A life loss still ends the training episode; no FIRE or flag is added there."""
    env = make_env("BreakoutNoFrameskip-v4", seed=0)
    wrapper, kinds = env, []
    while isinstance(wrapper, gym.Wrapper):
        kinds.append(type(wrapper))
        wrapper = wrapper.env
    assert FireOnLifeLoss not in kinds
    _, (_, _, terminated, _, info) = play(env, NOOP)
    assert terminated and info["lives"] == env.unwrapped.ale.lives() > 0
    assert "life_lost" not in info
    env.close()


@atari
@pytest.mark.parametrize("scoring", [False, True])
def test_atari_max_episode_steps_counts_agent_steps(scoring):
    env = make_env("PongNoFrameskip-v4", scoring=scoring, max_episode_steps=LIMIT)
    for seed in (0, 1):  # the second game is counted afresh
        steps, (_, _, terminated, truncated, info) = play(env, NOOP, seed=seed)
        assert (steps, terminated, truncated) == (LIMIT, False, True)
        assert info["episode"]["l"] >= 4 * LIMIT  # the real game's frames
        assert info["episode"]["r"] <= 0  # Pong: NOOP never scores
    env.close()


@atari
def test_the_limit_counts_the_game_across_lives_and_then_resets_it():
    """Training Breakout: each life is an episode; the limit counts the whole game."""
    env = make_env("BreakoutNoFrameskip-v4", max_episode_steps=LIMIT)
    env.reset(seed=0)
    steps = life_episodes = 0
    while True:
        _, _, terminated, truncated, info = env.step(NOOP)
        steps += 1
        if truncated:
            break
        if terminated:
            life_episodes += 1
            env.reset()
    assert steps == LIMIT and life_episodes >= 1  # a NOOP life lasts ~25 steps
    assert "episode" in info and info["lives"] > 0
    env.reset()
    assert env.unwrapped.ale.lives() == 5  # a new game, not the next life
    env.close()


@atari
def test_a_truncated_game_reports_its_score_in_a_vector_env():
    envs = SyncVectorEnv(
        [lambda: make_env("PongNoFrameskip-v4", max_episode_steps=LIMIT)],
        autoreset_mode=AutoresetMode.SAME_STEP,
    )
    envs.reset(seed=0)
    for _ in range(LIMIT - 1):
        _, _, _, truncated, info = envs.step(np.array([NOOP]))
        assert not truncated[0] and not episode_scores(info)
    _, _, _, truncated, info = envs.step(np.array([NOOP]))
    assert truncated[0]
    ((index, score, frames),) = episode_scores(info)
    assert index == 0 and score <= 0 and frames >= 4 * LIMIT
    envs.close()


@atari
@pytest.mark.parametrize("bad", [0, "abc", True])
def test_a_bad_atari_step_limit_is_refused(bad):
    with pytest.raises(UsageError, match="max_episode_steps"):
        make_env("PongNoFrameskip-v4", max_episode_steps=bad)
