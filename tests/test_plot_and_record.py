"""a3c.plot and a3c.evaluate --record on real runs: real training, real PNGs, real MP4s.

Refusals run the CLI in a child process, so the one-line, exit-2 promise is checked on
what a user's terminal would show (warnings included), not on captured Python objects.
"""

from __future__ import annotations

import contextlib
import io
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple
from unittest import mock

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from a3c.evaluate import main as evaluate_main
from a3c.plot import main as plot_main
from a3c.plot import read_curve
from a3c.train import main as train_main

VIDEO_SKIP = 'the [video] extra is not installed: pip install -e ".[video]"'
PLOT_SKIP = 'the [plot] extra is not installed: pip install -e ".[plot]"'


class NoRenderEnv(gym.Env):
    """CartPole's spaces and no render modes at all: nothing to record."""

    metadata = {"render_modes": []}
    observation_space = spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        return np.zeros(4, np.float32), {}

    def step(self, action):
        return np.zeros(4, np.float32), 1.0, True, False, {}


if "NoRender-v0" not in gym.registry:
    gym.register("NoRender-v0", entry_point=NoRenderEnv)
NO_RENDER_ID = f"{__name__}:NoRender-v0"  # make_env imports this module, which registers it


def train(logdir: Path, env: str, seed: int, steps: int, *extra: str) -> Path:
    """A short real A3C run (1 worker, no evaluator); its run folder."""
    before = set(logdir.iterdir())
    argv = ["--env", env, "--workers", "1", "--total-steps", str(steps), "--eval-interval", "0"]
    argv += ["--log-interval", "0.1", "--seed", str(seed), "--logdir", str(logdir), *extra]
    assert train_main(argv) == 0
    (run,) = set(logdir.iterdir()) - before
    return run


@pytest.fixture(scope="module")
def with_video() -> None:
    """Skips a test (before any training) where the [video] extra is missing."""
    pytest.importorskip("moviepy", reason=VIDEO_SKIP)


@pytest.fixture(scope="module")
def with_plot() -> None:
    """Skips a test (before any training) where the [plot] extra is missing."""
    pytest.importorskip("matplotlib", reason=PLOT_SKIP)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Two CartPole-v1 runs and one Acrobot-v1 run, all in one logdir."""
    logdir = tmp_path_factory.mktemp("runs")
    return {
        "cartpole1": train(logdir, "CartPole-v1", 1, 10_000),
        "cartpole2": train(logdir, "CartPole-v1", 2, 10_000),
        # Random Acrobot episodes last 500 steps: few envs, so some end within the budget.
        "acrobot": train(logdir, "Acrobot-v1", 1, 6000, "--envs-per-worker", "2"),
        "logdir": logdir,
    }


def cli(main: Callable[[list[str]], int], *args: str, missing: str | None = None) -> Refusal:
    """A command's exit code and stderr, run in this process (with the package ``missing``
    made unimportable, as where its extra is not installed)."""
    err = io.StringIO()
    gone = {missing: None} if missing else {}
    with contextlib.redirect_stderr(err), mock.patch.dict(sys.modules, gone):
        code = main(list(args))
    return Refusal(code, err.getvalue())


class Refusal(NamedTuple):
    returncode: int
    stderr: str


def assert_one_line_exit_2(proc: Refusal, message: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], proc.stderr


def colour_pixels(png: Path, rgb: tuple[int, int, int]) -> int:
    """How many pixels of ``png`` are (nearly) the colour ``rgb``."""
    import matplotlib.image

    image = matplotlib.image.imread(png)[..., :3] * 255
    return int((np.abs(image - np.array(rgb)).max(axis=-1) < 8).sum())


BLUE, ORANGE = (31, 119, 180), (255, 127, 14)  # matplotlib's first two line colours


def test_plot_several_runs(with_plot, runs, tmp_path, capsys):
    import matplotlib.image

    out = tmp_path / "curves.png"
    assert plot_main([str(runs["cartpole1"]), str(runs["cartpole2"]), "-o", str(out)]) == 0
    assert f"wrote {out} (2 runs)" in capsys.readouterr().out
    size = out.stat().st_size
    print(f"two panels: {size} bytes")
    assert size > 10_000
    height, width, _ = matplotlib.image.imread(out).shape
    assert width > 2 * height, "steps and time side by side"
    assert colour_pixels(out, BLUE) > 200 and colour_pixels(out, ORANGE) > 200, "both runs drawn"

    one = tmp_path / "time.png"
    assert plot_main([str(runs["cartpole1"]), "--x", "time", "--smooth", "5", "-o", str(one)]) == 0
    height, width, _ = matplotlib.image.imread(one).shape
    assert width < 2 * height, "one panel"
    assert colour_pixels(one, BLUE) > 100 and colour_pixels(one, ORANGE) == 0


#: How long before its resume a run's first session is made to have run: a night.
PAUSE_S = 10 * 3600.0


def shift_wall_times(events: Path, seconds: float) -> None:
    """Rewrite an events file as if it had been written ``seconds`` later."""
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.summary.writer.record_writer import RecordWriter

    shifted = [Event.FromString(record) for record in RawEventFileLoader(str(events)).Load()]
    with events.open("wb") as f:
        writer = RecordWriter(f)
        for event in shifted:
            event.wall_time += seconds
            writer.write(event.SerializeToString())


def test_plot_time_axis_leaves_out_the_pause_before_a_resume(tmp_path):
    """A run resumed a night later (its first session's events moved back by PAUSE_S, as
    the pause leaves them): its time axis ends within the time its two sessions took."""
    started = time.monotonic()
    run = train(tmp_path, "CartPole-v1", 1, 5000)
    first_s = time.monotonic() - started
    (first,) = run.glob("events.out.tfevents.*")
    shift_wall_times(first, -PAUSE_S)
    before = read_curve(run)
    started = time.monotonic()
    resume = ["--resume", str(run / "checkpoint.pt"), "--total-steps", "10000", "--workers", "1"]
    assert train_main([*resume, "--eval-interval", "0", "--log-interval", "0.1"]) == 0
    resumed_s = time.monotonic() - started
    after = read_curve(run)
    n = len(before.steps)
    assert len(after.steps) > n and after.steps[n] > before.steps[-1], "the resumed points"
    np.testing.assert_allclose(after.seconds[:n], before.seconds)
    assert np.all(np.diff(after.seconds) >= 0), "the resumed points go on from the first's"
    assert after.seconds[-1] <= first_s + resumed_s, "the pause is not counted"


def test_plot_folder_gives_one_figure_per_env(with_plot, runs, tmp_path, capsys):
    out = tmp_path / "figs" / "curves.png"
    assert plot_main([str(runs["logdir"]), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert sorted(p.name for p in out.parent.iterdir()) == [
        "curves_Acrobot-v1.png",
        "curves_CartPole-v1.png",
    ], printed
    for png in out.parent.iterdir():
        print(f"{png.name}: {png.stat().st_size} bytes")
        assert png.stat().st_size > 10_000
    assert f"wrote {out.parent / 'curves_CartPole-v1.png'} (2 runs)" in printed
    assert f"wrote {out.parent / 'curves_Acrobot-v1.png'} (1 run)" in printed


def test_plot_refusals(with_plot, runs, tmp_path):
    empty = tmp_path / "empty"
    (empty / "not_a_run").mkdir(parents=True)
    proc = cli(plot_main, str(empty), "-o", str(tmp_path / "x.png"))
    assert_one_line_exit_2(proc, "not a run folder and holds no run folders")

    # A real event file with other scalars only: a run that never finished an episode.
    from torch.utils.tensorboard import SummaryWriter

    pointless = tmp_path / "pointless"
    with SummaryWriter(str(pointless)) as writer:
        writer.add_scalar("losses/entropy", 0.5, 1)
    proc = cli(plot_main, str(pointless), "-o", str(tmp_path / "x.png"))
    assert_one_line_exit_2(proc, "no charts/mean_return_100 points")

    out = str(tmp_path / "x.png")
    proc = cli(plot_main, str(runs["cartpole1"]), "-o", out, missing="matplotlib")
    assert_one_line_exit_2(proc, 'pip install -e ".[plot]"')
    assert not (tmp_path / "x.png").exists()


def test_record_writes_a_playable_video(with_video, runs, tmp_path, capfd):
    try:
        from moviepy import VideoFileClip  # moviepy 2
    except ImportError:
        from moviepy.editor import VideoFileClip  # moviepy 1

    videos = tmp_path / "videos"
    ckpt = str(runs["cartpole1"] / "checkpoint.pt")
    assert evaluate_main([ckpt, "--episodes", "1", "--record", str(videos)]) == 0
    out, err = capfd.readouterr()  # file descriptors: SDL and ffmpeg write there directly
    assert not err.strip(), err
    assert f"videos in {videos}: rl-video-episode-0.mp4" in out
    episode_length = int(float(out.split("greedy return ")[1].split()[0]))  # CartPole: 1 a step
    (mp4,) = videos.glob("*.mp4")
    clip = VideoFileClip(str(mp4))
    try:
        frames = list(clip.iter_frames())
        print(f"{mp4.name}: {mp4.stat().st_size} bytes, {len(frames)} frames, {clip.duration} s")
        assert clip.duration > 0
        # RecordVideo keeps the frame at reset and one per step.
        assert abs(len(frames) - (episode_length + 1)) <= 1, (len(frames), episode_length)
        assert frames[0].shape == (400, 600, 3)  # CartPole's screen
        assert not np.array_equal(frames[0], frames[-1]), "the cart and pole move"
    finally:
        clip.close()


def test_record_refusals_leave_nothing_behind(with_video, runs, tmp_path):
    ckpt = str(runs["cartpole1"] / "checkpoint.pt")
    blocker = tmp_path / "a_file"
    blocker.write_text("in the way")

    proc = cli(evaluate_main, ckpt, "--episodes", "1", "--record", str(blocker / "videos"))
    assert_one_line_exit_2(proc, "cannot create the folder")
    proc = cli(evaluate_main, ckpt, "--episodes", "1", "--record", str(blocker))
    assert_one_line_exit_2(proc, "a file is in the way")
    assert blocker.read_text() == "in the way"

    videos = tmp_path / "videos"
    args = ("--episodes", "1", "--env", NO_RENDER_ID, "--record", str(videos))
    proc = cli(evaluate_main, ckpt, *args)
    assert_one_line_exit_2(proc, "cannot render rgb_array frames")

    proc = cli(evaluate_main, ckpt, "--record", str(videos), missing="moviepy")
    assert_one_line_exit_2(proc, 'pip install -e ".[video]"')
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"], "nothing half-written"
