"""A family's preset on an env it was never tuned on, with no table of its own:

- [mujoco] (chosen on Hopper, HalfCheetah and Walker2d) learns InvertedPendulum-v5, whose
  random policy keeps the pole up for ~5 steps (reward 1 per step), to 500 (its best);
- [atari] (measured on Pong, Breakout, Qbert, SpaceInvaders and BeamRider) learns
  RoadRunner to a 100-game mean of 10x random play (the DQN paper's 11.5). It takes off
  within ~40k agent steps (measured: 143 at 36k steps; a start's first 20 games average
  ~7); its early games are short, so 100 of them end well before 30k steps.
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
    ("env_id", "family", "module", "random_score", "budget"),
    [
        pytest.param(
            "InvertedPendulum-v5",
            "mujoco",
            "mujoco",
            RANDOM_PENDULUM,
            dict(time_limit=180, target_return=500.0),
            id="mujoco",
        ),
        pytest.param(
            "RoadRunnerNoFrameskip-v4",
            "atari",
            "ale_py",
            RANDOM_ROAD_RUNNER,
            dict(total_steps=100_000, target_return=10 * RANDOM_ROAD_RUNNER),
            id="atari",
        ),
    ],
)
def test_a_family_preset_learns_an_env_it_was_not_tuned_on(
    env_id, family, module, random_score, budget, tmp_path
):
    pytest.importorskip(module, reason=f"the {family} family needs the {family} extra")
    cfg = config_for(env_id, workers=2, eval_interval=0.0, logdir=str(tmp_path), seed=1, **budget)
    assert cfg.preset == family and cfg.algo == "appo"
    r = train(cfg)
    assert r.exit_code == 0
    assert r.solved_at is not None, f"best 100-episode mean {r.best_mean_100}"
    # The best mean, not the last: episodes that end while the workers stop come after it
    # (RoadRunner once: 115.0 when solved, 113.0 at exit).
    assert r.best_mean_100 is not None
    assert r.best_mean_100.mean >= budget["target_return"] >= 10 * random_score
