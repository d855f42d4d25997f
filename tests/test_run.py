"""The engine's main loop with a tiny real app: workers (the app's Workers, the loop's
WorkerGroup) send counters through the BufferPool; the loop stops on the app's reason, a
time limit, a signal or a failed worker (restarted as the run's settings say),
checkpoints through the app's hook, and leaves no process behind."""

from __future__ import annotations

import os
import signal
import threading

import pytest
import torch
from engine_helpers import count_up
from proc_helpers import child_pids

from hogwild.config import EngineConfig
from hogwild.run import INTERRUPTED, RunLoop, Workers

LAYOUT = {k: ((), torch.int64) for k in ("rank", "seq")}

pytestmark = pytest.mark.usefixtures("hang_guard")


class Counters:
    """The app: counts messages; stops at ``stop_at`` of them; ``generations`` groups of
    workers that each send ``count`` messages (None: until stopped)."""

    def __init__(self, loop, stop_at=None, generations=1, count=None, die=False, restartable=True):
        self.loop, self.stop_at, self.generations = loop, stop_at, generations
        self.count, self.die, self.restartable = count, die, restartable
        self.seen, self.lasts, self.saved, self.end = 0, [], [], None

    def next_generation(self, last, telemetry):
        if last is not None:
            self.lasts.append(last)
        if len(self.lasts) >= self.generations or self.loop.stopping:
            return None
        args = (telemetry, self.count, self.die)
        return Workers(count_up, args, seed=0, restartable=self.restartable)

    def on_message(self, view):
        self.seen += 1

    def tick(self, ready, now):
        return "enough" if self.stop_at and self.seen >= self.stop_at else None

    def checkpoint_state(self):
        self.saved.append(self.seen)
        return {"seen": self.seen}

    def round_counters(self):
        return []

    def round_gather(self):
        return None

    def on_round(self, totals, gathered):
        pass

    def finish(self, end):
        self.end = end
        return {"seen": self.seen}


def run(tmp_path, on_worker_failure="abort", max_restarts=20, **app_kw):
    loop_kw = {k: app_kw.pop(k) for k in ("time_limit", "checkpoint_every") if k in app_kw}
    cfg = EngineConfig(
        workers=2,
        start_method="fork",
        on_worker_failure=on_worker_failure,
        max_restarts=max_restarts,
        logdir=str(tmp_path),
    )
    loop = RunLoop(cfg, "test-run", LAYOUT, params=torch.zeros(1), **loop_kw)
    loop.checkpoint_path = tmp_path / "checkpoint.pt"
    app = Counters(loop, **app_kw)
    exit_code = loop.run(app)
    assert not child_pids(), "a worker outlived the run"
    return exit_code, app


def saved(tmp_path) -> int:
    return torch.load(tmp_path / "checkpoint.pt", weights_only=True)["seen"]


def test_stops_on_the_apps_reason_and_checkpoints_periodically_and_at_the_end(tmp_path):
    exit_code, app = run(tmp_path, stop_at=300, checkpoint_every=0.05)
    assert exit_code == 0 and app.end.reason == "enough" and app.seen >= 300
    assert app.end.checkpoint == tmp_path / "checkpoint.pt"
    assert len(app.saved) >= 2, "periodic checkpoints, then the final one"
    assert saved(tmp_path) == app.seen, "the final checkpoint has every message read"


def test_stops_on_a_time_limit(tmp_path):
    exit_code, app = run(tmp_path, time_limit=0.5)
    assert exit_code == 0 and app.end.reason == "time limit reached"
    assert 0.5 <= app.end.seconds < 10


def test_runs_generation_after_generation_until_the_app_has_none(tmp_path):
    exit_code, app = run(tmp_path, generations=3, count=20)
    assert exit_code == 0 and app.end.reason is None
    assert [g.completed for g in app.lasts] == [True, True, True]
    assert app.seen == 3 * 2 * 20, "every message of every generation is read"
    assert saved(tmp_path) == app.seen


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_workers_saves_and_exits_128_plus_signal(tmp_path, signum):
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signum))
    timer.start()
    try:
        exit_code, app = run(tmp_path)
    finally:
        timer.cancel()
    assert exit_code == 128 + signum and app.end.reason == INTERRUPTED
    assert saved(tmp_path) == app.seen > 0


def test_a_failed_worker_is_one_line_exit_1_and_no_orphans(tmp_path, capfd):
    exit_code, app = run(tmp_path, die=True)
    assert exit_code == 1 and app.end.exit_code == 1
    err = capfd.readouterr().err.strip().splitlines()
    assert len([line for line in err if line.startswith("test-run: error: ")]) == 1
    assert "aborting" in err[-1]
    assert saved(tmp_path) == app.seen, "the final checkpoint is written after a failure too"


def test_the_runs_settings_restart_a_failed_worker_up_to_max_restarts(tmp_path, capfd):
    exit_code, app = run(tmp_path, die=True, on_worker_failure="restart", max_restarts=2)
    assert exit_code == 1
    assert capfd.readouterr().err.strip().splitlines()[-1].endswith("aborting after 2 restarts")
    # Rank 0 sends 5 messages per incarnation: the dead ones' were read before each restart.
    assert app.seen >= 3 * 5


def test_workers_that_cannot_be_restarted_abort_whatever_the_run_says(tmp_path, capfd):
    exit_code, app = run(tmp_path, die=True, on_worker_failure="restart", restartable=False)
    assert exit_code == 1
    assert capfd.readouterr().err.strip().splitlines()[-1].endswith("aborting")
