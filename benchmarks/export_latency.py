"""Per-observation latency of acting with a policy: ``predict``, TorchScript, torch.export, ONNX.

    python benchmarks/export_latency.py [--repeats 7] [--seconds 0.5]

What it costs to serve a trained policy greedily, by runtime: ``Policy.predict`` (numpy
adapters around the model), and the files ``Policy.export`` writes, each with its
preprocessing inside: TorchScript (``.pt``), ``torch.export`` (``.pt2``,
``torch.export.load(...).module()``) and onnxruntime (``.onnx``). One core: one torch
thread, onnxruntime with one intra-op and one inter-op thread. Two policies as their presets
build them, untrained: CartPole-v1's MLP, and the Atari conv net on ``PongNoFrameskip-v4``'s
4x84x84 ``uint8`` frames (a stand-in env with Pong's spaces, so ale-py is not needed).
Batches of 1 and 64 observations, numpy in and numpy out, as a server would call them.

Prints a markdown table of microseconds per observation: the median over ``--repeats``
timings of about ``--seconds`` each. Each runtime's actions are first checked against
``predict``'s on the same batch.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

from a3c.api import Policy, config_for
from a3c.envs import env_spaces
from a3c.envs.spaces import EnvSpaces
from a3c.run.shared_model import model_spec

BATCHES = (1, 64)
RUNTIMES = ("predict", "TorchScript", "torch.export", "onnxruntime")
FRAMES = "PongFrames-v0"  # PongNoFrameskip-v4's observations and actions, without ale-py


class Frames(gym.Env):
    """Pong's spaces after the project's Atari wrappers: 4 stacked 84x84 frames, 6 actions."""

    observation_space = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    action_space = spaces.Discrete(6)

    def reset(self, *, seed=None, options=None):  # noqa: ANN001, ANN201
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):  # noqa: ANN001, ANN201
        return self.observation_space.sample(), 0.0, False, False, {}


def preset_policy(env_id: str, preset_of: str, spaces_: EnvSpaces) -> Policy:
    """An untrained policy with the architecture ``preset_of``'s preset trains."""
    torch.manual_seed(0)
    model = model_spec(config_for(preset_of), spaces_).build()
    return Policy(model, env_id, {})


def policies() -> dict[str, Policy]:
    if FRAMES not in gym.registry:
        gym.register(id=FRAMES, entry_point=Frames)
    frames = EnvSpaces((4, 84, 84), "uint8", {"type": "discrete", "n": 6})
    return {
        "CartPole-v1 MLP": preset_policy("CartPole-v1", "CartPole-v1", env_spaces("CartPole-v1")),
        "Pong conv (4x84x84 uint8)": preset_policy(FRAMES, "PongNoFrameskip-v4", frames),
    }


def runners(policy: Policy, folder: Path) -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    """Each runtime as ``act(batch of observations) -> actions``, numpy in and out."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(
        str(policy.export(folder / "policy.onnx")), options, providers=["CPUExecutionProvider"]
    )
    with warnings.catch_warnings():  # torch 2.13 deprecates TorchScript; it still loads
        warnings.simplefilter("ignore")
        scripted = torch.jit.load(str(policy.export(folder / "policy.pt")))
    exported = torch.export.load(str(policy.export(folder / "policy.pt2"))).module()

    def in_torch(module: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[np.ndarray], Any]:
        def act(obs: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                return module(torch.from_numpy(obs)).numpy()

        return act

    return {
        "predict": lambda obs: policy.predict(obs)[0],
        "TorchScript": in_torch(scripted),
        "torch.export": in_torch(exported),
        "onnxruntime": lambda obs: session.run(None, {"obs": obs})[0],
    }


def batch_of(policy: Policy, n: int) -> np.ndarray:
    env = policy.make_env()
    obs, _ = env.reset(seed=0)
    env.action_space.seed(0)
    rows = []
    for _ in range(n):
        rows.append(obs)
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            obs, _ = env.reset()
    env.close()
    return np.stack(rows)


def us_per_observation(act: Callable[[], Any], n: int, repeats: int, seconds: float) -> float:
    act()  # warm-up
    t0 = time.perf_counter()
    act()
    calls = max(1, int(seconds / max(time.perf_counter() - t0, 1e-7)))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            act()
        times.append((time.perf_counter() - t0) / calls / n * 1e6)
    return statistics.median(times)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="timings per cell (median)")
    parser.add_argument("--seconds", type=float, default=0.5, help="length of one timing")
    args = parser.parse_args()
    torch.set_num_threads(1)
    import onnxruntime as ort

    print(
        f"# python benchmarks/export_latency.py --repeats {args.repeats} --seconds {args.seconds:g}"
    )
    print(
        f"# {cpu_name()}, nproc {os.cpu_count()}, torch "
        f"{torch.__version__}, onnxruntime {ort.__version__}; one thread each; "
        "µs per observation (median)"
    )
    built = policies()
    columns = [f"{name}, batch {n}" for name in built for n in BATCHES]
    rows: dict[str, list[str]] = {runtime: [] for runtime in RUNTIMES}
    with tempfile.TemporaryDirectory() as tmp:
        for i, policy in enumerate(built.values()):
            folder = Path(tmp, str(i))
            folder.mkdir()
            acts = runners(policy, folder)
            for n in BATCHES:
                obs = batch_of(policy, n)
                expected = acts["predict"](obs)
                for runtime, act in acts.items():
                    same = np.array_equal(act(obs), expected)
                    call = functools.partial(act, obs)
                    us = us_per_observation(call, n, args.repeats, args.seconds)
                    rows[runtime].append(f"{us:,.1f}" + ("" if same else " (actions differ)"))
    print("\n| runtime | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for runtime, cells in rows.items():
        print(f"| {runtime} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
