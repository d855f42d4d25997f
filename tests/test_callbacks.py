"""Callbacks in the Python API: real CartPole runs, real worker processes and TensorBoard."""

from __future__ import annotations

import time

import pytest
from proc_helpers import child_pids, pid_gone
from tb_helpers import scalar_points

from a3c.api import RunEvent, config_for, train
from a3c.run.callbacks import STOPPED
from hogwild.errors import UsageError


def cartpole(tmp_path, **settings):
    base = dict(
        workers=1,
        total_steps=200_000,
        eval_interval=0,
        log_interval=0.1,
        target_return=1e9,
        logdir=str(tmp_path / "runs"),
    )
    return config_for("CartPole-v1", **{**base, **settings})


def test_callbacks_see_log_eval_and_end_events_in_order(tmp_path):
    events: list[RunEvent] = []
    # The evaluator is a spawned process (seconds to start): run until its first score.
    cfg = cartpole(
        tmp_path,
        total_steps=10_000_000,
        time_limit=60,
        eval_interval=0.3,
        eval_episodes=1,
        eval_device="cpu",
    )
    result = train(cfg, callbacks=[events.append, lambda e: e.kind != "eval"])
    assert result.exit_code == 0
    kinds = [e.kind for e in events]
    assert kinds.count("end") == 1 and kinds[-1] == "end"
    logs = [e for e in events if e.kind == "log"]
    assert len(logs) >= 2
    steps = [e.env_steps for e in logs]
    assert steps == sorted(steps) and steps[-1] > steps[0]
    assert [e.seconds for e in logs] == sorted(e.seconds for e in logs)
    with_episodes = [e for e in logs if e.mean_return_100 is not None]
    assert with_episodes and with_episodes[-1].episodes > 0
    assert "losses/policy_loss" in with_episodes[-1].stats
    evals = [e for e in events if e.kind == "eval"]
    assert evals, kinds
    assert all(e.eval_mean_return is not None and e.eval_mean_return > 0 for e in evals)
    assert events[-1].env_steps == result.env_steps
    assert events[-1].best_eval == result.best_eval
    assert all(e.run_dir == result.run_dir for e in events)


def test_a_callback_that_returns_false_stops_the_run(tmp_path, capsys):
    def stop_early(event: RunEvent) -> bool | None:
        return False if event.env_steps >= 5_000 else None

    result = train(cartpole(tmp_path), callbacks=[stop_early])
    assert result.exit_code == 0
    assert 5_000 <= result.env_steps < 50_000  # the budget was 200k
    assert (result.run_dir / "checkpoint.pt").exists()
    assert STOPPED in capsys.readouterr().err


def test_a_custom_scalar_lands_in_tensorboard(tmp_path):
    def log_episodes(event: RunEvent) -> None:
        event.log("custom/episodes", event.episodes)

    result = train(cartpole(tmp_path, total_steps=10_000), callbacks=[log_episodes])
    episodes = scalar_points(result.run_dir)["custom/episodes"]
    assert len(episodes) >= 2
    step, value = episodes[-1]
    assert value > 0 and step <= result.env_steps


class Boom(RuntimeError):
    pass


def test_an_exception_in_a_callback_is_raised_after_a_clean_shutdown(tmp_path):
    raised: list[str] = []

    def explode(event: RunEvent) -> None:
        if event.env_steps > 2_000 or event.kind == "end":
            raised.append(event.kind)
            raise Boom(f"from the {event.kind} event")

    t0 = time.monotonic()
    with pytest.raises(Boom, match="from the log event") as caught:
        train(cartpole(tmp_path, workers=2, eval_interval=0.5), callbacks=[explode])
    assert time.monotonic() - t0 < 60
    assert raised[-1] == "end"  # the end event still came, and raised again
    assert caught.value.__context__ is None  # the first exception, not the end event's
    # The run was closed: the checkpoint and the hparams summary were written.
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert (run_dir / "checkpoint.pt").exists()
    assert "hparam/env_steps" in scalar_points(run_dir)
    # Workers and the evaluator (not multiprocessing's resource tracker, which lives as
    # long as this process) are gone.
    deadline = time.monotonic() + 10
    while child_pids() and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in child_pids() if not pid_gone(p)]
    assert not left, f"children left behind: {left}"


def test_a_callback_must_be_callable(tmp_path):
    with pytest.raises(UsageError, match="callable"):
        train(cartpole(tmp_path), callbacks=["not a function"])
