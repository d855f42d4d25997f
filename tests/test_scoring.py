"""a3c.scoring: greedy evaluation always ends.

Every episode is capped (episode_cap: the env's own limit, else a constant, or
``--eval-max-steps``) and the cut ones are reported; a recurrent state starts afresh after
a lost life; on Breakout, where the scoring env presses FIRE after a lost life, a policy
that never picks FIRE still finishes its game.
"""

from __future__ import annotations

import importlib.util
import logging
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch
from policy_helpers import mlp

from a3c.envs.make import env_spaces, make_env
from a3c.evaluate import build_parser as evaluate_parser
from a3c.policy import ModelSpec
from a3c.run.cli import build_parser, config_from_args
from a3c.run.config import A3CConfig
from a3c.scoring import (
    DEFAULT_EVAL_MAX_STEPS,
    episode_cap,
    play_episodes,
    score_greedy,
)
from hogwild.errors import UsageError

NOOP, RIGHT, LEFT = 0, 2, 3  # Breakout's actions (1 is FIRE)
BOUNDED = 5_000  # agent steps: a NOOP game of Breakout ends in ~120, ALE's cap is 27 000
ENDLESS_ID = "Evaluation/Endless-v0"
CAP = 40  # eval step cap on the endless env


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
def test_greedy_evaluation_of_an_untrained_model_ends_on_breakout(one_thread):
    spaces = env_spaces("BreakoutNoFrameskip-v4")
    torch.manual_seed(0)
    model = ModelSpec(spaces.obs_shape, spaces.action, obs_dtype=spaces.obs_dtype).build().eval()
    played = play_episodes(model, "BreakoutNoFrameskip-v4", 1, seed=0, max_steps=BOUNDED)
    assert not played.capped[0] and played.lengths[0] < BOUNDED


def test_a_recurrent_state_starts_afresh_after_a_lost_life():
    model = StateRecorder()
    returns = play_episodes(model, "", 1, seed=0, env=LifeLossGame()).returns
    assert returns[0] == 6.0
    assert model.seen == [0, 1, 2, 0, 1, 2]


def test_an_endless_episode_is_cut_at_the_cap_and_reported(caplog, one_thread):
    model = mlp(2, 2)
    with caplog.at_level(logging.WARNING, logger="a3c.scoring"):
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
    with caplog.at_level(logging.WARNING, logger="a3c.scoring"):
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
