"""Learning curves from run folders: ``python -m a3c.plot runs/<a> runs/<b> -o curves.png``.

TensorBoard is the place to explore a run; this draws the one figure worth keeping: the
100-episode mean return (``charts/mean_return_100``) against env steps and against wall
time, with the env's target return as a dashed line, one line per run (legend: the run
folder's name); wall time is training time: the pauses before a run's resumes are left
out. Given a folder of runs (``runs/``), it draws one figure per env, so runs of different
envs never share axes: ``-o curves.png`` becomes ``curves_<env>.png``.
Needs matplotlib: ``pip install -e ".[plot]"``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hogwild.cli import positive_int, run_cli
from hogwild.errors import UsageError

TAG = "charts/mean_return_100"


@dataclass
class Curve:
    """One run's points, ready to draw."""

    name: str
    env: str
    target: float | None
    steps: np.ndarray
    seconds: np.ndarray
    values: np.ndarray


def is_run(path: Path) -> bool:
    """A run folder is one that holds a TensorBoard event file (a3c.train writes one)."""
    return path.is_dir() and any(path.glob("events.out.tfevents.*"))


def find_runs(paths: list[str]) -> tuple[list[Path], bool]:
    """The run folders named or contained in ``paths``, and whether any was a folder of runs."""
    runs: list[Path] = []
    any_parent = False
    for text in paths:
        path = Path(text)
        if is_run(path):
            runs.append(path)
            continue
        if not path.is_dir():
            raise UsageError(f"{text}: no such folder")
        try:
            children = sorted(p for p in path.iterdir() if is_run(p))
        except OSError as e:
            raise UsageError(f"{text}: cannot list the folder ({e.strerror or e})") from None
        if not children:
            raise UsageError(f"{text}: not a run folder and holds no run folders")
        runs.extend(children)
        any_parent = True
    return runs, any_parent


def sessions(run: Path) -> tuple[np.ndarray, np.ndarray]:
    """Each session's first wall time, in order, and the training seconds before it.

    Every session of a run (the first, each ``--resume``) opens its own events file, from
    its start to its close, so the files' spans are the run's training time, for any run
    ever written: no pause is guessed from a gap between points, which a slow log point
    would look like too. Only each file's first and last record are parsed."""
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto.event_pb2 import Event

    spans: list[tuple[float, float]] = []
    for path in run.glob("events.out.tfevents.*"):
        first = last = None
        for record in RawEventFileLoader(str(path)).Load():
            first = record if first is None else first
            last = record
        if first is not None and last is not None:
            spans.append((Event.FromString(first).wall_time, Event.FromString(last).wall_time))
    spans.sort()
    starts = np.array([start for start, _ in spans])
    lengths = np.array([end - start for start, end in spans])
    return starts, np.cumsum(lengths) - lengths


def read_curve(run: Path) -> Curve | None:
    """The run's mean-return points (``None`` when it has none) with its env and target."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    env, target = "unknown env", None
    config = run / "config.json"
    if config.is_file():
        try:
            cfg: dict[str, Any] = json.loads(config.read_text())
        except (OSError, ValueError) as e:
            raise UsageError(f"{config}: not readable JSON ({e})") from None
        env = str(cfg.get("env", env))
        target = cfg.get("target_return")
    # Its INFO lines ("No path found after ...") are about its file polling, not the run.
    logging.getLogger("tensorboard").setLevel(logging.WARNING)
    acc = EventAccumulator(str(run), size_guidance={"scalars": 0})
    acc.Reload()
    if TAG not in acc.Tags().get("scalars", []):
        return None
    events = acc.Scalars(TAG)
    if not events:
        return None
    wall = np.array([e.wall_time for e in events])
    starts, before = sessions(run)
    session = np.maximum(np.searchsorted(starts, wall, side="right") - 1, 0)
    return Curve(
        name=Path(os.path.abspath(run)).name,  # a symlink's own name labels its curve
        env=env,
        target=float(target) if isinstance(target, (int, float)) else None,
        steps=np.array([e.step for e in events], dtype=np.int64),
        seconds=wall - starts[session] + before[session],
        values=np.array([e.value for e in events]),
    )


def smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average; the first points average what there is, so no point is lost."""
    if window <= 1:
        return values
    sums = np.cumsum(np.insert(values, 0, 0.0))
    ends = np.arange(1, len(values) + 1)
    starts = np.maximum(ends - window, 0)
    return (sums[ends] - sums[starts]) / (ends - starts)


def draw(curves: list[Curve], axes: list[str], window: int, out: Path) -> None:
    """One figure, a panel per x axis, written to ``out``."""
    import matplotlib.pyplot as plt

    fig, panels = plt.subplots(1, len(axes), figsize=(6.5 * len(axes), 4.5), squeeze=False)
    envs = sorted({c.env for c in curves})
    for ax, x in zip(panels[0], axes, strict=True):
        for c in curves:
            ax.plot(c.steps if x == "steps" else c.seconds, smooth(c.values, window), label=c.name)
        targets = {(c.env, c.target) for c in curves if c.target is not None}
        for env, target in sorted(targets):
            label = f"target {target:g}" + (f" ({env})" if len(envs) > 1 else "")
            ax.axhline(target, color="gray", linestyle="--", linewidth=1, label=label)
        ax.set_xlabel("env steps" if x == "steps" else "wall time (s)")
        ax.set_ylabel("mean return, last 100 episodes")
        ax.grid(alpha=0.3)
    panels[0][0].legend(fontsize="small")
    title = ", ".join(envs) + (f" (moving average of {window})" if window > 1 else "")
    fig.suptitle(title)
    fig.tight_layout()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=100)
    except OSError as e:
        raise UsageError(f"cannot write {out}: {e.strerror or e}") from None
    finally:
        plt.close(fig)
    print(f"wrote {out} ({len(curves)} run{'s' * (len(curves) > 1)})")


def _import_pyplot() -> None:
    try:
        import matplotlib
    except ImportError:
        raise UsageError(
            'a3c.plot needs matplotlib: pip install -e ".[plot]" '
            '(or pip install "hogwild-a3c[plot]")'
        ) from None
    matplotlib.use("Agg")  # files only: no display needed


def _main(args: argparse.Namespace) -> int:
    _import_pyplot()
    from matplotlib.figure import Figure

    out = Path(args.output)
    kinds = Figure().canvas.get_supported_filetypes()
    if out.suffix.lstrip(".").lower() not in kinds:
        raise UsageError(f"-o {out}: unknown image type; use one of .{', .'.join(sorted(kinds))}")
    runs, per_env = find_runs(args.runs)
    curves: list[Curve] = []
    for run in runs:
        curve = read_curve(run)
        if curve is not None:
            curves.append(curve)
        elif per_env:  # a folder of runs may hold unfinished or non-A3C runs: pass over them
            print(f"skipped {run}: no {TAG} points")
        else:
            raise UsageError(f"{run}: no {TAG} points (did the run finish an episode?)")
    if not curves:
        raise UsageError(f"no run in {' '.join(args.runs)} has {TAG} points")
    axes = ["steps", "time"] if args.x == "both" else [args.x]
    if not per_env:
        draw(curves, axes, args.smooth, out)
        return 0
    for env in sorted({c.env for c in curves}):
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", env).strip("-")
        group = [c for c in curves if c.env == env]
        draw(group, axes, args.smooth, out.with_name(f"{out.stem}_{slug}{out.suffix}"))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="a3c.plot",
        description="Plot the 100-episode mean return of A3C runs against env steps and time.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("runs", nargs="+", help="run folders, or folders of runs (one figure per env)")
    p.add_argument("-o", "--output", default="curves.png", help="the image to write")
    p.add_argument("--x", choices=("steps", "time", "both"), default="both", help="x axis")
    p.add_argument("--smooth", type=positive_int, default=1, help="moving-average window")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_cli(build_parser(), _main, argv)


if __name__ == "__main__":
    sys.exit(main())
