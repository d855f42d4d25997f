"""A run folder's TensorBoard scalars, read back as the tests check them."""

from __future__ import annotations

from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def scalar_points(run_dir: Path | str) -> dict[str, list[tuple[int, float]]]:
    """Every scalar tag of the run's events, each with all its ``(step, value)`` points."""
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})  # 0: every point
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def scalar_values(run_dir: Path | str) -> dict[str, list[float]]:
    """Every scalar tag's values, in the order they were written."""
    return {tag: [value for _, value in pts] for tag, pts in scalar_points(run_dir).items()}
