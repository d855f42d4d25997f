"""``python -m a3c.tune``: real short trials, the best settings as a file ``--config`` takes."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import warm_python
from tb_helpers import scalar_values

pytest.importorskip("optuna", reason='a3c.tune needs the tune extra (pip install -e ".[tune]")')

import a3c.tune as tuning  # noqa: E402
from a3c.run import presets  # noqa: E402
from a3c.run.config import A3CConfig  # noqa: E402
from a3c.tune import CurveScore, main, space  # noqa: E402


def test_a_search_writes_settings_that_a_run_takes(tmp_path, capsys, monkeypatch):
    """In this process (the signal tests below run it as a command): a helper job's
    trials are reported with the main one's, and a3c.train takes the file as written."""
    from a3c.train import main as train_main

    monkeypatch.chdir(tmp_path)
    code = main(["--env", "CartPole-v1", "--trials", "3", "--budget", "2", "--workers", "1",
                 "--jobs", "2", "--out", "best.toml", "--logdir", "study"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, out + err
    rows = [line for line in out.splitlines() if line.startswith("| ") and "trial" not in line]
    assert len(rows) == 3, out  # every trial, from both processes
    assert any("the preset" in row for row in rows), out
    best = tomllib.loads((tmp_path / "best.toml").read_text())
    assert best["env"] == "CartPole-v1" and best["algo"] == "a3c"
    runs = sorted((tmp_path / "study" / "trials").iterdir())
    assert len(runs) == 3 and all((r / "checkpoint.pt").exists() for r in runs)
    # The file is what a3c.train --config takes.
    argv = ["--config", "best.toml", "--total-steps", "2000", "--eval-interval", "0"]
    assert train_main([*argv, "--workers", "1"]) == 0, capsys.readouterr().err


def test_bad_arguments_are_one_line(tmp_path, capsys):
    assert main(["--env", "NoSuchEnv-v0", "--logdir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("a3c.tune: error:"), err
    assert main(["--env", "CartPole-v1", "--trials", "0", "--logdir", str(tmp_path)]) == 2


def test_the_space_stays_inside_the_declared_ranges():
    for algo in ("a3c", "appo"):
        dims = space(algo)
        assert dims["gamma"].values and all(0 <= g <= 1 for g in dims["gamma"].values)
        assert dims["lr"].low > 0
    assert "epochs" in space("appo") and "epochs" not in space("a3c")


class FakeTrial:
    """Records reports; prunes once told to."""

    def __init__(self, prune_after: int) -> None:
        self.reports: list[tuple[float, int]] = []
        self.prune_after = prune_after

    def report(self, value: float, step: int) -> None:
        self.reports.append((value, step))

    def should_prune(self) -> bool:
        return len(self.reports) >= self.prune_after


def event(seconds: float, mean: float | None, kind: str = "log") -> SimpleNamespace:
    return SimpleNamespace(kind=kind, seconds=seconds, mean_return_100=mean, progress=mean)


def test_the_score_is_the_time_average_of_the_curve_and_a_lagging_run_is_stopped():
    trial = FakeTrial(prune_after=10)
    score = CurveScore(trial)
    assert score(event(0.5, None)) is None  # no episode yet: nothing to score
    for t, mean in [(1, 10.0), (2, 30.0), (4, 30.0)]:
        assert score(event(t, mean)) is None
    assert score(event(5, 0.0, kind="eval")) is None  # only log points count
    # Trapezoids: (1 s x 20 + 2 s x 30) / 3 s.
    assert score.value == pytest.approx(80 / 3)
    assert [step for _, step in trial.reports] == [2, 4]
    lagging = CurveScore(FakeTrial(prune_after=1))
    lagging(event(1, 5.0))
    assert lagging(event(2, 5.0)) is False and lagging.pruned


# ------------------------------------------------------------ image envs, schedules (issue 34)


def quick(tmp_path: Path, env: str, *argv: str) -> list[str]:
    """``a3c.tune`` arguments for a short in-process search of ``env`` (one worker)."""
    return [
        "--env", env, "--budget", "1", "--workers", "1", "--seed", "1",
        "--out", str(tmp_path / "best.toml"), "--logdir", str(tmp_path / "study"), *argv,
    ]  # fmt: skip


def trial_configs(tmp_path: Path) -> list[dict]:
    runs = sorted((tmp_path / "study" / "trials").iterdir())
    return [json.loads((r / "config.json").read_text()) for r in runs]


def test_an_image_env_is_searched_without_what_its_policy_refuses(tmp_path, capsys):
    """MinAtar's conv net takes no separate networks (the issue's search ended on them)."""
    pytest.importorskip("minatar", reason='needs the minatar extra: pip install -e ".[minatar]"')
    argv = quick(tmp_path, "MinAtar/Breakout-v1", "--trials", "3", "--no-preset-first")
    assert main(argv) == 0, capsys.readouterr().err
    best = tomllib.loads((tmp_path / "best.toml").read_text())
    assert best["env"] == "MinAtar/Breakout-v1"
    # Ignored by a conv net or refused by it: none is searched, none is written.
    assert not {"separate_networks", "hidden", "normalize_obs"} & set(best), best
    assert {"lr", "gamma", "n_steps"} <= set(best), best
    assert not any(c["separate_networks"] for c in trial_configs(tmp_path))


def test_a_refused_trial_is_pruned_with_its_reason_and_the_search_goes_on(
    tmp_path, capsys, monkeypatch
):
    pytest.importorskip("minatar", reason='needs the minatar extra: pip install -e ".[minatar]"')
    # Trial 0 asks for what the conv net refuses, trial 1 for what it takes.
    monkeypatch.setattr(
        tuning, "suggest", lambda trial, dims: {"separate_networks": trial.number == 0}
    )
    argv = quick(tmp_path, "MinAtar/Breakout-v1", "--trials", "2", "--no-preset-first")
    assert main(argv) == 0
    out, err = capsys.readouterr()
    (reason,) = [line for line in err.splitlines() if "trial 0 pruned" in line]
    assert "separate" in reason, err
    assert "| 0 | pruned: refused |" in out and "| 1 | complete |" in out, out
    assert (tmp_path / "best.toml").exists()


def test_a_search_whose_every_trial_is_refused_is_one_line(tmp_path, capsys, monkeypatch):
    pytest.importorskip("minatar", reason='needs the minatar extra: pip install -e ".[minatar]"')
    monkeypatch.setattr(tuning, "suggest", lambda trial, dims: {"separate_networks": True})
    argv = quick(tmp_path, "MinAtar/Breakout-v1", "--trials", "2", "--no-preset-first")
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert sum("pruned, its settings refused" in line for line in err) == 2, err
    assert err[-1].startswith("a3c.tune: error:") and "every trial" in err[-1], err
    assert "Traceback" not in "\n".join(err)
    assert not (tmp_path / "best.toml").exists()


def test_a_minigrid_env_is_made_with_its_presets_wrappers(tmp_path, capsys):
    """The preset's ImgObsWrapper drops the text mission that no policy takes."""
    pytest.importorskip("minigrid", reason="MiniGrid needs the [minigrid] extra")
    assert main(quick(tmp_path, "MiniGrid-Empty-5x5-v0", "--trials", "1")) == 0, (
        capsys.readouterr().err
    )
    assert tomllib.loads((tmp_path / "best.toml").read_text())["env"] == "MiniGrid-Empty-5x5-v0"


SCHEDULED = """
[default]
["CartPole-v1"]
lr = 1e-3
lr_schedule = "linear"
total_steps = 40_000
log_interval = 0.1
"""


def test_a_trial_runs_the_presets_schedule_and_the_file_records_it(tmp_path, capsys, monkeypatch):
    """A decaying rate keeps its horizon in a trial (the budget stops the run), so the
    trial scores the schedule that ``a3c.train --config`` runs from the written file."""
    real = presets.load_presets
    monkeypatch.setattr(presets, "load_presets", lambda text=None: real(SCHEDULED))
    assert main(quick(tmp_path, "CartPole-v1", "--trials", "1", "--budget", "2")) == 0, (
        capsys.readouterr().err
    )
    (cfg,) = trial_configs(tmp_path)
    assert (cfg["lr_schedule"], cfg["total_steps"]) == ("linear", 40_000)
    (run,) = (tmp_path / "study" / "trials").iterdir()
    rates = scalar_values(run)["charts/learning_rate"]
    start = float(np.float32(1e-3))  # TensorBoard keeps float32: 1e-3 reads back a hair above
    assert len(rates) >= 2 and rates[-1] < rates[0] <= start, rates  # it decays
    best = tomllib.loads((tmp_path / "best.toml").read_text())
    assert (best["lr_schedule"], best["total_steps"]) == ("linear", 40_000), best


def test_a_constant_schedule_runs_to_the_time_budget_alone():
    cfg = A3CConfig()
    assert not cfg.decays() and tuning.schedule(cfg) == {}
    for decaying in ({"lr_schedule": "linear"}, {"entropy_coef_final": 0.0},
                     {"clip_range_final": 0.05}):  # fmt: skip
        cfg = A3CConfig(total_steps=1000, **decaying)
        assert cfg.decays() and tuning.schedule(cfg)["total_steps"] == 1000, decaying


# ------------------------------------------- the preset's algorithm, one search a logdir (issue 54)

#: What a trial sets for itself, which the written file leaves to ``a3c.train``.
RUN_ONLY = {"time_limit", "target_return", "eval_interval", "seed", "logdir", "run_name"}


def test_a_search_runs_the_presets_algorithm_and_the_file_reproduces_its_trial(
    tmp_path, capsys, monkeypatch
):
    """Pendulum's preset chooses APPO: without --algo every trial runs it, trial 0 is the
    preset as it is, and the file trains at the trials' algorithm and worker count."""
    monkeypatch.setattr(tuning.os, "cpu_count", lambda: 1)  # the default --workers: 1
    argv = [
        "--env", "Pendulum-v1", "--trials", "1", "--budget", "2", "--seed", "1",
        "--out", str(tmp_path / "best.toml"), "--logdir", str(tmp_path / "study"),
    ]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    (trial,) = trial_configs(tmp_path)
    assert (trial["algo"], trial["workers"], trial["n_steps"]) == ("appo", 1, 256), trial
    best = tomllib.loads((tmp_path / "best.toml").read_text())
    assert best == {"env": "Pendulum-v1", "algo": "appo", "workers": 1}, best
    again = dataclasses.asdict(presets.config_for(config_file=tmp_path / "best.toml"))
    again = json.loads(json.dumps(again))  # as config.json keeps it: lists, not tuples
    differ = {k for k in trial if k not in RUN_ONLY and again[k] != trial[k]}
    assert differ <= {"total_steps"}, differ  # the trial's: none, the budget stopped it


def test_a_logdir_holds_one_search_continued_only_with_its_settings(tmp_path, capsys):
    assert main(quick(tmp_path, "CartPole-v1", "--trials", "1")) == 0, capsys.readouterr().err
    capsys.readouterr()
    (tmp_path / "best.toml").unlink()
    for other in (["--env", "Pendulum-v1"], ["--algo", "appo"], ["--budget", "2"]):
        assert main([*quick(tmp_path, "CartPole-v1", "--trials", "1"), *other]) == 2, other
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "holds another search" in err[0], err
        assert not (tmp_path / "best.toml").exists()
    assert len(trial_configs(tmp_path)) == 1  # none ran
    # The same search again continues it: its trial 0 (the preset) and a new one.
    assert main(quick(tmp_path, "CartPole-v1", "--trials", "1")) == 0
    out = capsys.readouterr().out
    assert "continuing the search" in out and "| 0 | complete |" in out, out
    assert len(trial_configs(tmp_path)) == 2


@pytest.mark.parametrize("budget", ["nan", "inf"])
def test_a_budget_that_is_not_a_number_of_seconds_is_one_line(tmp_path, capsys, budget):
    assert main(["--env", "CartPole-v1", "--budget", budget, "--logdir", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("a3c.tune: error:") and "--budget" in err[0], err
    assert not (tmp_path / "s").exists()


# ------------------------------------------- finished trials only, signals (issue 69, item 4)


def test_only_the_trials_that_ran_their_budget_are_ranked():
    """Optuna keeps a pruned trial's last report as its value: an interrupted trial's
    229.8 over 10 s of a 20 s budget outranked a finished 21.3."""
    import optuna
    from optuna.trial import TrialState, create_trial

    study = optuna.create_study(direction="maximize")
    study.add_trial(create_trial(value=21.3, state=TrialState.COMPLETE))
    pruned = create_trial(value=229.8, state=TrialState.PRUNED, intermediate_values={10: 229.8})
    pruned.set_user_attr("pruned", "interrupted")
    study.add_trial(pruned)
    assert [t.number for t in tuning.completed(study)] == [0]
    rows = tuning.table(study).splitlines()[2:]
    assert rows == ["| 0 | complete | 21.3 | the preset |", "| 1 | pruned: interrupted |  |  |"]


def test_a_signal_in_a_trial_stops_the_search_which_keeps_what_finished(
    tmp_path, capsys, monkeypatch
):
    """SIGTERM in trial 1's run: it stops (a checkpoint), no trial starts after it, the
    search exits 143, and the file is the finished trial 0's."""
    import optuna

    from a3c.run import trainer

    real = trainer.train

    def train(cfg, callbacks=()):
        def signal_once(event):
            if cfg.run_name == "trial001" and event.kind == "log":
                os.kill(os.getpid(), signal.SIGTERM)

        return real(cfg, callbacks=[*callbacks, signal_once])

    monkeypatch.setattr(trainer, "train", train)
    monkeypatch.setattr(tuning, "suggest", lambda trial, dims: {})
    assert main(quick(tmp_path, "CartPole-v1", "--trials", "3")) == 143
    out, err = capsys.readouterr()
    assert "| 0 | complete |" in out and "| 1 | pruned: interrupted |  |" in out, out
    assert "| 2 |" not in out and "interrupted; the 1 finished trial(s) stay" in err, err
    header = (tmp_path / "best.toml").read_text().splitlines()[1]
    assert "trial 0:" in header and "1 of 2 trials finished" in header, header
    study = optuna.load_study(study_name=tuning.STUDY, storage=tuning._storage(
        SimpleNamespace(logdir=str(tmp_path / "study"))))  # fmt: skip
    assert [t.state.name for t in study.trials] == ["COMPLETE", "PRUNED"]


def test_sigterm_stops_every_job_and_exits_143(tmp_path):
    """A signal to the main process alone (a scheduler's) stops the helper job too,
    whether it is starting or in a trial: it ran its remaining trials before."""
    from proc_helpers import CHILD_ENV, descendants, pid_gone, under_load, wait_until

    proc = warm_python.Popen(
        [sys.executable, "-m", "a3c.tune", "--env", "CartPole-v1", "--trials", "4",
         "--jobs", "2", "--budget", "60", "--workers", "1", "--logdir", "study"],
        cwd=tmp_path, env=CHILD_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    wait_until(lambda: list(tmp_path.glob("study/trials/*/events.out.*")),
               what="no trial started", procs=[proc])  # fmt: skip
    family = descendants(proc.pid)
    proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=under_load(60))
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("a3c.tune did not stop within a minute of SIGTERM")
    assert proc.returncode == 143, err
    started = len(list(tmp_path.glob("study/trials/*")))
    # a helper's trial caught before its run made a folder is interrupted too
    assert out.count("pruned: interrupted") >= started >= 1 and "Traceback" not in err, out + err
    assert (
        "complete" not in out
        and len(list(tmp_path.glob("study/trials/*/checkpoint.pt"))) == started
    )
    assert not (tmp_path / "best.toml").exists()
    deadline = time.monotonic() + 10
    while not all(pid_gone(p) for p in family):
        assert time.monotonic() < deadline, "a job outlived the search"
        time.sleep(0.1)


# ---------------------------------------------- the env as a3c.train takes it (issue 69, item 5)


def test_a_search_takes_the_env_settings_and_the_file_keeps_them(tmp_path, capsys):
    """simple_speaker_listener needs --agent-groups prefix (its agents' spaces differ):
    a3c.tune refused the flag that its own error advised."""
    pytest.importorskip("mpe2", reason='needs the pettingzoo extra: pip install -e ".[pettingzoo]"')
    env = "mpe2.simple_speaker_listener_v4:parallel_env"
    argv = quick(tmp_path, env, "--trials", "1", "--agent-groups", "prefix",
                 "--env-kwargs", "max_cycles=25")  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    (trial,) = trial_configs(tmp_path)
    assert trial["agent_groups"] == "prefix" and trial["env_kwargs"] == {"max_cycles": 25}
    again = presets.config_for(config_file=tmp_path / "best.toml")
    assert again.env_options() == {"max_cycles": 25, "agent_groups": "prefix"}


def test_a_search_starts_from_a_config_file_with_the_users_wrappers(tmp_path, capsys):
    """--config's settings are every trial's (the env too: no --env), under its
    suggestions; --wrapper as a3c.train's. Another file's search does not continue it."""
    mine = tmp_path / "mine.toml"
    mine.write_text('env = "CartPole-v1"\nn_steps = 7\nenv_kwargs = {max_episode_steps = 60}\n')
    argv = ["--config", str(mine), "--wrapper", "user_envs:Positions", "--budget", "1",
            "--workers", "1", "--trials", "1", "--out", str(tmp_path / "best.toml"),
            "--logdir", str(tmp_path / "study")]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    (trial,) = trial_configs(tmp_path)
    assert (trial["n_steps"], trial["wrappers"]) == (7, ["user_envs:Positions"]), trial
    assert trial["env_kwargs"] == {"max_episode_steps": 60}
    best = tomllib.loads((tmp_path / "best.toml").read_text())
    assert (best["env"], best["n_steps"]) == ("CartPole-v1", 7)
    assert best["wrappers"] == ["user_envs:Positions"]
    assert best["env_kwargs"] == {"max_episode_steps": 60}
    capsys.readouterr()
    mine.write_text('env = "CartPole-v1"\nn_steps = 9\n')
    assert main(argv) == 2
    assert "holds another search" in capsys.readouterr().err


def test_a_board_read_by_the_conv_net_is_searched_without_what_that_net_ignores():
    """Connect four's board goes to the conv net, which takes no MLP sizes, observation
    normalisation or separate networks; as vectors (--policy mlp) it takes them."""
    pytest.importorskip(
        "pettingzoo", reason='needs the pettingzoo extra: pip install -e ".[pettingzoo]"'
    )
    from a3c.envs import env_spaces
    from a3c.run.shared_model import model_spec

    env = "pettingzoo.classic.connect_four_v3:env"
    spaces = env_spaces(env)
    conv = model_spec(presets.config_for(env, separate_networks=False), spaces)
    assert tuning.unusable(conv) == {"separate_networks", "hidden", "normalize_obs"}
    assert tuning.unusable(model_spec(presets.config_for(env, policy="mlp"), spaces)) == set()
