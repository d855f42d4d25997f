"""MiniGrid through its family preset (issue 22): the preset's ``ImgObsWrapper`` turns
MiniGrid's dict observations (with a text mission, which no policy takes) into the
agent's 7x7 view, and A3C learns ``MiniGrid-Empty-5x5-v0`` far past a random walk."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("minigrid", reason="MiniGrid needs the [minigrid] extra")

from a3c.api import config_for, train  # noqa: E402
from a3c.envs import make_env  # noqa: E402
from hogwild.errors import UsageError  # noqa: E402

EMPTY = "MiniGrid-Empty-5x5-v0"


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
    assert cfg.wrappers == ("minigrid.wrappers:ImgObsWrapper",)
    env = make_env(cfg.env, **cfg.env_options())
    assert env.observation_space.dtype == np.uint8 and len(env.observation_space.shape) == 3
    env.close()
    with pytest.raises(UsageError, match="mission"):
        make_env(cfg.env)  # without the wrapper: the text mission is refused in one line


def test_a_users_wrapper_goes_on_top_of_the_presets(tmp_path):
    """As on top of a family's preprocessing: the preset's ImgObsWrapper first, then the
    user's; --preset none drops the preset's."""
    mine = "gymnasium.wrappers:RecordEpisodeStatistics"
    cfg = config_for(EMPTY, wrappers=[mine])
    assert cfg.wrappers == ("minigrid.wrappers:ImgObsWrapper", mine)
    env = make_env(cfg.env, **cfg.env_options())
    assert type(env.unwrapped).__name__ == "EmptyEnv" and len(env.observation_space.shape) == 3
    env.close()
    assert config_for(EMPTY, preset="none", wrappers=[mine]).wrappers == (mine,)
    result = train(
        config_for(
            EMPTY,
            wrappers=[mine],
            workers=1,
            total_steps=400,
            eval_interval=0.0,
            logdir=str(tmp_path),
        )
    )
    assert result.exit_code == 0 and result.env_steps >= 400


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
