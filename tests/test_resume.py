"""Nothing lost: a resume goes on with the run's record, its best model and fresh randomness;
a killed main process leaves nothing behind and its run resumes from the last checkpoint."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
import warm_python
from proc_helpers import descendants, folder_state, pid_gone, under_load, wait_until
from run_helpers import RecentEpisodes
from tb_helpers import scalar_points

from a3c.learning.normalize import RunningMeanStd
from a3c.run.config import A3CConfig
from a3c.run.presets import config_for
from a3c.run.steps import StepCount
from a3c.run.trainer import train, worker_seed
from a3c.train import main as train_main
from hogwild.checkpoint import load_checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: CartPole's greedy episodes last at least 8 steps, whatever the policy: an evaluation
#: on episodes cut at this many steps scores below any real one.
SHORT_EPISODE = 3


def cartpole(tmp_path, **kw) -> A3CConfig:
    settings = dict(
        env="CartPole-v1",
        workers=1,
        envs_per_worker=4,
        logdir=str(tmp_path),
        time_limit=60.0,
        seed=3,
    )
    return A3CConfig(**{**settings, **kw})


def copied_run(run, tmp_path):
    """A copy of ``run``'s checkpoint.pt, best.pt and config.json in its own folder."""
    copy = tmp_path / "run"
    copy.mkdir()
    for name in ("checkpoint.pt", "best.pt", "config.json"):
        (copy / name).write_bytes((run / name).read_bytes())
    return copy


def resumed_scoring_short(logdir, checkpoint):
    """A resume of ``checkpoint`` whose evaluations score episodes cut at SHORT_EPISODE
    steps (worse than any real score), stopping at its first evaluation."""
    return train(
        cartpole(
            logdir,
            total_steps=10_000_000,
            env_kwargs={"max_episode_steps": SHORT_EPISODE},
            eval_interval=0.5,
            eval_episodes=2,
            target_metric="eval",
            target_return=1.0,
            resume=str(checkpoint),
        )
    )


@pytest.fixture(scope="module")
def evaluated_run(tmp_path_factory):
    """A short run that ends at its first evaluation, with a full 100-episode window."""
    tmp_path = tmp_path_factory.mktemp("evaluated")
    r = train(
        cartpole(
            tmp_path,
            total_steps=200_000,
            lr=1e-4,  # slow learning, short episodes: 100 of them before the evaluation
            eval_interval=1.0,
            eval_episodes=3,
            target_metric="eval",
            target_return=1.0,  # stop at the first evaluation (any score is >= 1)
            run_name="first",
        )
    )
    assert r.exit_code == 0 and math.isfinite(r.best_eval)
    return r


def test_resume_restores_the_runs_history(evaluated_run, tmp_path):
    saved = load_checkpoint(evaluated_run.run_dir / "checkpoint.pt")
    history = saved["history"]
    assert len(history["recent"]) == 100 and history["episodes"] >= 100
    assert history["best_eval"] == evaluated_run.best_eval
    assert history["solved_at"] is not None and history["best_100"] is not None
    # Resuming with no step left to take: the record that comes back is the one saved.
    copy = tmp_path / "run"
    copy.mkdir()
    for name in ("checkpoint.pt", "config.json"):  # a run folder: resumed in place
        (copy / name).write_bytes((evaluated_run.run_dir / name).read_bytes())
    r = train(
        cartpole(
            tmp_path,
            total_steps=saved["env_steps"],
            eval_interval=0.0,
            target_return=1.0,
            resume=str(copy / "checkpoint.pt"),
        )
    )
    assert r.exit_code == 0
    assert r.best_eval == evaluated_run.best_eval
    assert r.solved_at == tuple(history["solved_at"])
    assert r.best_mean_100 == tuple(history["best_100"])
    assert r.mean_return_100 == pytest.approx(sum(history["recent"]) / 100)
    again = load_checkpoint(copy / "checkpoint.pt")["history"]
    assert again == history
    assert load_checkpoint(copy / "checkpoint.pt")["wall_time"] >= saved["wall_time"]


def test_a_poor_evaluation_after_resume_keeps_the_better_best(evaluated_run, tmp_path):
    run = evaluated_run.run_dir
    best_before = load_checkpoint(run / "best.pt")
    assert best_before["eval_mean_return"] == evaluated_run.best_eval >= 8
    # The resumed run's evaluations score episodes cut at SHORT_EPISODE steps: worse
    # than the saved best, and it stops at its first one.
    copy = copied_run(run, tmp_path)
    r = resumed_scoring_short(tmp_path, copy / "checkpoint.pt")
    assert r.exit_code == 0
    best_after = load_checkpoint(copy / "best.pt")
    assert best_after["eval_mean_return"] == best_before["eval_mean_return"]
    for k, v in best_before["model"].items():
        assert torch.equal(v, best_after["model"][k]), k
    assert r.best_eval == evaluated_run.best_eval


def test_a_resume_from_best_pt_branches_into_a_new_run_folder(evaluated_run, tmp_path, capsys):
    """The newer run beside best.pt is not overwritten: its checkpoint.pt, events and best.pt
    stay as they were; the branch records where it came from and keeps best.pt's model."""
    run = evaluated_run.run_dir
    copy = copied_run(run, tmp_path)
    before = {f.name: f.read_bytes() for f in copy.iterdir()}
    best = load_checkpoint(copy / "best.pt")
    logdir = tmp_path / "runs"
    r = train(
        cartpole(
            logdir,
            total_steps=best["env_steps"] + 2_000,
            eval_interval=0.0,
            target_return=1e9,
            resume=str(copy / "best.pt"),
        )
    )
    assert r.exit_code == 0
    assert {f.name: f.read_bytes() for f in copy.iterdir()} == before
    assert r.run_dir.parent == logdir
    assert "resumed from" in capsys.readouterr().err
    assert json.loads((r.run_dir / "config.json").read_text())["resume"] == str(copy / "best.pt")
    branch = load_checkpoint(r.run_dir / "checkpoint.pt")
    assert branch["env_steps"] >= best["env_steps"] + 2_000
    assert r.best_eval == best["eval_mean_return"]
    assert (r.run_dir / "best.pt").read_bytes() == before["best.pt"]


def test_best_pt_holds_the_step_and_statistics_it_was_scored_with(evaluated_run):
    best = load_checkpoint(evaluated_run.run_dir / "best.pt")
    last = load_checkpoint(evaluated_run.run_dir / "checkpoint.pt")
    assert best["env_steps"] == last["history"]["best_eval_step"] <= last["env_steps"]
    # The observation statistics saved are the ones the scored model normalised with.
    rms = best["obs_rms"]
    torch.testing.assert_close(best["model"]["obs_mean"], rms[1:5].float())
    assert rms[0] <= last["obs_rms"][0]


def test_resumed_workers_draw_fresh_seeds_reproducibly(tmp_path):
    assert worker_seed(3, 0, 0) == 3  # a fresh run keeps the seeds it always had
    assert worker_seed(3, 0, 4000) not in (worker_seed(3, 0, 0), worker_seed(3, 0, 8000))
    assert worker_seed(3, 0, 4000) == worker_seed(3, 0, 4000)
    first = train(cartpole(tmp_path, total_steps=2_000, eval_interval=0.0, run_name="base"))
    ckpt = first.run_dir / "checkpoint.pt"
    assert "rng" in load_checkpoint(ckpt)

    def resumed(name: str) -> dict:
        copy = tmp_path / name
        copy.mkdir()
        (copy / "checkpoint.pt").write_bytes(ckpt.read_bytes())
        cfg = cartpole(
            tmp_path, total_steps=4_000, eval_interval=0.0, resume=str(copy / "checkpoint.pt")
        )
        assert train(cfg).exit_code == 0
        return load_checkpoint(copy / "checkpoint.pt")

    a, b = resumed("a"), resumed("b")
    assert a["env_steps"] == b["env_steps"] == 4_000
    for k, v in a["model"].items():
        torch.testing.assert_close(v, b["model"][k], rtol=0, atol=0, msg=k)


def test_one_step_rollouts_of_one_env_learn(tmp_path):
    """--n-steps 1 --envs-per-worker 1: one sample per update, whose explained variance
    is undefined; that figure once vetoed every update (NonFiniteUpdates), leaving the
    policy random. One worker: the run is the same every time (its last 20 episodes
    averaged 60 at 4.9k steps; its 100-episode mean, the random start's included, at 7.1k)."""
    recent = RecentEpisodes(20, 60.0)
    r = train(
        config_for(
            "CartPole-v1",
            workers=1,
            n_steps=1,
            envs_per_worker=1,
            total_steps=60_000,
            target_return=1e9,
            eval_interval=0.0,
            logdir=str(tmp_path),
            seed=1,
        ),
        callbacks=[recent],
    )
    assert r.exit_code == 0
    # A random policy's CartPole episodes average ~22 steps; 20 of them, below 35.
    assert recent.reached_at is not None, f"not by {r.env_steps} steps"


def test_the_global_step_count_never_dips_at_a_sync_round():
    steps = StepCount(workers=2)
    sent = steps.start_round(reported=1_000)  # the round starts with this node's 1000 steps
    steps.count(reported=1_500)  # the workers go on while the collective runs
    assert steps.total == 1_500
    other_node = 2_000
    steps.end_round(sent + other_node, reported=1_500)
    assert steps.total == 1_500 + other_node  # was 1_000 + other_node: a dip of 500
    assert int(steps.published) == steps.total


def test_a_dead_workers_unreported_steps_still_count():
    steps = StepCount(workers=2, start=100)
    steps.per_worker[1] += 50  # counted by the worker, never sent as telemetry
    assert steps.count(reported=120) == 150


def test_restored_statistics_count_once_across_nodes():
    saved = RunningMeanStd(1, 2)
    saved.add(0, torch.randn(50, 2, dtype=torch.float64))
    state = saved.state()
    nodes = [RunningMeanStd(2, 2), RunningMeanStd(2, 2)]
    nodes[0].load(state)
    nodes[1].load(state, remote=True)
    for rank, node in enumerate(nodes):
        assert float(node.merged()[0]) == 50, f"node {rank} before the first round"
    locals_ = [node.local() for node in nodes]
    for rank, node in enumerate(nodes):
        node.set_remote([row for r, row in enumerate(locals_) if r != rank])
        torch.testing.assert_close(node.merged(), state)


def test_kill_9_of_the_main_process_leaves_nothing_and_resumes(tmp_path):
    shm_before = set(os.listdir("/dev/shm"))
    args = [
        sys.executable,
        "-m",
        "a3c.train",
        "--workers",
        "2",
        "--total-steps",
        "100000000",
        "--target-return",
        "1e9",
        "--eval-interval",
        "0.5",
        "--eval-episodes",
        "2",
        "--checkpoint-interval",
        "1",
        "--logdir",
        str(tmp_path),
        "--run-name",
        "killed",
    ]
    proc = warm_python.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    best_seen: list[int] = []

    def later_checkpoint_with_episodes() -> list:
        """A periodic checkpoint written after the first best.pt, whose history has episodes
        (both files are written atomically, so reading them mid-run is safe)."""
        best, ckpts = list(tmp_path.glob("*/best.pt")), list(tmp_path.glob("*/checkpoint.pt"))
        if not best or not ckpts:
            return []
        best_seen[:] = best_seen or [best[0].stat().st_mtime_ns]
        if ckpts[0].stat().st_mtime_ns <= best_seen[0]:
            return []
        return ckpts if load_checkpoint(ckpts[0])["history"]["episodes"] > 0 else []

    try:
        ckpts = wait_until(
            later_checkpoint_with_episodes,
            what="a checkpoint after best.pt",
            progress=lambda: folder_state(tmp_path),
            procs=[proc],
        )
        family = descendants(proc.pid)
        assert len(family) >= 3, "two workers and an evaluator"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + under_load(10)  # at load ~9 on 2 cores, 10 s fell short
    while not all(pid_gone(p) for p in family):
        assert time.monotonic() < deadline, "children outlived a kill -9 of their main process"
        time.sleep(0.1)
    pids = [str(p) for p in (proc.pid, *family)]  # only this run's: other processes come and go
    ours = {n for n in set(os.listdir("/dev/shm")) - shm_before if any(p in n for p in pids)}
    assert not ours, f"shared memory left behind: {ours}"

    run = ckpts[0].parent
    saved = load_checkpoint(run / "checkpoint.pt")
    best = load_checkpoint(run / "best.pt")
    extra = 1_000
    code = train_main(
        [
            "--resume",
            str(run / "checkpoint.pt"),
            "--total-steps",
            str(saved["env_steps"] + extra),
            "--eval-interval",
            "0",
            "--logdir",
            str(tmp_path),
        ]
    )
    assert code == 0 and sorted(tmp_path.iterdir()) == [run]
    after = load_checkpoint(run / "checkpoint.pt")
    assert after["env_steps"] >= saved["env_steps"] + extra
    assert after["history"]["episodes"] >= saved["history"]["episodes"] > 0
    assert after["history"]["best_100"][0] >= saved["history"]["best_100"][0]
    assert after["history"]["best_eval"] >= best["eval_mean_return"]
    assert after["wall_time"] > saved["wall_time"]
    assert load_checkpoint(run / "best.pt")["eval_mean_return"] == best["eval_mean_return"]


def test_a_resume_with_a_higher_target_stops_at_the_new_one():
    """The record says which target was reached: a run resumed with a higher one is not
    solved until its mean reaches that (a record from before it was kept counts as solved)."""
    from a3c.run.record import RunHistory, Solved
    from a3c.run.stopping import StopRules
    from a3c.run.telemetry import RunStats

    stats = RunStats()
    stats.recent.extend([150.0] * 100)
    history = RunHistory(solved_at=Solved(10.0, 1_000, target=100.0))
    rules = StopRules(A3CConfig(target_return=200.0), history)
    assert not rules.solved_now(stats, 20.0, 2_000)
    stats.recent.extend([250.0] * 100)
    assert rules.solved_now(stats, 30.0, 3_000)
    assert history.solved_at == Solved(30.0, 3_000, 200.0)
    assert RunHistory.from_state(history.state()).solved_at == history.solved_at
    # A lower target than the one reached, or a record without its target: solved already.
    for solved in (Solved(10.0, 1_000, target=300.0), Solved(10.0, 1_000)):
        again = StopRules(A3CConfig(target_return=200.0), RunHistory(solved_at=solved))
        assert not again.solved_now(stats, 40.0, 4_000)


def test_a_resume_with_a_larger_budget_goes_on_with_the_decay_where_it_was(tmp_path):
    """A linear rate stopped early (at ~2k of 40k steps) and resumed with a budget 4k steps
    on goes on from where the decay was to 0 there, instead of jumping up to
    1 - 2k/(2k + 4k) of the rate."""
    from a3c.learning.schedules import decay_done

    assert decay_done(2_000, 4_000) == 0.5
    assert decay_done(5_000, 8_000, 2_000, 0.5) == 0.75
    assert decay_done(9_000, 8_000, 2_000, 0.5) == decay_done(1, 1, 2, 0.0) == 1.0
    lr, first_budget = 1e-3, 40_000
    first = train(
        cartpole(
            tmp_path,
            total_steps=first_budget,
            lr=lr,
            lr_schedule="linear",
            eval_interval=0.0,
            log_interval=0.05,
        ),
        callbacks=[lambda e: e.env_steps < 2_000],
    )
    steps = load_checkpoint(first.run_dir / "checkpoint.pt")["env_steps"]
    assert 2_000 <= steps < first_budget
    done = steps / first_budget
    cfg = cartpole(
        tmp_path,
        total_steps=steps + 4_000,
        lr=lr,
        lr_schedule="linear",
        eval_interval=0.0,
        log_interval=0.05,
        resume=str(first.run_dir / "checkpoint.pt"),
    )
    given = dataclasses.replace(cfg)
    r = train(cfg)
    assert r.exit_code == 0 and r.env_steps >= steps + 4_000
    assert cfg == given  # the run records where its decays start; the caller's config stays
    config = json.loads((r.run_dir / "config.json").read_text())
    assert (config["decay_start_steps"], config["decay_start_done"]) == (steps, done)
    rates = [(s, v) for s, v in scalar_points(r.run_dir)["charts/learning_rate"] if s > steps]
    assert rates and max(v for _, v in rates) <= lr * (1 - done) + 1e-9
    window = 1_000  # a point averages the rates of its window's steps, before its own
    for step, rate in rates:
        later, earlier = (decay_done(s, steps + 4_000, steps, done) for s in (step, step - window))
        assert lr * (1 - later) - 1e-6 <= rate <= lr * (1 - earlier) + 1e-6, (step, rate)


def test_a_branch_from_a_renamed_checkpoint_writes_its_own_best(evaluated_run, tmp_path):
    """A copy of checkpoint.pt under another name branches; the parent's best evaluation is
    not in the new folder, so the branch's own first evaluation writes its best.pt, even
    one that scores below the parent's (episodes cut at SHORT_EPISODE steps)."""
    snapshot = tmp_path / "snap_40k.pt"
    snapshot.write_bytes((evaluated_run.run_dir / "checkpoint.pt").read_bytes())
    assert load_checkpoint(snapshot)["history"]["best_eval"] == evaluated_run.best_eval >= 8
    r = resumed_scoring_short(tmp_path / "runs", snapshot)
    assert r.exit_code == 0
    best = load_checkpoint(r.run_dir / "best.pt")
    assert best["eval_mean_return"] == r.best_eval <= SHORT_EPISODE
    assert load_checkpoint(r.run_dir / "checkpoint.pt")["history"]["best_eval"] == r.best_eval


def test_a_resume_in_place_says_it_ignores_logdir_and_run_name(evaluated_run, tmp_path, capsys):
    copy = copied_run(evaluated_run.run_dir, tmp_path)
    steps = load_checkpoint(copy / "checkpoint.pt")["env_steps"]
    elsewhere = tmp_path / "elsewhere"
    code = train_main(
        ["--resume", str(copy / "checkpoint.pt"), "--logdir", str(elsewhere),
         "--run-name", "mine", "--total-steps", str(steps + 1_000), "--eval-interval", "0"]
    )  # fmt: skip
    assert code == 0
    err = capsys.readouterr().err
    assert f"--logdir {elsewhere} and --run-name mine ignored" in err
    assert not elsewhere.exists()
    assert load_checkpoint(copy / "checkpoint.pt")["env_steps"] >= steps + 1_000
