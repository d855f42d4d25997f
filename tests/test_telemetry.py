"""The main process's side of telemetry: what a log window writes."""

from __future__ import annotations

import numpy as np
import torch

from a3c.run.telemetry import MAX_EPISODES, STAT, STATS, RunStats, window_scalars


def message(**figures: float) -> dict[str, torch.Tensor]:
    stats = np.zeros(len(STATS))
    for name, value in figures.items():
        stats[STAT[name]] = value
    return {
        "stats": torch.from_numpy(stats),
        "n_episodes": torch.tensor(0),
        "ep_return": torch.zeros(MAX_EPISODES, dtype=torch.float64),
        "ep_length": torch.zeros(MAX_EPISODES, dtype=torch.int64),
        "ep_agent": torch.zeros(MAX_EPISODES, dtype=torch.int64),
    }


def test_a_window_of_only_skipped_updates_logs_how_many_were_skipped():
    stats = RunStats()
    stats.add(message(skipped=7, env_steps=640))
    written = window_scalars(stats, dt=1.0, steps=640, algo="appo")
    assert written["charts/skipped_updates"] == 7
    assert "losses/value_loss" not in written  # a mean per update needs an update
    assert not stats.window.any()  # the next window starts empty


def test_a_window_with_updates_logs_their_means_and_counts():
    stats = RunStats()
    stats.add(message(updates=4, skipped=1, value_loss=2.0, dead_units=0.5))
    written = window_scalars(stats, dt=1.0, steps=1, algo="a3c")
    assert written["losses/value_loss"] == 0.5
    assert written["charts/dead_units"] == 0.125
    assert written["charts/skipped_updates"] == 1


def test_games_of_many_agents_log_the_team_return_and_illegal_moves_and_show_the_team():
    from a3c.run.config import A3CConfig
    from a3c.run.telemetry import status_line

    stats = RunStats()
    assert stats.team_100 is None
    stats.add(message(games=60, team_return=60 * -30.0, env_steps=100))
    stats.add(message(games=60, team_return=60 * -20.0, illegal_moves=2, env_steps=100))
    written = window_scalars(stats, dt=1.0, steps=200)
    assert written["charts/team_return"] == -25.0 and written["charts/illegal_moves"] == 2
    assert stats.team_100 == -25.0, "the last 100-odd games: both messages"
    stats.add(message(games=100, team_return=100 * -10.0))
    assert stats.team_100 == -10.0, "older games leave the mean"
    line = status_line(A3CConfig(), stats, steps=300, elapsed=1.0, start_steps=0).line
    assert "team -10.0" in line
    assert "charts/illegal_moves" not in window_scalars(RunStats(), dt=1.0, steps=0)


def test_each_agents_returns_are_logged_by_its_name():
    stats = RunStats(agents=("speaker_0", "listener_0"))
    buf = message(env_steps=100)
    buf["n_episodes"].fill_(3)
    buf["ep_return"][:3] = torch.tensor([1.0, 3.0, 5.0], dtype=torch.float64)
    buf["ep_agent"][:3] = torch.tensor([0, 0, 1])
    stats.add(buf)
    written = window_scalars(stats, dt=1.0, steps=100)
    assert written["agents/speaker_0_return"] == 2.0
    assert written["agents/listener_0_return"] == 5.0
    assert written["charts/episodic_return"] == 3.0
