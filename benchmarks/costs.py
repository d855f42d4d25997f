"""What one step costs on one core: the env, acting, and learning from a sample.

    python benchmarks/costs.py [--rounds 5]

On 2 cores these set the pace: an A3C worker acts on a batch of observations each step
and learns from its rollout once (APPO: ``epochs`` times). Prints, per conv encoder and the
default MLP, a batch-1 and batch-8 forward under ``no_grad`` and a forward + backward
of batch 40 (a rollout of 8 envs x 5 steps) and of batch 256 (an APPO minibatch on
Atari: 4 envs x 128 steps in 2), each in fp32 and under bf16 autocast (``--amp bf16``:
what the learner runs); per env, the cost of one agent step
(``SyncVectorEnv`` of 8 with the project's wrappers). One torch thread; each figure is the
median over rounds. Envs whose extra is missing are skipped, saying so.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import statistics
import time
from collections.abc import Callable

import torch
from gymnasium.vector import VectorEnv

from a3c.envs.make import make_vector_env
from a3c.policy import ModelSpec
from hogwild.precision import Precision

ROLLOUT = 40  # 8 envs x 5 steps: the A3C paper's Atari rollout per worker
MINIBATCH = 256  # 4 envs x 128 steps in 2 minibatches: Pong's APPO table
IMAGE = (4, 84, 84)
MINATAR = (4, 10, 10)
ENVS = ("CartPole-v1", "PongNoFrameskip-v4", "MinAtar/Breakout-v1")
ENV_BATCH = 8


def median_ms(fn: Callable[[], object], calls: int, rounds: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls * 1e3)
    return statistics.median(times)


def model_costs(rounds: int) -> None:
    discrete = {"type": "discrete", "n": 6}
    models = {
        "MLP 128x128 on 4 floats": (ModelSpec((4,), discrete).build(), (4,), torch.float32),
        "A3C conv (a3c) on 4x84x84": (
            ModelSpec(IMAGE, discrete, obs_dtype="uint8", conv="a3c").build(),
            IMAGE,
            None,
        ),
        "A3C conv, background centred (the [atari] preset)": (
            ModelSpec(
                IMAGE, discrete, obs_dtype="uint8", conv="a3c", center_frames="background"
            ).build(),
            IMAGE,
            None,
        ),
        "DQN conv (nature) on 4x84x84": (
            ModelSpec(IMAGE, discrete, obs_dtype="uint8", conv="nature").build(),
            IMAGE,
            None,
        ),
        "MinAtar conv (small) on 4x10x10": (
            ModelSpec(MINATAR, discrete, obs_dtype="uint8", conv="small").build(),
            MINATAR,
            None,
        ),
    }
    print(
        "\n| model | forward, batch 1 | forward, batch 8 | forward + backward, batch 40 "
        "| same, bf16 | forward + backward, batch 256 | same, bf16 |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, (model, shape, dtype) in models.items():

        def batch(n: int, shape=shape, dtype=dtype) -> torch.Tensor:
            if dtype is None:
                return torch.randint(0, 256, (n, *shape), dtype=torch.uint8)
            return torch.randn(n, *shape, dtype=dtype)

        one, eight = batch(1), batch(8)

        def act(obs: torch.Tensor, model=model) -> None:
            with torch.no_grad():
                model.act(obs, False)

        def learn(obs: torch.Tensor, precision: Precision, model=model) -> None:
            model.zero_grad(set_to_none=True)
            with precision.autocast():
                logits, value = model(obs)
            (logits.float().mean() + value.mean()).backward()

        row = [
            f"{median_ms(functools.partial(act, one), 200, rounds):.3f} ms",
            f"{median_ms(functools.partial(act, eight), 100, rounds):.3f} ms",
        ]
        for size, calls in ((ROLLOUT, 20), (MINIBATCH, 4)):
            obs = batch(size)
            for amp in ("off", "bf16"):
                learning = functools.partial(learn, obs, Precision(amp))
                row.append(f"{median_ms(learning, calls, rounds):.2f} ms")
        print(f"| {name} | {' | '.join(row)} |")


def vector_step_ms(envs: VectorEnv, calls: int, rounds: int) -> float:
    """Median ms of one ``envs.step`` on random actions drawn beforehand."""
    envs.reset(seed=0)
    envs.action_space.seed(0)
    actions = [envs.action_space.sample() for _ in range(64)]
    turn = itertools.count()
    return median_ms(lambda: envs.step(actions[next(turn) % len(actions)]), calls, rounds)


def env_costs(rounds: int) -> None:
    print(f"\n| env | one agent step (SyncVectorEnv of {ENV_BATCH}, per env) |")
    print("|---|---|")
    for env_id in ENVS:
        try:
            envs = make_vector_env(env_id, ENV_BATCH, seed=0)
        except Exception as e:  # noqa: BLE001 (a missing extra: say so and go on)
            print(f"| {env_id} | skipped: {str(e).splitlines()[0]} |")
            continue
        calls = 200 if env_id == "CartPole-v1" else 50
        ms = vector_step_ms(envs, calls, rounds) / ENV_BATCH
        print(f"| {env_id} | {ms * 1e3:.1f} µs ({1e3 / ms:,.0f} steps/s) |")
        envs.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"# python benchmarks/costs.py --rounds {args.rounds}")
    print(f"# nproc {os.cpu_count()}, torch {torch.__version__}, one torch thread")
    model_costs(args.rounds)
    env_costs(args.rounds)


if __name__ == "__main__":
    main()
