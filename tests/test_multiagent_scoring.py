"""How PettingZoo games are scored and used: a recurrent policy's state per agent, zero-sum
games by seats against a random player (its moves uniform where nothing masks them),
cooperative turn-based games as a team, and self-play's progress read from the evaluator."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tb_helpers import scalar_points

from a3c.envs import env_spaces, make_vector_env
from a3c.learning.collect import Collector
from a3c.policy import ModelSpec
from hogwild.errors import UsageError

pytestmark = pytest.mark.usefixtures("hang_guard")

SPREAD = "mpe2.simple_spread_v3:parallel_env"
SPREAD_TURNS = "mpe2.simple_spread_v3:env"
CONNECT_FOUR = "pettingzoo.classic.connect_four_v3:env"
RPS = "pettingzoo.classic.rps_v2:env"
SMALL = {"N": 2, "max_cycles": 10}


@pytest.fixture(autouse=True)
def _pettingzoo():
    pytest.importorskip("pettingzoo", reason="needs the pettingzoo extra")
    pytest.importorskip("mpe2", reason="needs the pettingzoo extra")


def spread_lstm(seed: int = 0):
    """An LSTM policy of simple_spread (N=2) whose core is the trunk's size: acting
    without it would fit the head and skip the memory silently."""
    torch.manual_seed(seed)
    return ModelSpec((12,), {"type": "discrete", "n": 5}, hidden=(16,), lstm=16).build()


def test_a_recurrent_policy_refuses_the_feed_forward_pass():
    model = spread_lstm()
    with pytest.raises(TypeError, match="act_recurrent"):
        model.act(torch.zeros(2, 12))


def test_an_lstm_policy_plays_many_agents_with_a_state_each():
    """Scoring plays whole games; predict keeps each agent's state, an agent's
    episode_start restarts that agent's alone."""
    from mpe2 import simple_spread_v3

    from a3c.scoring import agent_results, play_games
    from a3c.use.agent import Policy

    model = spread_lstm()
    played = play_games(model, SPREAD, 3, 0, env_kwargs=SMALL)
    assert played.lengths.tolist() == [10, 10, 10] and not played.seats
    assert agent_results(played)[0].startswith("team return")

    policy = Policy(model, SPREAD, SMALL)
    env = simple_spread_v3.parallel_env(**SMALL)
    obs, _ = env.reset(seed=0)
    _, state = policy.predict(obs)
    assert set(state) == {"agent_0", "agent_1"} and state["agent_0"][0].shape == (1, 16)
    obs, *_ = env.step({a: 0 for a in env.agents})
    _, carried = policy.predict(obs, state)
    _, fresh = policy.predict(obs)
    _, one = policy.predict(obs, state, episode_start={"agent_1": True})
    assert not torch.equal(carried["agent_0"][0], fresh["agent_0"][0]), "memory is used"
    assert torch.equal(one["agent_0"][0], carried["agent_0"][0])
    assert torch.equal(one["agent_1"][0], fresh["agent_1"][0])
    with pytest.raises(UsageError, match="dict of each agent's state"):
        policy.predict(obs, state["agent_0"])


def test_recurrent_snapshots_play_their_seats_with_their_own_state():
    from a3c.learning.opponents import Opponents

    model = spread_lstm()
    snapshots = Opponents(model, share=1.0, agents=2, rows=4, seed=0)
    snapshots.keep()
    envs = make_vector_env(SPREAD, 2, seed=0, **SMALL)
    try:
        collector = Collector(envs, model, n_steps=4, seed=0, opponents=snapshots)
        theirs = np.flatnonzero(snapshots.played_by >= 0)
        assert theirs.size == 2
        rollout = collector.collect()
        assert not rollout.acted[:, theirs].any()
        assert snapshots.memory is not None and snapshots.memory[0][theirs].abs().sum() > 0
        snapshots.start(np.array([0, 1]))
        assert snapshots.memory[0].abs().sum() == 0, "a new game starts from the zero state"
    finally:
        envs.close()


def first_evaluation(event) -> bool:
    """A callback that stops the run at its first evaluation (a run's time is then the
    evaluator's start-up, whatever the machine's load)."""
    return event.kind != "eval"


def test_an_lstm_run_of_many_agents_evaluates_keeps_best_and_plays_snapshots(tmp_path):
    """The evaluator scores the LSTM policy (best.pt written), workers play snapshot
    seats; the run exits 0; a3c.evaluate and export take best.pt."""
    from a3c.api import Policy, config_for
    from a3c.evaluate import main as evaluate_main
    from a3c.run.trainer import train

    cfg = config_for(SPREAD, workers=1, policy="lstm", lstm_size=16, hidden=(16,),
                     envs_per_worker=2, minibatches=1, time_limit=90.0, eval_interval=0.5,
                     eval_episodes=1, snapshot_games=0.9, env_kwargs=SMALL,
                     logdir=str(tmp_path))  # fmt: skip
    result = train(cfg, callbacks=[first_evaluation])
    assert result.exit_code == 0
    best = result.run_dir / "best.pt"
    assert best.is_file(), "an evaluation came back"
    assert evaluate_main([str(best), "--episodes", "2"]) == 0
    out = Policy.load(best).export(tmp_path / "policy.pt2")
    assert out.is_file()


def test_which_games_are_zero_sum():
    from a3c.scoring import self_play, zero_sum

    assert zero_sum(CONNECT_FOUR) and zero_sum(RPS)
    assert not zero_sum(SPREAD_TURNS, SMALL) and not zero_sum(SPREAD, SMALL)
    assert not self_play("CartPole-v1")


def test_a_cooperative_turn_based_game_is_scored_as_a_team():
    from a3c.scoring import agent_results, play_games, seat_results

    torch.manual_seed(0)
    rows = env_spaces(SPREAD_TURNS, **SMALL).obs_shape  # 12 an agent, then its seat
    model = ModelSpec(rows, {"type": "discrete", "n": 5}, hidden=(8,)).build()
    played = play_games(model, SPREAD_TURNS, 2, 0, env_kwargs=SMALL)
    assert played.seats == () and seat_results(played) == []
    assert played.agent_returns is not None
    np.testing.assert_allclose(played.returns, played.agent_returns.mean(1))
    assert agent_results(played)[0].startswith("team return")


def test_a_game_without_a_mask_gets_a_uniformly_random_opponent(capsys, tmp_path):
    """Rock-paper-scissors: a policy that always plays rock against a uniform player wins,
    draws and loses rounds alike (15 a game): the games' returns differ (the old
    "random" player read a mask from the observation and always made one move)."""
    from a3c.envs.random_player import UNIFORM_PLAYER
    from a3c.evaluate import main as evaluate_main
    from a3c.scoring import play_games, seat_results

    model = ModelSpec(env_spaces(RPS).obs_shape, {"type": "discrete", "n": 3}, hidden=(8,)).build()
    with torch.no_grad():
        model.head.bias[:3] = torch.tensor([20.0, -20.0, -20.0])
    played = play_games(model, RPS, 12, 0)
    assert played.seats == ("player_0", "player_1")
    assert len(set(played.returns.tolist())) >= 3, played.returns
    assert abs(played.returns.mean()) < 4, "about even against a uniform player"
    assert all(UNIFORM_PLAYER in line for line in seat_results(played))

    path = tmp_path / "rock.pt"
    torch.save({"model": model.state_dict(), "model_spec": model.spec.to_dict(),
                "env_id": RPS}, path)  # fmt: skip
    assert evaluate_main([str(path), "--episodes", "4"]) == 0
    assert f"games against {UNIFORM_PLAYER}" in capsys.readouterr().out

    spread = tmp_path / "spread.pt"
    coop = ModelSpec(env_spaces(SPREAD_TURNS, **SMALL).obs_shape, {"type": "discrete", "n": 5},
                     hidden=(8,)).build()  # fmt: skip
    torch.save({"model": coop.state_dict(), "model_spec": coop.spec.to_dict(),
                "env_id": SPREAD_TURNS, "env_kwargs": SMALL}, spread)  # fmt: skip
    assert evaluate_main([str(spread), "--opponent", "self"]) == 2
    err = capsys.readouterr().err.strip()
    assert "zero-sum" in err and len(err.splitlines()) == 1, err


def test_a_zero_sum_evaluation_reports_win_rates_per_seat_and_against_the_last_one():
    from a3c.scoring import EvalScore

    torch.manual_seed(0)
    model = ModelSpec((91,), {"type": "discrete", "n": 7}, action_mask=True, hidden=(16,)).build()
    score = EvalScore(CONNECT_FOUR, {}, 4, 0)
    first = score(model, torch.device("cpu"), 0)
    assert {"win_rate", "win_rate_player_0", "win_rate_player_1"} <= set(first)
    assert "win_rate_vs_previous" not in first
    assert first["win_rate"] == pytest.approx(
        (first["win_rate_player_0"] + first["win_rate_player_1"]) / 2
    )
    second = score(model, torch.device("cpu"), 1)
    assert 0 <= second["win_rate_vs_previous"] <= 1


def test_self_play_shows_its_progress_and_reads_its_target_against_the_evaluation(tmp_path):
    """Connect four, one policy in both seats: the console and TensorBoard show the
    evaluator's win rates against a random player, the callbacks' progress is its return
    there, a target is read against it (and refused without evaluations)."""
    from a3c.api import config_for
    from a3c.run.config import A3CConfig
    from a3c.run.telemetry import RunStats, status_line
    from a3c.run.trainer import run_config, train

    stats = RunStats(("player_0", "player_1"), self_play=True)
    stats.recent.extend([1.0, -1.0])
    cfg = A3CConfig(env=CONNECT_FOUR)
    assert "no evaluation yet" in status_line(cfg, stats, 0, 1.0, 0).line
    stats.last_eval = {"mean_return": 0.5, "win_rate": 0.75, "win_rate_player_0": 1.0,
                       "win_rate_player_1": 0.5, "win_rate_vs_previous": 0.6}  # fmt: skip
    line = status_line(cfg, stats, 0, 1.0, 0).line
    assert "won 0.75 (player_0 1.00, player_1 0.50)" in line and "previous eval: won 0.60" in line
    assert "mean return(100)" not in line and stats.progress == 0.5

    from a3c.learning.schedules import Horizon

    horizon = Horizon(1000)
    solving = run_config(A3CConfig(env=CONNECT_FOUR, target_return=0.9), "cpu", horizon)
    assert solving.target_metric == "eval"
    with pytest.raises(UsageError, match="--eval-interval"):
        run_config(A3CConfig(env=CONNECT_FOUR, target_return=0.9, eval_interval=0), "cpu", horizon)

    progress: list[float | None] = []

    def note(event) -> bool:
        progress.append(event.progress)
        return first_evaluation(event)

    cfg = config_for(CONNECT_FOUR, workers=1, envs_per_worker=2, time_limit=90.0,
                     eval_interval=0.5, eval_episodes=2, logdir=str(tmp_path))  # fmt: skip
    result = train(cfg, callbacks=[note])
    assert result.exit_code == 0
    scalars = scalar_points(result.run_dir)
    assert "eval/win_rate" in scalars and "eval/win_rate_player_1" in scalars
    assert any(p is not None for p in progress), "an evaluation's return, read by callbacks"
