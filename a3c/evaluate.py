"""Score a saved policy: ``python -m a3c.evaluate runs/<run>/best.pt --episodes 20``."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import torch

from a3c.envs import make_env
from a3c.evaluation import run_episodes
from a3c.model import ModelSpec
from hogwild.checkpoint import load_checkpoint
from hogwild.cli import positive_int, run_cli
from hogwild.errors import UsageError


def load_policy(path: str | Path) -> tuple[torch.nn.Module, str]:
    """The model and env id saved in an A3C checkpoint, ready for inference."""
    ckpt = load_checkpoint(path, required=("model", "model_spec", "env_id"))
    model = ModelSpec.from_dict(ckpt["model_spec"]).build()
    try:
        model.load_state_dict(ckpt["model"])
    except (RuntimeError, KeyError) as e:
        first = str(e).splitlines()[0]
        raise UsageError(f"{path}: weights do not fit the saved model ({first})") from None
    return model.eval(), str(ckpt["env_id"])


def _make_recording_env(env_id: str, folder: str):
    for module, extra in (("moviepy", "moviepy"), ("pygame", "pygame")):
        if importlib.util.find_spec(module) is None:
            raise UsageError(
                f"--record needs {extra}: pip install 'hogwild-a3c[video]' (moviepy and pygame)"
            )
    from gymnasium.wrappers import RecordVideo

    env = make_env(env_id, render_mode="rgb_array")
    if env.render_mode != "rgb_array":
        raise UsageError(f"environment {env_id!r} cannot render frames, so it cannot be recorded")
    return RecordVideo(env, folder, episode_trigger=lambda _: True, disable_logger=True)


def _main(args: argparse.Namespace) -> int:
    model, env_id = load_policy(args.checkpoint)
    env_id = args.env or env_id
    env = _make_recording_env(env_id, args.record) if args.record else None
    try:
        returns = run_episodes(
            model, env_id, args.episodes, args.seed, greedy=not args.stochastic, env=env
        )
    finally:
        if env is not None:
            env.close()
    mode = "stochastic" if args.stochastic else "greedy"
    print(
        f"{env_id}: {mode} return {returns.mean():.2f} ± {returns.std():.2f} over "
        f"{args.episodes} episodes (min {returns.min():.1f}, max {returns.max():.1f})"
    )
    if args.record:
        print(f"videos in {args.record}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="a3c.evaluate",
        description="Roll out a saved A3C policy and report its mean return.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("checkpoint", help="a checkpoint written by a3c.train (best.pt, checkpoint.pt)")
    p.add_argument("--episodes", type=positive_int, default=10)
    p.add_argument("--stochastic", action="store_true", help="sample actions instead of argmax")
    p.add_argument("--seed", type=int, default=0, help="episode i is reset with seed + i")
    p.add_argument("--env", default=None, help="override the checkpoint's environment id")
    p.add_argument("--record", metavar="DIR", default=None, help="write videos (RecordVideo)")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_cli(build_parser(), _main, argv)


if __name__ == "__main__":
    sys.exit(main())
