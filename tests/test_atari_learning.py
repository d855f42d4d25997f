"""Real runs on pixels: a short 2-worker run on ALE/Pong-v5 with the conv net (runs,
writes TensorBoard and a checkpoint that a3c.evaluate plays), and MinAtar Breakout
learned well above its random score (0.4 per episode, measured over 100 episodes).
The [atari] family's learning test is in test_family_learning."""

from __future__ import annotations

import pytest

from a3c.evaluate import main as evaluate_main
from a3c.run.presets import config_for
from a3c.run.trainer import train
from a3c.use.saved import load_policy
from hogwild.checkpoint import load_checkpoint

pytest.importorskip("ale_py", reason="the Atari tests need the atari extra (ale-py)")


def test_pong_runs_on_pixels_and_its_checkpoint_plays(tmp_path, capsys):
    cfg = config_for(
        "ALE/Pong-v5", workers=2, total_steps=3_000, eval_interval=0.0, logdir=str(tmp_path)
    )
    assert cfg.preset == "atari" and cfg.conv == "a3c"
    r = train(cfg)
    assert r.exit_code == 0 and r.env_steps >= 3_000
    assert list(r.run_dir.glob("events.out.tfevents.*"))
    ckpt = load_checkpoint(r.run_dir / "checkpoint.pt")
    assert ckpt["model_spec"]["obs_shape"] == [4, 84, 84]
    assert ckpt["model_spec"]["obs_dtype"] == "uint8"
    model, env_id, _ = load_policy(r.run_dir / "checkpoint.pt")
    assert env_id == "ALE/Pong-v5" and type(model.encoder).__name__ == "A3CConv"
    assert evaluate_main([str(r.run_dir / "checkpoint.pt"), "--episodes", "1"]) == 0
    out = capsys.readouterr().out
    score = float(out.split("greedy return")[1].split()[0])
    assert -21 <= score <= 21, out  # a whole game, real score (not one life, not clipped)


@pytest.mark.slow
def test_minatar_breakout_is_learned(tmp_path):
    pytest.importorskip("minatar", reason="needs the minatar extra")
    r = train(
        config_for(
            "MinAtar/Breakout-v1",
            workers=2,
            total_steps=400_000,
            target_return=3.0,
            eval_interval=0.0,
            logdir=str(tmp_path),
        )
    )
    assert r.exit_code == 0
    assert r.solved_at is not None, f"best 100-episode mean {r.best_mean_100} (random 0.4)"


def test_env_kwargs_reach_workers_checkpoint_and_evaluate(tmp_path, capsys):
    """42x42 frames without sticky actions: the workers, the checkpoint and a3c.evaluate
    all build the env the run was given."""
    env_kwargs = {"screen_size": 42, "repeat_action_probability": 0.0}
    cfg = config_for(
        "ALE/Pong-v5",
        workers=2,
        total_steps=1_000,
        env_kwargs=env_kwargs,
        eval_interval=0.0,
        logdir=str(tmp_path),
    )
    r = train(cfg)
    assert r.exit_code == 0
    ckpt = load_checkpoint(r.run_dir / "checkpoint.pt")
    assert ckpt["model_spec"]["obs_shape"] == [4, 42, 42]
    assert ckpt["env_kwargs"] == env_kwargs
    assert evaluate_main([str(r.run_dir / "checkpoint.pt"), "--episodes", "1"]) == 0
    out = capsys.readouterr().out
    assert "ALE/Pong-v5: greedy return" in out, out
