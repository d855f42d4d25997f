"""Your own env and wrappers (issue 22): ``--wrapper module:callable`` applied in the
workers, the spawned evaluator, ``a3c.evaluate`` and on ``--resume``, recorded in
``config.json``; an env factory in the Python API and as ``--env module:factory``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch
import user_envs
import warm_python

from a3c.api import config_for, evaluate, train
from a3c.envs import make_env
from a3c.evaluate import main as evaluate_main
from a3c.train import main as train_main
from hogwild.checkpoint import load_checkpoint
from hogwild.errors import UsageError

TESTS = Path(__file__).parent


def only_run(logdir: Path) -> Path:
    (run,) = [p for p in logdir.iterdir() if p.is_dir()]
    return run


def test_wrappers_are_applied_in_order_before_the_adapter():
    env = make_env("CartPole-v1", wrappers=["user_envs:TagA", "user_envs:TagB"])
    inner = env
    while not hasattr(inner, "tags"):
        inner = inner.env
    assert inner.tags == ["a", "b"]
    env.close()
    env = make_env("CartPole-v1", wrappers=["user_envs:Positions"])
    assert env.observation_space.shape == (2,)
    env.close()


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("nowhere_module:wrap", "cannot import module 'nowhere_module' of wrapper"),
        ("user_envs:missing", "module 'user_envs' has no 'missing'"),
        ("user_envs:NOT_CALLABLE", "is a int, not a callable"),
        ("user_envs", "must be written module:callable"),
        ("user_envs:not_an_env", "returned a str, not a gymnasium.Env"),
        # Needs an argument: the TypeError raised while the env is built (issue 54).
        (
            "gymnasium.wrappers:TimeLimit",
            "wrapper 'gymnasium.wrappers:TimeLimit' failed on CartPole-v1 as made "
            "(observation space Box(",
        ),
    ],
)
def test_a_bad_wrapper_is_one_line_and_exit_2(ref, message, tmp_path, capsys):
    code = train_main(["--wrapper", ref, "--workers", "1", "--logdir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not any(tmp_path.iterdir())


def test_a_failing_wrapper_names_what_it_was_put_on():
    """Whatever the wrapper raises (here a TypeError) is one line that says what lay beneath
    it: the family's preprocessing and the wrappers before it."""
    limit = "gymnasium.wrappers:TimeLimit"
    with pytest.raises(UsageError) as caught:
        make_env("CartPole-v1", wrappers=["user_envs:Positions", limit])
    assert "on CartPole-v1 after wrapper 'user_envs:Positions' (observation space Box(" in str(
        caught.value
    ), caught.value
    assert "TypeError" in str(caught.value) and "\n" not in str(caught.value)
    pytest.importorskip("minatar", reason="MinAtar needs the [minatar] extra")
    with pytest.raises(UsageError, match="on MinAtar/Breakout-v1 after the MinAtar preprocessing"):
        make_env("MinAtar/Breakout-v1", wrappers=[limit])


def test_a_wrapped_run_trains_evaluates_resumes_and_is_scored_wrapped(tmp_path, capsys):
    """Positions leaves 2 of CartPole's 4 numbers: a process that forgot the wrapper
    would feed the 2-input model 4 numbers and fail. The first run as a user would (a
    subprocess whose spawned evaluator imports the wrapper by name); resume and evaluate
    in process, which read the wrapper from the checkpoint alone all the same."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    base = [
        sys.executable, "-m", "a3c.train", "--wrapper", "user_envs:Positions",
        "--workers", "2", "--envs-per-worker", "2", "--eval-interval", "0.5",
        "--eval-episodes", "2", "--eval-device", "cpu", "--logdir", str(tmp_path),
    ]  # fmt: skip
    # Stop at the first evaluation (any CartPole return is >= 0), whatever the machine's
    # speed: the spawned evaluator must have played the wrapped env.
    first = warm_python.run(
        [*base, "--target-metric", "eval", "--target-return", "0", "--time-limit", "60"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    run = only_run(tmp_path)
    config = json.loads((run / "config.json").read_text())
    assert config["wrappers"] == ["user_envs:Positions"]
    ckpt = load_checkpoint(run / "checkpoint.pt")
    assert ckpt["model_spec"]["obs_shape"] == [2]
    assert (run / "best.pt").exists(), "the spawned evaluator never scored the wrapped env"

    more = ckpt["env_steps"] + 2000
    argv = ["--resume", str(run / "checkpoint.pt"), "--target-metric", "none"]
    assert train_main([*argv, "--total-steps", str(more)]) == 0
    assert load_checkpoint(run / "checkpoint.pt")["env_steps"] >= more
    assert evaluate_main([str(run / "checkpoint.pt"), "--episodes", "2"]) == 0
    assert "greedy return" in capsys.readouterr().out


def test_the_python_api_takes_an_env_factory_and_wrapper_callables(tmp_path):
    cfg = config_for(
        user_envs.short_cartpole,
        wrappers=[user_envs.Positions],
        workers=1,
        total_steps=2000,
        eval_interval=0.0,
        logdir=str(tmp_path),
    )
    assert cfg.env == "user_envs:short_cartpole"
    assert cfg.wrappers == ("user_envs:Positions",)
    result = train(cfg)
    assert result.exit_code == 0 and result.env_steps >= 2000
    returns = evaluate(result.run_dir / "checkpoint.pt", episodes=3)
    assert (returns <= 50).all()  # the factory's own 50-step limit, played as trained


def test_a_factory_takes_keywords_and_a_step_limit():
    env = make_env("user_envs:short_cartpole", length=500, max_episode_steps=7)
    env.reset(seed=0)
    steps, done = 0, False
    while not done:
        _, _, terminated, truncated, _ = env.step(0 if steps % 2 else 1)
        steps, done = steps + 1, terminated or truncated
    assert steps <= 7
    env.close()
    with pytest.raises(UsageError, match="bad arguments for env factory"):
        make_env("user_envs:short_cartpole", nonsense=1)


def test_a_lambda_is_refused_because_no_process_could_import_it():
    with pytest.raises(UsageError, match="module-level function or class"):
        config_for(lambda: None)
    with pytest.raises(UsageError, match="module-level function or class"):
        config_for("CartPole-v1", wrappers=[lambda env: env])


def test_a_wrapper_or_factory_of_the_script_being_run_is_refused_before_training(tmp_path):
    """Workers re-import the script, but a3c.evaluate, Policy.load and --resume later run
    from another program, where ``__main__`` has no such name: refused in one line."""
    script = tmp_path / "train_clip.py"
    script.write_text(
        "import gymnasium as gym\n"
        "from a3c.api import config_for\n"
        "class Clip(gym.RewardWrapper):\n"
        "    def reward(self, r):\n"
        "        return max(-1.0, min(1.0, r))\n"
        "def make():\n"
        "    return gym.make('CartPole-v1')\n"
        "if __name__ == '__main__':\n"
        "    import sys\n"
        "    for kw in ({'env': 'CartPole-v1', 'wrappers': [Clip]}, {'env': make},\n"
        "               {'env': 'CartPole-v1', 'wrappers': ['__main__:Clip']}):\n"
        "        try:\n"
        "            config_for(**kw)\n"
        "        except Exception as e:\n"
        "            print(type(e).__name__, e)\n"
    )
    out = warm_python.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=True
    ).stdout.splitlines()
    assert len(out) == 3, out
    for line, name in zip(out, ("Clip", "make", "Clip"), strict=True):
        assert line.startswith("UsageError") and f"'{name}'" in line, line
        assert "move it into a module" in line, line


def test_a_checkpoint_keeps_its_wrappers(tmp_path):
    result = train(
        config_for(
            "CartPole-v1",
            wrappers=["user_envs:Positions"],
            workers=1,
            total_steps=500,
            eval_interval=0.0,
            logdir=str(tmp_path),
        )
    )
    ckpt = torch.load(result.run_dir / "checkpoint.pt", weights_only=True)
    assert ckpt["env_kwargs"]["wrappers"] == ["user_envs:Positions"]
