"""A family's preset on an env it was never tuned on: the [mujoco] recipe (chosen on
Hopper, HalfCheetah and Walker2d) learns InvertedPendulum-v5, whose random policy keeps
the pole up for ~5 steps, with no table of its own."""

from __future__ import annotations

import pytest

from a3c.run.presets import config_for
from a3c.run.trainer import train

pytestmark = pytest.mark.slow

pytest.importorskip("mujoco", reason="the MuJoCo family needs the mujoco extra")

#: A random policy's InvertedPendulum-v5 episodes last ~5 steps (reward 1 per step).
RANDOM_PENDULUM = 5.0


def test_the_mujoco_family_preset_learns_a_robot_it_was_not_tuned_on(tmp_path):
    cfg = config_for(
        "InvertedPendulum-v5",
        workers=2,
        time_limit=180,
        target_return=500.0,
        eval_interval=0.0,
        logdir=str(tmp_path),
        seed=1,
    )
    assert cfg.preset == "mujoco" and cfg.algo == "appo"
    r = train(cfg)
    assert r.exit_code == 0
    assert r.solved_at is not None, f"best 100-episode mean {r.best_mean_100} (random ~5)"
    assert r.mean_return_100 >= 500 > 10 * RANDOM_PENDULUM
