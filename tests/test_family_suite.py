"""``suite.py --family``: each run against its env's target and the published anchors.

The target is met by the final 100-episode mean, or, for Pong, by the mean reaching +18
within the budget; a missed one says by how much.
"""

import math
import re
import sys

import pytest
import warm_python
from script_helpers import BENCHMARKS, load_benchmark

from a3c.run.record import Solved

suite = load_benchmark("suite")
FAMILIES, Budget = suite.FAMILIES, suite.Budget


def family_run(env: str, final: float, budget=None, solved=None, best=math.nan, steps=600_000):
    family = next(f for f in FAMILIES.values() if any(e.env == env for e in f.envs))
    run = suite.ReturnRun(math.nan, final, 600.0, steps, 12.5, solved, best)
    return suite.FamilyRun(family.entry(env), budget or family.budget_of(env), 1, run)


def test_the_final_mean_meets_the_target_or_says_by_how_much_it_missed():
    met = family_run("MinAtar/Breakout-v1", 41.0)
    assert met.met() and met.miss() == "met"
    missed = family_run("MinAtar/Breakout-v1", 30.0)
    assert not missed.met()
    assert missed.miss() == "10.0 short (75% of it)"
    assert missed.row() == (
        "| MinAtar/Breakout-v1 | 1 | 600,000 steps, 10.0 min | 30.0 | 12.5 | 1,000 | 40 "
        "| 10.0 short (75% of it) | gymnax PPO 28 (10M steps) |"
    )
    assert suite.family_summary("minatar", [met, missed]) == (
        "minatar: target met in 1 of 2 runs (MinAtar/Breakout-v1); "
        "median final mean 35.5 over 1 env"
    )


def test_atari_games_are_summed_up_by_their_median_human_normalised_score():
    runs = [
        family_run("BreakoutNoFrameskip-v4", 30.5),  # a human tester's score: 1
        family_run("QbertNoFrameskip-v4", 163.9),  # random play's: 0
        family_run("QbertNoFrameskip-v4", 13_455.0),  # a second seed: Qbert's median is 0.5
        family_run("SpaceInvadersNoFrameskip-v4", 148.0 + 2 * 1_520.7),  # 2
        family_run("PongNoFrameskip-v4", 20.0, solved=Solved(900.0, 1_000_000), best=19.0),
        family_run("BeamRiderNoFrameskip-v4", math.nan),  # never 100 games: no final mean
    ]
    summary = suite.family_summary("atari", runs)
    # Pong is judged by its time to +18, not its final mean: three games, median 1.00.
    assert summary.endswith(
        "; median human-normalised final mean 1.00 over 3 envs (the "
        "first anchors' over the same: 1.29)"
    ), summary
    assert "target met in 3 of 6 runs" in summary


def test_atari_rows_count_frames_and_say_when_the_time_limit_cut_the_step_budget():
    row = family_run("BreakoutNoFrameskip-v4", 160.0, steps=2_000_000).row()
    assert "| 2,000,000 steps = 8.0M frames, 10.0 min (time limit, of 2.50M) | 160.0 |" in row
    assert "| 150 | met | CleanRL PPO 430 (10M steps = 40M frames); A3C paper FF 551.6" in row


def test_pong_is_met_by_reaching_18_within_its_20_minutes_not_by_the_final_mean():
    pong = FAMILIES["atari"].entry("PongNoFrameskip-v4")
    assert pong.reach and FAMILIES["atari"].budget_of(pong.env) == Budget(1200.0)
    reached = family_run(pong.env, 17.5, solved=Solved(1140.0, 1_400_000), best=18.3)
    assert reached.met() and reached.miss() == "met after 19.0 min"
    assert "| 18 within 20 min | met after 19.0 min | CleanRL PPO 20.4" in reached.row()
    late = family_run(pong.env, 18.5, budget=Budget(1800.0), solved=Solved(1500.0, 2_000_000))
    assert late.met()  # a longer --budget is the run's budget
    never = family_run(pong.env, 12.0, best=14.2)
    assert not never.met() and never.miss() == "3.8 short (best mean 14.2)"
    assert family_run(pong.env, math.nan).miss() == "not reached"  # never 100 games


def test_a_budget_flag_replaces_the_time_and_keeps_a_step_budget():
    atari = FAMILIES["atari"]
    assert suite.budget_for("BreakoutNoFrameskip-v4", atari) == Budget(2700.0, 2_500_000)
    assert suite.budget_for("BreakoutNoFrameskip-v4", atari, 600) == Budget(600, 2_500_000)
    assert suite.budget_for("PongNoFrameskip-v4", atari, 600) == Budget(600)
    assert suite.budget_for("CartPole-v1", None, 30) == Budget(30)


def test_every_family_declares_its_envs_targets_and_anchors():
    assert {name: len(f.envs) for name, f in FAMILIES.items()} == dict.fromkeys(FAMILIES, 5)
    assert FAMILIES["atari"].budget == Budget(2700.0, 2_500_000)
    for name, family in FAMILIES.items():
        for entry in family.envs:
            assert suite.family_of(entry.env) == name, entry.env
            assert entry.target > 0 and entry.anchor


def test_a_family_run_prints_its_table_row():
    pytest.importorskip("minatar")
    cmd = [sys.executable, str(BENCHMARKS / "suite.py"), "--family", "minatar"]
    cmd += ["--envs", "MinAtar/Breakout-v1", "--budget", "3", "--seeds", "1"]
    proc = warm_python.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if line.startswith("| MinAtar/"))
    number = r"-?[\d,]+\.\d"
    assert re.fullmatch(
        rf"\| MinAtar/Breakout-v1 \| 1 \| [\d,]+ steps, 0\.\d min \| {number} \| {number} "
        rf"\| [\d,]+ \| 40 \| (met|{number} short \(-?\d+% of it\)) "
        r"\| gymnax PPO 28 \(10M steps\) \|",
        row,
    ), row
    assert "minatar: target met in " in proc.stdout
