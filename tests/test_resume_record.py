"""Where a run starts, without running one: the record a resume returns, the decays it
hands the learners, and a config that the run reads but never changes."""

from __future__ import annotations

import dataclasses
import math

import pytest

from a3c.envs import env_spaces
from a3c.learning.schedules import Horizon, decay_done
from a3c.run.config import A3CConfig
from a3c.run.record import RunHistory
from a3c.run.resume import BEST, Resumed, restore
from a3c.run.shared_model import SharedModel
from a3c.run.trainer import run_config
from a3c.run.worker import learner_settings
from hogwild.checkpoint import save_checkpoint
from hogwild.rundir import config_dict

STEPS = 3_000


def _shared(cfg: A3CConfig) -> SharedModel:
    return SharedModel(cfg, env_spaces(cfg.env, **cfg.env_options()))


@pytest.fixture
def saved(tmp_path):
    """A run folder whose checkpoint.pt is at STEPS of 4_000 (its session started the
    decays at 2_000, a quarter done), and an evaluated best.pt beside it."""
    cfg = A3CConfig(total_steps=4_000, decay_start_steps=2_000, decay_start_done=0.25)
    shared = _shared(cfg)
    state = {
        "model": shared.model.state_dict(),
        **shared.state(),
        "config": config_dict(cfg),
        "env_steps": STEPS,
        "wall_time": 12.5,
        "history": RunHistory(best_eval=30.0, best_eval_step=1_000, episodes=7).state(),
    }
    run = tmp_path / "run"
    run.mkdir()
    save_checkpoint(state, run / "checkpoint.pt")
    save_checkpoint({**state, "eval_mean_return": 40.0}, run / BEST)
    return run


def test_a_fresh_run_starts_from_nothing():
    fresh = Resumed.fresh(1_000)
    assert (fresh.run_dir, fresh.steps, fresh.elapsed, fresh.horizon) == (
        None, 0, 0.0, Horizon(1_000)
    )  # fmt: skip
    assert fresh.branched_from is None and not fresh.ignored and not fresh.statistics
    with pytest.raises(dataclasses.FrozenInstanceError):
        fresh.steps = 5  # type: ignore[misc]


def test_a_resume_in_place_goes_on_in_its_folder_with_its_decays(saved, tmp_path):
    cfg = A3CConfig(total_steps=10_000, resume=str(saved / "checkpoint.pt"), run_name="other")
    before = dataclasses.asdict(cfg)
    shared = _shared(cfg)
    r = restore(str(saved / "checkpoint.pt"), cfg, shared)
    assert dataclasses.asdict(cfg) == before
    assert (r.run_dir, r.steps, r.elapsed) == (saved, STEPS, 12.5)
    done = decay_done(STEPS, 4_000, 2_000, 0.25)
    assert r.horizon == Horizon(10_000, STEPS, done)
    assert r.history.episodes == 7
    assert r.history.best_eval == 40.0  # best.pt's, newer than the checkpoint's record
    assert r.branched_from is None and not r.branch_keeps_best
    assert r.ignored == ("--run-name other",)
    assert set(r.statistics) == set(shared.statistics()) != set()


def test_best_pt_branches_with_its_score_and_a_renamed_checkpoint_without(saved, tmp_path):
    cfg = A3CConfig(total_steps=10_000)
    best = restore(str(saved / BEST), cfg, _shared(cfg))
    assert best.run_dir is None and best.branched_from == str(saved / BEST)
    assert best.branch_keeps_best and not best.ignored
    assert (best.history.best_eval, best.history.best_eval_step) == (40.0, STEPS)
    copy = tmp_path / "snap.pt"
    copy.write_bytes((saved / "checkpoint.pt").read_bytes())
    snap = restore(str(copy), cfg, _shared(cfg))
    assert snap.run_dir is None and snap.branched_from == str(copy)
    assert not snap.branch_keeps_best
    assert snap.history.best_eval == -math.inf and snap.history.best_eval_step is None


def test_the_run_config_is_a_new_one_and_the_callers_stays_as_given():
    cfg = A3CConfig(env="CartPole-v1", target_return=None)
    before = dataclasses.asdict(cfg)
    ran = run_config(cfg, "cpu", Horizon(cfg.total_steps, 2_000, 0.5))
    assert dataclasses.asdict(cfg) == before
    assert ran is not cfg and ran.target_return == 475.0  # CartPole-v1's reward threshold
    assert (ran.decay_start_steps, ran.decay_start_done) == (2_000, 0.5)
    assert run_config(A3CConfig(target_return=3.0), "cpu", Horizon(1)).target_return == 3.0
    decoupled = A3CConfig(algo="ppo", workers=2, start_method="fork")
    assert run_config(decoupled, "cuda", Horizon(1)).start_method == "spawn"
    assert decoupled.start_method == "fork"


def test_learners_decay_along_the_horizon_they_are_given():
    cfg = A3CConfig(lr=1e-3, lr_schedule="linear", total_steps=8_000)
    resumed = learner_settings(cfg, Horizon(8_000, 2_000, 0.5)).schedules
    assert resumed.learning_rate(5_000) == pytest.approx(1e-3 * (1 - 0.75))
    # A config's decay_start_* are the record of a run, not a horizon: none is read back.
    recorded = dataclasses.replace(cfg, decay_start_steps=2_000, decay_start_done=0.5)
    assert learner_settings(recorded).schedules.horizon == Horizon(8_000)
