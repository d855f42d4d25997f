"""Where a connect four policy loses to a random player: the immediate wins it missed and the
immediate threats it left open, counted over its greedy moves in each seat.

    python benchmarks/connect_four_threats.py RUN/checkpoint.pt --games 400

A policy that won every won position at once and blocked every open three would lose to a
random player only to double threats; self-play that settles into one game misses both
(docs/tuning.md, connect four).
"""

from __future__ import annotations

import argparse

import numpy as np
from pettingzoo.classic import connect_four_v3

from a3c.api import Policy

ROWS, COLUMNS = 6, 7
MINE, THEIRS = 0, 1  # the observation's planes: the mover's pieces, the other seat's
DIRECTIONS = ((0, 1), (1, 0), (1, 1), (1, -1))


def four(pieces: np.ndarray) -> bool:
    """Whether ``pieces`` (a 6x7 plane) holds four in a row in any direction."""
    for r, c in zip(*np.nonzero(pieces), strict=True):
        for dr, dc in DIRECTIONS:
            cells = [(r + k * dr, c + k * dc) for k in range(4)]
            if all(0 <= y < ROWS and 0 <= x < COLUMNS and pieces[y, x] for y, x in cells):
                return True
    return False


def winning_columns(board: np.ndarray, plane: int) -> set[int]:
    """The columns where a piece of ``plane``'s seat, dropped now, makes four."""
    filled = board[:, :, MINE] + board[:, :, THEIRS]
    wins = set()
    for column in range(COLUMNS):
        empty = np.flatnonzero(filled[:, column] == 0)
        if empty.size:
            pieces = board[:, :, plane].copy()
            pieces[empty.max(), column] = 1
            if four(pieces):
                wins.add(column)
    return wins


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint")
    p.add_argument("--games", type=int, default=200, help="games a seat")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    policy = Policy.load(args.checkpoint)
    rng = np.random.default_rng(args.seed)
    for seat in ("player_0", "player_1"):
        results = {"won": 0, "drew": 0, "lost": 0}
        moves = missed_wins = missed_blocks = 0
        for game in range(args.games):
            env = connect_four_v3.env()
            env.reset(seed=args.seed + game)
            for agent in env.agent_iter():
                obs, reward, terminated, truncated, _ = env.last()
                if terminated or truncated:
                    if agent == seat:
                        results["won" if reward > 0 else "lost" if reward < 0 else "drew"] += 1
                    env.step(None)
                    continue
                if agent != seat:
                    env.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
                    continue
                action = int(policy.predict({agent: obs})[0][agent])
                wins = winning_columns(obs["observation"], MINE)
                threats = winning_columns(obs["observation"], THEIRS)
                moves += 1
                missed_wins += bool(wins) and action not in wins
                missed_blocks += not wins and bool(threats) and action not in threats
                env.step(action)
            env.close()
        rates = ", ".join(f"{k} {v / args.games:.3f}" for k, v in results.items())
        print(
            f"as {seat}: {rates}; {moves} moves, {missed_wins} missed wins, "
            f"{missed_blocks} open threats left"
        )


if __name__ == "__main__":
    main()
