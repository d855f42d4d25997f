"""EpisodicLife / FireOnReset / FireOnLifeLoss on a scripted stand-in for an ale-py env
(no ROMs needed).

Covers what real games make rare: a game that ends inside the wrappers' own reset()
steps, whose real score must still reach episode_scores; and the scoring env's FIRE
after a lost life, whose reward counts, and which game over never gets.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from atari_helpers import ScriptedGame
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from a3c.envs.atari import EpisodicLife, FireOnLifeLoss, FireOnReset
from a3c.envs.episodes import episode_scores

NOOP, FIRE, RIGHT = 0, 1, 2  # ScriptedGame's actions


def test_life_loss_is_terminal_and_the_game_goes_on():
    game = ScriptedGame(reward=10.0)
    env = EpisodicLife(gym.wrappers.RecordEpisodeStatistics(game))
    env.reset()
    assert env.step(0)[2] is False
    _, _, terminated, _, info = env.step(2)
    assert terminated and "episode" not in info and game.ale.lives() == 2
    env.reset()
    assert game.resets == 1  # no emulator reset after a life loss
    env.step(2)
    _, _, terminated, _, info = env.step(2)
    assert terminated and info["episode"]["r"] == 50.0  # 5 steps: the no-op of reset() too
    env.reset()
    assert game.resets == 2 and game.ale.lives() == 3


def test_a_game_ending_inside_reset_keeps_its_score():
    """FIRE is deadly here: the last life is lost by FireOnReset's own step."""

    def make():
        game = ScriptedGame(deadly=(1,), reward=10.0)
        return FireOnReset(EpisodicLife(gym.wrappers.RecordEpisodeStatistics(game)))

    envs = SyncVectorEnv([make], autoreset_mode=AutoresetMode.SAME_STEP)
    envs.reset(seed=0)  # FIRE at reset: one life lost already
    found = []
    for _ in range(5):
        _, _, terminated, _, info = envs.step(np.array([1]))
        found += episode_scores(info)
        if found:
            break
    # The step's FIRE costs the 2nd life (terminal, no score); the reset's FIRE the 3rd:
    # the game ended inside reset(), and its score came through the reset's info.
    assert terminated[0] and "episode" in info and "episode" not in info["final_info"]
    assert found == [(0, 60.0, 6)]
    envs.close()


def test_fire_after_a_life_loss_adds_its_reward_and_leaves_game_over_alone():
    game = ScriptedGame(deadly=(RIGHT,), rewards={FIRE: 7.0})  # FIRE scores 7, the rest 1
    env = FireOnLifeLoss(game)
    env.reset()
    _, reward, terminated, truncated, info = env.step(NOOP)
    assert (reward, terminated, info) == (1.0, False, {})
    _, reward, terminated, _, info = env.step(RIGHT)
    assert reward == 1.0 + 7.0 and not terminated and info["life_lost"]
    assert game.actions == [NOOP, RIGHT, FIRE]
    env.step(RIGHT)
    _, _, terminated, _, info = env.step(RIGHT)  # the last life: game over, no FIRE
    assert terminated and "life_lost" not in info and game.actions[-1] == RIGHT

    # A game without FIRE: flag only.
    quiet = FireOnLifeLoss(ScriptedGame(deadly=(RIGHT,), rewards={FIRE: 7.0}), fire=False)
    quiet.reset()
    _, reward, _, _, info = quiet.step(RIGHT)
    assert reward == 1.0 and info["life_lost"] and quiet.env.actions == [RIGHT]
