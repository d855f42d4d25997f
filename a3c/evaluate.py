"""Score a saved policy: ``python -m a3c.evaluate runs/<run>/best.pt --episodes 20``."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

from a3c.envs import is_multiagent_id, make_env
from a3c.envs.make import agent_view
from a3c.policy import ActorCritic
from a3c.scoring import (
    DEFAULT_EVAL_MAX_STEPS,
    agent_results,
    play_episodes,
    play_games,
    seat_results,
    zero_sum,
)
from a3c.use.saved import load_policy
from hogwild.cli import positive_int, run_cli
from hogwild.errors import UsageError
from hogwild.procs import torch_threads


def _make_recording_env(env_id: str, folder: str, env_kwargs: dict[str, Any]) -> gym.Env:
    """``env_id`` wrapped in ``RecordVideo``, every episode recorded into ``folder``.

    Everything that can be refused is checked before anything is written, so a bad
    ``--record`` leaves no empty folder behind: the packages, that the env renders
    ``rgb_array`` frames, that ``folder`` can be a folder.
    """
    for module in ("moviepy", "pygame"):
        if importlib.util.find_spec(module) is None:
            raise UsageError(
                f'--record needs {module}: pip install "hogwild-a3c[video]" '
                f'(or, from a checkout, pip install -e ".[video]")'
            )
    from gymnasium.wrappers import RecordVideo

    # Asking an env for a mode it lacks only warns, so look first.
    probe = make_env(env_id, scoring=True, **env_kwargs)
    modes = list(probe.metadata.get("render_modes") or [])
    probe.close()
    if "rgb_array" not in modes:
        raise UsageError(
            f"environment {env_id!r} cannot render rgb_array frames (its render modes: "
            f"{modes or 'none'}), so it cannot be recorded"
        )
    # Frames are drawn off-screen: no window, so no display driver to probe (SDL's probing
    # prints "error: XDG_RUNTIME_DIR is invalid" on machines without a desktop session).
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    env = make_env(env_id, scoring=True, render_mode="rgb_array", **env_kwargs)
    try:
        if env.render_mode != "rgb_array":  # it lists the mode but ignored the argument
            raise UsageError(f"environment {env_id!r} does not honour render_mode='rgb_array'")
        _video_folder(folder)
    except BaseException:
        env.close()
        raise
    with warnings.catch_warnings():  # the folder exists now (made above): no news
        warnings.filterwarnings("ignore", message=".*Overwriting existing videos")
        return RecordVideo(env, folder, episode_trigger=lambda _: True, disable_logger=True)


def _video_folder(folder: str) -> None:
    """Make ``folder`` (and its parents), or say in one line why it cannot be one."""
    path = Path(folder)
    if path.exists() and not path.is_dir():
        raise UsageError(f"--record {folder}: a file is in the way; give a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--record {folder}: cannot create the folder ({e.strerror})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"--record {folder}: the folder is not writable")


def _close_recording(env: gym.Env, folder: str, episodes: int) -> list[Path]:
    """Close ``env`` (which writes the last video) and return the videos it wrote."""
    try:
        env.close()
    except OSError as e:
        raise UsageError(f"--record {folder}: writing the video failed ({e})") from None
    videos = [Path(folder, f"rl-video-episode-{i}.mp4") for i in range(episodes)]
    videos = [v for v in videos if v.is_file()]
    if not videos:
        raise UsageError(f"--record {folder}: the environment rendered no frames, no video written")
    return videos


def _opponent(
    choice: str | None, model: ActorCritic, env_id: str, env_kwargs: dict[str, Any]
) -> tuple[ActorCritic | None, str | None]:
    """``--opponent``'s player of a zero-sum turn-based game's other seats, and its name
    (None: the random player :func:`a3c.scoring.play_games` names)."""
    if choice is None or choice == "random":
        return None, None
    turns = is_multiagent_id(env_id) and agent_view(env_id, **env_kwargs).turns
    if not turns:
        raise UsageError(f"--opponent is for turn-based PettingZoo games; {env_id} is not one")
    if not zero_sum(env_id, env_kwargs):
        raise UsageError(
            f"--opponent is for zero-sum turn-based PettingZoo games; {env_id} is scored as a "
            "team, the policy in every seat"
        )
    if choice == "self":
        return model, "itself (sampling)"
    return load_policy(choice, env_id).model, f"{choice} (sampling)"


def _main(args: argparse.Namespace) -> int:
    model, env_id, env_kwargs = load_policy(args.checkpoint, args.env)
    opponent, against = _opponent(args.opponent, model, env_id, env_kwargs)
    env = _make_recording_env(env_id, args.record, env_kwargs) if args.record else None
    # --stochastic draws actions from torch's global RNG: seed it too, so that one --seed
    # gives one set of returns (torch seeds that RNG differently in every process).
    torch.manual_seed(args.seed)
    greedy = not args.stochastic
    try:
        if env is None and is_multiagent_id(env_id):
            played = play_games(
                model, env_id, args.episodes, args.seed, greedy=greedy,
                env_kwargs=env_kwargs, max_steps=args.max_steps, opponent=opponent,
            )  # fmt: skip
        else:
            played = play_episodes(
                model, env_id, args.episodes, args.seed, greedy=greedy, env=env,
                env_kwargs=env_kwargs, max_steps=args.max_steps,
            )  # fmt: skip
    except BaseException:
        if env is not None:
            env.close()
        raise
    videos = _close_recording(env, args.record, args.episodes) if env is not None else []
    returns, capped = played.returns, int(played.capped.sum())
    mode = "stochastic" if args.stochastic else "greedy"
    print(
        f"{env_id}: {mode} return {returns.mean():.2f} ± {returns.std():.2f} over "
        + (
            f"{args.episodes} episodes (min {returns.min():.1f}, max {returns.max():.1f})"
            if args.episodes > 1
            else "1 episode"
        )
    )
    for line in [*seat_results(played, against), *agent_results(played)]:
        print(line)
    if played.agent_returns is not None and model.spec.action_mask:
        print(f"illegal moves: {played.illegal}")
    if capped:
        print(
            f"{capped} of {args.episodes} episodes were cut at "
            f"{played.lengths[played.capped].max()} agent steps (--max-steps); "
            "their returns count as they stood"
        )
    if videos:
        more = f" ... {videos[-1].name}" if len(videos) > 1 else ""
        print(f"videos in {args.record}: {videos[0].name}{more}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="a3c.evaluate",
        description="Roll out a saved A3C policy and report its mean return.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument("checkpoint", help="a checkpoint written by a3c.train (best.pt, checkpoint.pt)")
    p.add_argument("--episodes", type=positive_int, default=10)
    p.add_argument("--stochastic", action="store_true", help="sample actions instead of argmax")
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="episode i is reset with seed + i; it also seeds --stochastic's draws",
    )
    p.add_argument(
        "--max-steps",
        type=positive_int,
        default=None,
        metavar="N",
        help="cut an episode after this many agent steps (none: the env's own "
        f"max_episode_steps, else {DEFAULT_EVAL_MAX_STEPS:_})",
    )
    p.add_argument("--env", default=None, help="override the checkpoint's environment id")
    p.add_argument(
        "--opponent",
        metavar="random|self|PATH",
        default=None,
        help="zero-sum turn-based PettingZoo games: who plays the other seats: a random player "
        "(default; among the legal moves where the game masks them), the policy itself, or "
        "another checkpoint's; an opponent policy samples. Other games: the policy plays "
        "every seat, scored as a team",
    )
    p.add_argument("--record", metavar="DIR", default=None, help="write videos (RecordVideo)")
    return p


def main(argv: list[str] | None = None) -> int:
    # One game at a time, batch-1 forwards: 1 thread unless OMP_NUM_THREADS says. 100 go 5x5
    # games beside a training run took 2.6 s at 1 thread, 6.7 s at torch's 2; alone, 200:
    # 3.7 against 4.0 s.
    with torch_threads(None if "OMP_NUM_THREADS" in os.environ else 1):
        return run_cli(build_parser(), _main, argv)


if __name__ == "__main__":
    sys.exit(main())
