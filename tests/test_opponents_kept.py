"""--snapshot-games: the pool of past policies outlives a worker (shared memory) and a run
(the checkpoint), so the early opponents that the pool keeps are not lost."""

from __future__ import annotations

import pytest
import torch

from a3c.learning.opponents import SNAPSHOT_EVERY, Opponents, SnapshotPool
from a3c.policy import ModelSpec
from a3c.run.config import A3CConfig
from a3c.run.trainer import train
from hogwild.checkpoint import load_checkpoint, save_checkpoint
from hogwild.errors import UsageError

pytestmark = pytest.mark.usefixtures("hang_guard")


@pytest.fixture(autouse=True)
def _pettingzoo():
    pytest.importorskip(
        "pettingzoo", reason='needs the pettingzoo extra: pip install -e ".[pettingzoo]"'
    )


def _ages(snapshots: Opponents) -> list[int]:
    return [int(net.head.bias[0]) for net in snapshots.pool]


def test_a_restarted_worker_takes_its_snapshots_back():
    """Worker 1 takes 3 snapshots (their age in their weights, and obs statistics in their
    buffers); a new Opponents on its row, as a restarted worker builds, holds the same 3
    and goes on with the same count, taking its next one on schedule."""
    spec = ModelSpec((3,), {"type": "discrete", "n": 2}, hidden=(4,), normalize_obs=True)
    model = spec.build()
    pool = SnapshotPool.of(model, workers=2).share_memory()
    first = Opponents(model, 0.5, agents=2, rows=4, seed=0, shared=pool, writer=1)
    for age in range(3):
        with torch.no_grad():
            model.head.bias.fill_(age)
            model.obs_mean.fill_(age + 0.5)
        for _ in range(SNAPSHOT_EVERY):
            first.keep()
    with torch.no_grad():
        model.head.bias.fill_(99)
    again = Opponents(model, 0.5, agents=2, rows=4, seed=7, shared=pool, writer=1)
    assert _ages(again) == _ages(first) == [0, 1, 2] and again.taken == 3
    assert [float(net.obs_mean[0]) for net in again.pool] == [0.5, 1.5, 2.5]
    assert not pool.counts[0].any(), "worker 0's row is its own"
    again.keep()
    assert _ages(again) == [0, 1, 2, 99] and pool.counts[1].tolist() == [4, 4, 61]


def _leavers(tmp_path, **kw) -> A3CConfig:
    # 4 steps a rollout: a snapshot every 20 rollouts, some 130 acted steps
    settings = dict(env="agent_envs:leavers", workers=1, envs_per_worker=1, n_steps=4,
                    snapshot_games=0.5, eval_interval=0.0, logdir=str(tmp_path))  # fmt: skip
    return A3CConfig(**{**settings, **kw})


def test_a_resumed_run_plays_the_saved_opponents(tmp_path):
    """A run takes 3 snapshots and checkpoints them; its resume takes them back and adds
    more: the 3 saved ones are still the first 3 in its checkpoint, and the count goes on
    from 3 (from 0, its first would overwrite the saved first). A checkpoint's damaged
    pool is one line, not a traceback."""
    saved_run = train(_leavers(tmp_path, total_steps=400))
    saved = load_checkpoint(saved_run.run_dir / "checkpoint.pt")["snapshots"]
    kept = int(saved["counts"][0, 0])
    assert kept == int(saved["counts"][0, 1]) == 3, saved["counts"]
    resumed_run = train(
        _leavers(tmp_path, total_steps=800, resume=str(saved_run.run_dir / "checkpoint.pt"))
    )
    assert resumed_run.exit_code == 0
    after = load_checkpoint(resumed_run.run_dir / "checkpoint.pt")["snapshots"]
    kept_after, taken = after["counts"][0, :2].tolist()
    assert kept < taken == kept_after <= 8, after["counts"]  # none replaced yet
    assert torch.equal(after["slots"][0, :kept], saved["slots"][0, :kept])
    assert after["slots"][0, kept].any() and not after["slots"][0, kept_after:].any()

    ckpt = load_checkpoint(saved_run.run_dir / "checkpoint.pt")
    ckpt["snapshots"] = {"slots": torch.zeros(1, 8, 3), "counts": ckpt["snapshots"]["counts"]}
    save_checkpoint(ckpt, tmp_path / "damaged.pt")
    with pytest.raises(UsageError, match="bad snapshots: snapshots of shape"):
        train(_leavers(tmp_path, total_steps=800, resume=str(tmp_path / "damaged.pt")))
