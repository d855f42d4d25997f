"""MiniGrid through its family preset (issue 22): the preset's ``ImgObsWrapper`` turns
MiniGrid's dict observations (with a text mission, which no policy takes) into the
agent's 7x7 view, and A3C learns ``MiniGrid-Empty-5x5-v0`` far past a random walk."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("minigrid", reason="MiniGrid needs the [minigrid] extra")

from a3c.api import config_for, train  # noqa: E402
from a3c.envs import make_env  # noqa: E402
from a3c.train import main as train_main  # noqa: E402
from hogwild.errors import UsageError  # noqa: E402

EMPTY = "MiniGrid-Empty-5x5-v0"
IMAGE = "minigrid.wrappers:ImgObsWrapper"


def random_mean_return(episodes: int = 100) -> float:
    env = make_env(EMPTY, **config_for(EMPTY).env_options())
    rng, total = np.random.default_rng(0), 0.0
    for i in range(episodes):
        env.reset(seed=i)
        done = False
        while not done:
            _, reward, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
            total, done = total + float(reward), terminated or truncated
    env.close()
    return total / episodes


def test_the_family_preset_applies_minigrids_image_wrapper():
    cfg = config_for("MiniGrid-DoorKey-5x5-v0")
    assert cfg.preset == "minigrid"
    assert cfg.preset_wrappers == (IMAGE,) and cfg.wrappers == ()
    env = make_env(cfg.env, **cfg.env_options())
    assert env.observation_space.dtype == np.uint8 and len(env.observation_space.shape) == 3
    env.close()
    with pytest.raises(UsageError, match="mission"):
        make_env(cfg.env)  # without the wrapper: the text mission is refused in one line
    assert config_for(EMPTY, preset="none").preset_wrappers == ()


def wrapper_names(env) -> list[str]:
    names = []
    while hasattr(env, "env"):
        names, env = [*names, type(env).__name__], env.env
    return names


def test_a_users_wrapper_goes_on_minigrids_own_env_and_the_preset_stands_aside(tmp_path):
    """Issue 54: as MiniGrid's own wrappers expect, the user's get the env as made (its
    dict observation); the preset's ImgObsWrapper comes after them, and stands aside where
    the observation is already one the policy takes (the user applied ImgObsWrapper)."""
    rgb = "minigrid.wrappers:RGBImgPartialObsWrapper"  # a dict again: the preset's still runs
    env = make_env(EMPTY, **config_for(EMPTY, wrappers=[rgb]).env_options())
    assert env.observation_space.shape == (56, 56, 3), env.observation_space
    assert wrapper_names(env).count("ImgObsWrapper") == 1
    env.close()
    mine = "user_envs:minigrid_image"  # ImgObsWrapper(env), as MiniGrid's docs write it
    cfg = config_for(EMPTY, wrappers=[mine])
    assert cfg.wrappers == (mine,) and cfg.preset_wrappers == (IMAGE,)
    env = make_env(cfg.env, **cfg.env_options())
    assert env.observation_space.shape == (7, 7, 3)
    assert wrapper_names(env).count("ImgObsWrapper") == 1
    env.close()
    argv = ["--env", EMPTY, "--wrapper", mine, "--workers", "1", "--envs-per-worker", "2"]
    argv += ["--total-steps", "400", "--eval-interval", "0", "--logdir", str(tmp_path)]
    assert train_main(argv) == 0
    (run,) = tmp_path.iterdir()
    assert json.loads((run / "config.json").read_text())["preset_wrappers"] == [IMAGE]


def test_a_users_wrapper_that_fails_on_minigrids_env_is_one_line(tmp_path, capsys):
    """Positions reads a Box's bounds; MiniGrid's env has a dict, since the preset's
    ImgObsWrapper comes after the user's wrappers: the line says so."""
    argv = ["--env", EMPTY, "--wrapper", "user_envs:Positions", "--workers", "1"]
    argv += ["--total-steps", "400", "--eval-interval", "0", "--logdir", str(tmp_path)]
    assert train_main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert f"wrapper 'user_envs:Positions' failed on {EMPTY} as made" in err, err
    assert f"the preset's wrappers ({IMAGE}) come after yours" in err, err
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_a3c_learns_the_empty_room(tmp_path):
    """A step budget, not a time limit: the suite runs tests side by side. Seeds 1-3
    reached the target after 97k-104k env steps."""
    random = random_mean_return()
    result = train(
        config_for(
            EMPTY,
            workers=2,
            total_steps=200_000,
            target_return=0.9,
            eval_interval=0.0,
            logdir=str(tmp_path),
        )
    )
    assert result.exit_code == 0
    assert result.mean_return_100 > max(0.8, random + 0.5), (result, random)
