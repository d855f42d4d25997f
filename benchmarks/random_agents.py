"""Random play on a PettingZoo env, scored as the run's evaluator scores a policy: the floor a
multi-agent run is measured against.

    python benchmarks/random_agents.py mpe2.simple_spread_v3:parallel_env N=3 max_cycles=25
    python benchmarks/random_agents.py pettingzoo.classic.connect_four_v3:env --games 200

A cooperative game scores its agents' mean return per game; a turn-based one a random
seat's return against a random legal player (:func:`a3c.scoring.play_games`, whose policy
here is untrained: its policy head starts near uniform, and ``--stochastic`` play draws
from it). Also prints each game's summed return (a team's, or zombies killed).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from a3c.envs import env_spaces, make_vector_env
from a3c.policy import ModelSpec
from a3c.scoring import play_games


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("env")
    p.add_argument("kwargs", nargs="*", metavar="KEY=VALUE", help="the env's keywords")
    p.add_argument("--games", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    kwargs = {}
    for item in args.kwargs:
        key, _, value = item.partition("=")
        kwargs[key] = _number(value)
    spaces = env_spaces(args.env, **kwargs)
    spec = ModelSpec(spaces.obs_shape, spaces.action, spaces.obs_dtype,
                     action_mask=spaces.action_mask, groups=spaces.groups)  # fmt: skip
    torch.manual_seed(args.seed)
    played = play_games(spec.build(), args.env, args.games, args.seed, greedy=False,
                        env_kwargs=kwargs)  # fmt: skip
    teams = _team_returns(args.env, kwargs, args.games, args.seed)
    print(
        f"{args.env} {kwargs}: random play over {args.games} games: "
        f"{played.returns.mean():.2f} ± {played.returns.std():.2f} a game "
        f"(team sum {np.mean(teams):.2f}; {played.lengths.mean():.1f} steps)"
    )


def _number(value: str) -> int | float | str:
    """An env keyword's value: a number where it reads as one (agent_groups=prefix: text)."""
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def _team_returns(env_id: str, kwargs: dict, games: int, seed: int) -> list[float]:
    """Every game's summed reward under uniformly random actions (legal ones, with a mask)."""
    envs = make_vector_env(env_id, 1, seed, **kwargs)
    rng = np.random.default_rng(seed)
    masked = env_spaces(env_id, **kwargs).action_mask
    n = int(envs.single_action_space.n) if masked else 0  # type: ignore[attr-defined]
    teams: list[float] = []
    obs, _ = envs.reset(seed=seed)
    while len(teams) < games:
        if masked:
            actions = np.array([rng.choice(np.flatnonzero(o[-n:] > 0.5) if o[-n:].any()
                                           else np.arange(n)) for o in obs])  # fmt: skip
        else:
            actions = envs.action_space.sample()
        obs, _, _, _, info = envs.step(actions)
        teams.extend(info["team"])
    envs.close()
    return teams[:games]


if __name__ == "__main__":
    main()
