"""How many starts lose their first conv layer: each seed trains for a number of agent
steps with the env's preset (its rate schedule over the preset's own budget, as a user's
run has it), then the first layer's share of dead units and the run's last figures.

    python benchmarks/dead_starts.py --env PongNoFrameskip-v4 --seeds 1-12 [--steps 300000]
        [--set amp=bf16 ...]

A start is dead when every unit of the first conv layer is (no input of a learning batch
made one positive: ``charts/dead_units`` is 1); it then never learns again.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from dataclasses import dataclass

from suite import parse_set  # benchmarks/suite.py: --set read as the suite reads it

from a3c.run.callbacks import RunEvent
from a3c.run.presets import config_for
from a3c.train import train

DEAD = "charts/dead_units"
DEAD_SHARE = 1.0


@dataclass
class Start:
    """One seed's run, as its log points saw it."""

    seed: int
    dead_max: float = 0.0  # the most dead units of any log window
    dead_last: float = 0.0
    first_dead_step: int | None = None  # when the layer was first seen all dead
    explained_last: float = math.nan
    mean_100: float = math.nan
    steps: int = 0

    def watch(self, steps_budget: int):
        def callback(event: RunEvent) -> bool:
            dead = event.stats.get(DEAD)
            if dead is not None:
                self.dead_last, self.dead_max = dead, max(self.dead_max, dead)
                if dead >= DEAD_SHARE and self.first_dead_step is None:
                    self.first_dead_step = event.env_steps
            self.explained_last = event.stats.get("losses/explained_variance", self.explained_last)
            if event.mean_return_100 is not None:
                self.mean_100 = event.mean_return_100
            self.steps = event.env_steps
            return event.env_steps < steps_budget

        return callback

    @property
    def dead(self) -> bool:
        return self.dead_last >= DEAD_SHARE


def seeds(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="PongNoFrameskip-v4")
    p.add_argument("--seeds", type=seeds, default=seeds("1-12"), help="e.g. 1-12")
    p.add_argument("--steps", type=int, default=300_000, help="agent steps per start")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config fields")
    args = p.parse_args(argv)
    try:
        overrides = parse_set(args.set)
    except ValueError as e:
        p.error(str(e))
    starts = []
    with tempfile.TemporaryDirectory() as logdir:
        for seed in args.seeds:
            cfg = config_for(
                args.env, workers=args.workers, seed=seed, eval_interval=0.0, logdir=logdir,
                log_interval=2.0, checkpoint_interval=1e9, **overrides,
            )  # fmt: skip
            start = Start(seed)
            train(cfg, callbacks=[start.watch(args.steps)])
            starts.append(start)
            print(
                f"seed {seed}: {'DEAD' if start.dead else 'alive'}; dead units last"
                f" {start.dead_last:.2f}, max {start.dead_max:.2f}"
                + (f" (all dead at {start.first_dead_step:,})" if start.first_dead_step else "")
                + f"; explained variance {start.explained_last:.2f}; mean(100)"
                f" {start.mean_100:.1f} at {start.steps:,} steps",
                flush=True,
            )
    dead = sum(s.dead for s in starts)
    print(f"{args.env}: {dead} dead of {len(starts)} starts ({args.steps:,} agent steps each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
