"""Evaluation that always ends (issue 20, items 5, 6 and 8).

5: the Atari scoring env presses FIRE after a lost life, so a greedy policy that never
   picks FIRE cannot stall Breakout until ALE's 108 000-frame cap;
6: evaluation caps every episode (``--eval-max-steps``) and reports the cut ones;
8: Atari's ``max_episode_steps`` counts agent steps, not emulator frames.
"""

from __future__ import annotations

import importlib.util
import logging
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch
from atari_helpers import ScriptedGame
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from policy_helpers import mlp

from a3c.envs.atari import FireOnLifeLoss
from a3c.envs.episodes import episode_scores
from a3c.envs.make import env_spaces, make_env
from a3c.evaluate import build_parser as evaluate_parser
from a3c.policy import ModelSpec
from a3c.run.cli import build_parser, config_from_args
from a3c.run.config import A3CConfig
from a3c.use.evaluation import (
    DEFAULT_EVAL_MAX_STEPS,
    episode_cap,
    play_episodes,
    score_greedy,
)
from hogwild.errors import UsageError

NOOP, FIRE, RIGHT, LEFT = 0, 1, 2, 3  # Breakout's and Pong's first actions
BOUNDED = 5_000  # agent steps: a NOOP game of Breakout ends in ~120, ALE's cap is 27 000
LIMIT = 50  # max_episode_steps for the step-limit tests
ENDLESS_ID = "EvalDefects/Endless-v0"
CAP = 40  # eval step cap on the endless env


# -- stand-ins -----------------------------------------------------------------------------
class ScriptedPolicy:
    """An ActorCritic's acting surface, choosing from ``actions`` (never FIRE) at random."""

    recurrent = False
    dist = SimpleNamespace(to_env=lambda a: a.numpy())

    def __init__(self, actions: tuple[int, ...], seed: int = 0) -> None:
        self.actions = actions
        self.rng = np.random.default_rng(seed)

    def act(self, x: torch.Tensor, greedy: bool) -> torch.Tensor:
        return torch.tensor([int(self.rng.choice(self.actions))])


class StateRecorder:
    """A recurrent stand-in whose state counts the steps since it was last reset."""

    recurrent = True
    dist = SimpleNamespace(to_env=lambda a: a.numpy())

    def __init__(self) -> None:
        self.seen: list[int] = []

    def initial_state(self, n: int, device: torch.device | str) -> torch.Tensor:
        return torch.zeros(n)

    def act_recurrent(
        self, x: torch.Tensor, state: torch.Tensor, greedy: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self.seen.append(int(state[0]))
        return torch.zeros(1, dtype=torch.long), state + 1


class Recorder(gym.Wrapper):
    """Keeps every reward the evaluation got, and the last step's info."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.rewards: list[float] = []
        self.info: dict = {}

    def step(self, action):  # noqa: ANN001, ANN201
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.rewards.append(float(reward))
        self.info = info
        return obs, reward, terminated, truncated, info


class LifeLossGame(gym.Env):
    """Six steps; the third loses a life (flagged as the Atari scoring env does)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):  # noqa: ANN001, ANN201
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):  # noqa: ANN001, ANN201
        self.t += 1
        info = {"life_lost": True} if self.t == 3 else {}
        return np.zeros(1, np.float32), 1.0, self.t == 6, False, info


class Endless(gym.Env):
    """Never terminates, never truncates: one point a step."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):  # noqa: ANN001, ANN201
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):  # noqa: ANN001, ANN201
        return np.zeros(2, np.float32), 1.0, False, False, {}


@pytest.fixture
def one_thread():
    """One torch thread, as in the evaluator: on the busy 2-core machine two threads made
    each conv forward pass 10-80 ms instead of under 1 ms."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


if ENDLESS_ID not in gym.registry:
    gym.register(id=ENDLESS_ID, entry_point=Endless, max_episode_steps=None)

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


# -- 5: FIRE after a lost life in the scoring env ------------------------------------------
@atari
def test_a_policy_that_never_fires_still_finishes_a_scored_breakout_game():
    env = Recorder(make_env("BreakoutNoFrameskip-v4", scoring=True))
    played = play_episodes(ScriptedPolicy((NOOP, RIGHT, LEFT)), "", 1, seed=0, env=env)
    env.close()
    length = int(played.lengths[0])
    assert length < BOUNDED and not played.capped[0]
    assert env.info["lives"] == 0 and "episode" in env.info  # game over, not a cap
    assert played.returns[0] == sum(env.rewards) == env.info["episode"]["r"]


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
def test_greedy_evaluation_of_an_untrained_model_ends_on_breakout(one_thread):
    spaces = env_spaces("BreakoutNoFrameskip-v4")
    torch.manual_seed(0)
    model = ModelSpec(spaces.obs_shape, spaces.action, obs_dtype=spaces.obs_dtype).build().eval()
    played = play_episodes(model, "BreakoutNoFrameskip-v4", 1, seed=0, max_steps=BOUNDED)
    assert not played.capped[0] and played.lengths[0] < BOUNDED


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


def test_a_recurrent_state_starts_afresh_after_a_lost_life():
    model = StateRecorder()
    returns = play_episodes(model, "", 1, seed=0, env=LifeLossGame()).returns
    assert returns[0] == 6.0
    assert model.seen == [0, 1, 2, 0, 1, 2]


# -- 6: the evaluator's own step cap -------------------------------------------------------
def test_an_endless_episode_is_cut_at_the_cap_and_reported(caplog, one_thread):
    model = mlp(2, 2)
    with caplog.at_level(logging.WARNING, logger="a3c.use.evaluation"):
        metrics = score_greedy(
            model, "cpu", 7, env_id=ENDLESS_ID, env_kwargs={}, episodes=2, seed=0, max_steps=CAP
        )
    assert metrics["capped_episodes"] == 2
    assert metrics["mean_return"] == CAP and metrics["std_return"] == 0
    assert "2 of 2 episodes cut at 40 agent steps" in caplog.text

    returns = play_episodes(model, ENDLESS_ID, 1, seed=0, max_steps=CAP).returns
    assert returns.tolist() == [CAP]


def test_episodes_the_env_itself_ends_are_not_capped(caplog, one_thread):
    model = mlp(4, 2)
    with caplog.at_level(logging.WARNING, logger="a3c.use.evaluation"):
        metrics = score_greedy(
            model,
            "cpu",
            0,
            env_id="CartPole-v1",
            env_kwargs={"max_episode_steps": 5},
            episodes=2,
            seed=0,
        )
    assert metrics["capped_episodes"] == 0 and metrics["mean_return"] <= 5
    assert not caplog.records


def test_the_default_cap_is_the_envs_own_limit_else_a_constant():
    endless = make_env(ENDLESS_ID)
    cartpole = make_env("CartPole-v1")
    assert episode_cap(endless) == DEFAULT_EVAL_MAX_STEPS
    assert episode_cap(cartpole) == cartpole.spec.max_episode_steps == 500
    assert episode_cap(cartpole, 9) == episode_cap(endless, 9) == 9
    endless.close()
    cartpole.close()


def test_eval_max_steps_setting_and_evaluate_flag():
    assert A3CConfig().eval_max_steps is None
    args = build_parser().parse_args(["--eval-max-steps", "7"])
    assert config_from_args(args).eval_max_steps == 7
    with pytest.raises(UsageError):
        A3CConfig(eval_max_steps=0)
    assert evaluate_parser().parse_args(["x.pt", "--max-steps", "9"]).max_steps == 9
    assert evaluate_parser().parse_args(["x.pt"]).max_steps is None


# -- 8: Atari's max_episode_steps in agent steps -------------------------------------------
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
