"""``benchmarks/connect_four_threats.py``: its count of missed wins and open threats, on boards
worked by hand and on a real policy's games."""

import re

import numpy as np
import pytest
import torch
from script_helpers import load_benchmark

pytest.importorskip(
    "pettingzoo", reason='needs the pettingzoo extra: pip install -e ".[pettingzoo]"'
)
threats = load_benchmark("connect_four_threats")


def board(mine: list[tuple[int, int]], theirs: list[tuple[int, int]]) -> np.ndarray:
    b = np.zeros((6, 7, 2), dtype=np.int8)
    for r, c in mine:
        b[r, c, threats.MINE] = 1
    for r, c in theirs:
        b[r, c, threats.THEIRS] = 1
    return b


def test_wins_are_found_where_a_dropped_piece_lands():
    three_up = board([(5, 0), (4, 0), (3, 0)], [(5, 1), (4, 1)])
    assert threats.winning_columns(three_up, threats.MINE) == {0}
    assert threats.winning_columns(three_up, threats.THEIRS) == set()
    # Three along the bottom with both ends open: two winning columns for the other seat.
    row = board([(4, 2)], [(5, 2), (5, 3), (5, 4)])
    assert threats.winning_columns(row, threats.THEIRS) == {1, 5}
    # A rising diagonal whose fourth cell (row 2 of column 3) cannot be reached yet.
    diagonal = board([(5, 0), (4, 1), (3, 2)], [(5, 1), (5, 2), (4, 2), (5, 3), (4, 3)])
    assert threats.winning_columns(diagonal, threats.MINE) == set()
    diagonal[3, 3, threats.THEIRS] = 1
    assert threats.winning_columns(diagonal, threats.MINE) == {3}


def test_a_policy_is_scored_per_seat(tmp_path, capsys):
    from a3c.policy import ModelSpec

    torch.manual_seed(0)
    model = ModelSpec((91,), {"type": "discrete", "n": 7}, action_mask=True, hidden=(16,)).build()
    path = tmp_path / "c4.pt"
    torch.save({"model": model.state_dict(), "model_spec": model.spec.to_dict(),
                "env_id": "pettingzoo.classic.connect_four_v3:env"}, path)  # fmt: skip
    threats.main([str(path), "--games", "4"])
    out = capsys.readouterr().out
    seats = re.findall(
        r"as (player_\d): won ([\d.]+), drew ([\d.]+), lost ([\d.]+); (\d+) moves", out
    )
    assert [s[0] for s in seats] == ["player_0", "player_1"], out
    assert all(abs(sum(map(float, s[1:4])) - 1) < 1e-9 and int(s[4]) > 0 for s in seats)
