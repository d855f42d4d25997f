"""Slips a careful user makes, each answered in one clear line (issue 22's small things)."""

from __future__ import annotations

import pytest
import torch

from a3c.evaluate import main as evaluate_main
from a3c.run.config import NO_STEP_BUDGET, A3CConfig
from a3c.run.presets import config_for, read_config_file
from a3c.run.telemetry import RunStats, status_line
from a3c.run.trainer import train
from a3c.train import main as train_main
from hogwild.errors import UsageError


def test_an_abbreviated_flag_is_refused_not_guessed(capsys):
    with pytest.raises(SystemExit) as e:
        train_main(["--n-step", "5"])
    assert e.value.code == 2
    assert "unrecognized arguments: --n-step" in capsys.readouterr().err


def test_a_config_key_typo_gets_a_suggestion(tmp_path):
    path = tmp_path / "my.toml"
    path.write_text("entropy_cof = 0.01\n")
    with pytest.raises(
        UsageError, match="unknown setting 'entropy_cof'; did you mean 'entropy_coef'"
    ):
        read_config_file(path)


def test_config_for_refuses_an_unknown_keyword_as_a_usage_error():
    with pytest.raises(UsageError, match="unknown setting 'bogus'"):
        config_for("CartPole-v1", bogus=1)
    with pytest.raises(UsageError, match="lr"):
        config_for("CartPole-v1", lr="fast")


def test_the_console_says_no_episode_yet_instead_of_nan():
    line = status_line(A3CConfig(), RunStats(), 0, 1.0, 0).line
    assert "nan" not in line and "(no episode yet)" in line


def test_a_run_stopped_by_time_shows_no_step_budget():
    """Benchmarks and tuning stop runs by time: no '/1,000,000,000,000' budget, no bar."""
    budgeted = status_line(A3CConfig(total_steps=3000), RunStats(), 1024, 1.0, 0)
    assert "steps 1,024/3,000 " in budgeted.line and budgeted.total == 3000
    timed = status_line(A3CConfig(total_steps=NO_STEP_BUDGET), RunStats(), 1024, 1.0, 0)
    assert "steps 1,024 " in timed.line and "/" not in timed.line.split("steps/s")[0]
    assert timed.total is None and timed.done == 1024


def test_one_episode_is_one_episode(tmp_path, capsys):
    r = train(A3CConfig(workers=1, total_steps=400, eval_interval=0.0, logdir=str(tmp_path)))
    assert evaluate_main([str(r.run_dir / "checkpoint.pt"), "--episodes", "1"]) == 0
    out = capsys.readouterr().out
    assert "over 1 episode" in out and "episodes" not in out.split("over")[1]


def test_resume_with_another_env_names_what_differs(tmp_path, capsys):
    r = train(A3CConfig(workers=1, total_steps=400, eval_interval=0.0, logdir=str(tmp_path)))
    capsys.readouterr()
    code = train_main(
        [
            "--resume",
            str(r.run_dir / "checkpoint.pt"),
            "--env",
            "Acrobot-v1",
            "--logdir",
            str(tmp_path),
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "checkpoint of CartPole-v1" in err and "obs_shape (4,) (this run: (6,))" in err
    assert "ModelSpec(" not in err and len(err) < 400, err


def test_another_apps_checkpoint_says_what_it_is(tmp_path, capsys):
    path = tmp_path / "mnist.pt"
    torch.save({"format": "hogwild-mnist", "model": {}, "epoch": 1}, path)
    assert evaluate_main([str(path)]) == 2
    err = capsys.readouterr().err
    assert "a hogwild-mnist checkpoint, not one this command reads" in err
    assert train_main(["--resume", str(path), "--logdir", str(tmp_path)]) == 2
    assert "a hogwild-mnist checkpoint" in capsys.readouterr().err


def test_a_damaged_history_in_a_checkpoint_is_one_line(tmp_path, capsys):
    r = train(A3CConfig(workers=1, total_steps=400, eval_interval=0.0, logdir=str(tmp_path)))
    ckpt = torch.load(r.run_dir / "checkpoint.pt", weights_only=True)
    ckpt["history"] = {"best_100": 3}  # not a (mean, seconds, steps) triple
    ckpt["rng"] = {"torch": torch.zeros(3, dtype=torch.uint8)}
    bad = tmp_path / "bad" / "checkpoint.pt"
    bad.parent.mkdir()
    torch.save(ckpt, bad)
    capsys.readouterr()
    assert train_main(["--resume", str(bad), "--logdir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "bad run history or random state" in err and len(err.splitlines()) == 1, err


# -------------------------------------------- settings that cannot apply (issue 69, item 8)

CENTRED_CARTPOLE = """
["CartPole-v1"]
center_frames = true
learner_threads = 4
"""


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (
            ["--center-frames"],
            "--center-frames is for image observations; CartPole-v1's are vectors",
        ),
        (["--algo", "appo", "--max-policy-lag", "3"], "--max-policy-lag is for --algo ppo's"),
        (["--algo", "appo", "--learner-threads", "3"], "--learner-threads is for --algo ppo's"),
        (["--algo", "a3c", "--learner-device", "cpu"], "--algo a3c has none"),
    ],
)
def test_a_flag_the_run_would_ignore_is_one_line(tmp_path, capsys, argv, words):
    base = ["--env", "CartPole-v1", "--workers", "2", "--total-steps", "100"]
    assert train_main([*base, *argv, "--logdir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1, err
    assert not any(tmp_path.iterdir()), "nothing started"


def test_only_what_the_user_set_is_refused_not_the_presets_own(tmp_path, monkeypatch):
    """A preset's centred frames or learner threads stand aside where they cannot apply
    (Atari's on a RAM id); a config file's are the user's, and a default's value is no
    request at all (config.json of an APPO run says learner_threads = 1)."""
    from a3c.run import presets

    real = presets.load_presets
    monkeypatch.setattr(presets, "load_presets", lambda text=None: real(CENTRED_CARTPOLE))
    cfg = config_for("CartPole-v1", algo="appo", workers=2)
    assert cfg.center_frames and cfg.learner_threads == 4  # set, and ignored by this run
    path = tmp_path / "mine.toml"
    path.write_text("center_frames = true\n")
    with pytest.raises(UsageError, match="--center-frames is for image observations"):
        config_for("CartPole-v1", config_file=path)
    path.write_text("learner_threads = 1\nmax_policy_lag = 1000\ncenter_frames = false\n")
    assert config_for("CartPole-v1", preset=None, config_file=path, algo="appo", workers=2)
    with pytest.raises(UsageError, match="--learner-threads"):
        config_for("CartPole-v1", preset=None, algo="appo", workers=2, learner_threads=2)
    assert config_for("CartPole-v1", algo="ppo", workers=2, max_policy_lag=3).max_policy_lag == 3
