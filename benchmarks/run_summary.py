"""Each run folder under a logdir in a few lines: steps/s, updates per env step, the policy
lag, the value fit and the 100-episode mean return over time (what a scaling run is read by).

    python benchmarks/run_summary.py LOGDIR
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

FIGURES = (
    "charts/policy_lag",
    "charts/policy_lag_max",
    "charts/stale_rollouts",
    "losses/explained_variance",
    "losses/clip_fraction",
    "losses/approx_kl",
    "losses/entropy",
)
MARKS = 12  # points of the return curve shown
PARTS = 5  # updates per env step: one figure per fifth of the run


def summary(run: Path) -> list[str]:
    acc = EventAccumulator(str(run), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])

    def points(tag: str) -> list:
        return list(acc.Scalars(tag)) if tag in tags else []

    lines = [f"== {run.name}"]
    rate = points("perf/env_steps_per_sec")
    if rate:
        late = [p.value for p in rate[len(rate) // 2 :]]
        lines.append(
            f"steps/s, median of the second half's {len(late)} windows: "
            f"{statistics.median(late):,.0f}; last step {rate[-1].step:,}"
        )
    updates = {p.step: p.value for p in points("perf/updates_per_sec")}
    if both := [(updates[p.step], p.value) for p in rate if p.step in updates]:
        parts = [both[i * len(both) // PARTS : (i + 1) * len(both) // PARTS] for i in range(PARTS)]
        ratios = [sum(u for u, _ in p) / (sum(e for _, e in p) or 1) for p in parts if p]
        lines.append(
            "updates per env step, by fifths of the run (a KL cap stopping epochs lowers it): "
            + ", ".join(f"{r:.3g}" for r in ratios)
        )
    for tag in FIGURES:
        if values := [p.value for p in points(tag)]:
            lines.append(
                f"{tag}: first {values[0]:.3g}, last {values[-1]:.3g}, max {max(values):.3g}"
            )
    if means := points("charts/mean_return_100"):
        t0 = (rate or means)[0].wall_time
        shown = [*means[:: max(1, len(means) // MARKS)], means[-1]]
        lines.append(
            "mean return(100): "
            + "; ".join(
                f"{p.wall_time - t0:.0f} s {p.step / 1e3:.0f}k {p.value:.1f}" for p in shown
            )
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logdir", type=Path)
    args = parser.parse_args()
    runs = sorted(p for p in args.logdir.glob("*") if p.is_dir())
    if not runs:
        print(f"{parser.prog}: error: no run folder in {args.logdir}", file=sys.stderr)
        sys.exit(2)
    for run in runs:
        print("\n".join(summary(run)))


if __name__ == "__main__":
    main()
