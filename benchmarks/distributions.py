"""The acting path's cost per action distribution: batch-8 forward + sample, one thread.

    python benchmarks/distributions.py

What a worker pays per env step to act (MLP 4 -> 128 -> 128 -> heads, as the default
policy), for each action space against the categorical. The issue's bar: every one
within 2x of the categorical. Rounds alternate the distributions (A B C D A B C D ...)
and each figure is the median over rounds.
"""

from __future__ import annotations

import os
import statistics
import time

import torch

from a3c.policy import ModelSpec

SPACES = {
    "categorical (Discrete 4)": {"type": "discrete", "n": 4},
    "multi-categorical (MultiDiscrete [3, 4])": {"type": "multi_discrete", "nvec": [3, 4]},
    "multi-categorical (MultiDiscrete [3, 3])": {"type": "multi_discrete", "nvec": [3, 3]},
    "Bernoulli (MultiBinary 4)": {"type": "multi_binary", "n": 4},
    "diagonal Gaussian (Box 4)": {"type": "box", "low": [-1.0] * 4, "high": [1.0] * 4},
    "squashed Gaussian (Box 4)": {"type": "box", "low": [-1.0] * 4, "high": [1.0] * 4},
}


def per_call_us(model, obs: torch.Tensor, calls: int) -> float:
    dist = model.dist
    with torch.no_grad():
        t0 = time.perf_counter()
        for _ in range(calls):
            dist.to_env(model.act(obs))
        return (time.perf_counter() - t0) / calls * 1e6


def main() -> None:
    torch.set_num_threads(1)
    print(
        f"# python benchmarks/distributions.py\n# nproc {os.cpu_count()}, torch {torch.__version__}"
    )
    models = {
        name: ModelSpec((4,), spec, squash=name.startswith("squashed")).build()
        for name, spec in SPACES.items()
    }
    obs = torch.randn(8, 4)
    times: dict[str, list[float]] = {name: [] for name in models}
    for model in models.values():
        per_call_us(model, obs, 500)  # warm-up
    for _ in range(7):
        for name, model in models.items():
            times[name].append(per_call_us(model, obs, 2000))
    base = statistics.median(times["categorical (Discrete 4)"])
    print("\n| distribution | batch-8 forward + sample + to_env | vs categorical |")
    print("|---|---|---|")
    for name, ts in times.items():
        t = statistics.median(ts)
        print(f"| {name} | {t:.1f} µs | {t / base:.2f}x |")


if __name__ == "__main__":
    main()
