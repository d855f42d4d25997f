"""A family's preset on an env it was never tuned on, with no table of its own:

- [mujoco] (chosen on Hopper, HalfCheetah and Walker2d) learns InvertedPendulum-v5, whose
  random policy keeps the pole up for ~5-9 steps (reward 1 per step), to a 100-episode
  mean of 100 (measured: at 26k agent steps; 500 took 72k);
- [atari] (measured on Pong, Breakout, Qbert, SpaceInvaders and BeamRider) learns
  RoadRunner to a 100-game mean of 5x random play (the DQN paper's 11.5). It takes off
  within ~25k agent steps (measured: 57 at 25.5k, 115 at ~34k; a start's first 100 games
  average ~8); its early games are short, so 100 of them end by ~20k steps.

Step budgets, not time limits: the suite runs files side by side.
"""

from __future__ import annotations

import pytest

from a3c.run.presets import config_for
from a3c.run.trainer import train

pytestmark = pytest.mark.slow

#: What random play scores: InvertedPendulum-v5's ~5-step episodes, RoadRunner's games.
RANDOM_PENDULUM = 5.0
RANDOM_ROAD_RUNNER = 11.5


@pytest.mark.parametrize(
    ("env_id", "family", "module", "target"),
    [
        pytest.param("InvertedPendulum-v5", "mujoco", "mujoco", 20 * RANDOM_PENDULUM, id="mujoco"),
        pytest.param(
            "RoadRunnerNoFrameskip-v4", "atari", "ale_py", 5 * RANDOM_ROAD_RUNNER, id="atari"
        ),
    ],
)
def test_a_family_preset_learns_an_env_it_was_not_tuned_on(
    env_id, family, module, target, tmp_path
):
    pytest.importorskip(module, reason=f"the {family} family needs the {family} extra")
    cfg = config_for(
        env_id,
        workers=2,
        total_steps=100_000,
        target_return=target,
        eval_interval=0.0,
        logdir=str(tmp_path),
        seed=1,
    )
    assert cfg.preset == family and cfg.algo == "appo"
    r = train(cfg)
    assert r.exit_code == 0
    assert r.solved_at is not None, f"best 100-episode mean {r.best_mean_100}"
    # The best mean, not the last: episodes that end while the workers stop come after it
    # (RoadRunner once: 115.0 when solved, 113.0 at exit).
    assert r.best_mean_100 is not None
    assert r.best_mean_100.mean >= target
