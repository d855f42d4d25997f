"""a3c.learning.normalize: running statistics merged exactly across writers, processes
and nodes, and rewards scaled by the std of the discounted returns (ReturnScaler, and the
Collector that applies it)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.multiprocessing as tmp
from policy_helpers import mlp

from a3c.envs import make_vector_env
from a3c.learning.collect import Collector
from a3c.learning.normalize import EPS, ReturnScaler, RunningMeanStd, merge_rows

pytestmark = pytest.mark.usefixtures("hang_guard")

# -- RunningMeanStd -------------------------------------------------------------------------

OFFSET = torch.tensor([1e6, -5e3, 0.0], dtype=torch.float64)
SCALE = torch.tensor([1.0, 1e-3, 10.0], dtype=torch.float64)


def _batches(seed: int, sizes: tuple[int, ...]) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [OFFSET + SCALE * torch.randn(n, 3, generator=g, dtype=torch.float64) for n in sizes]


SIZES = ((50, 1, 0, 173, 7), (3, 0, 120), (1, 1, 64))


def _fill(rms: RunningMeanStd, writers: int) -> np.ndarray:
    """Each writer adds batches of its own sizes (empty and single-sample ones included)."""
    seen = []
    for w in range(writers):
        for x in _batches(seed=w, sizes=SIZES[w]):
            rms.add(w, x)
            seen.append(x.numpy())
    return np.concatenate(seen)


def _assert_matches_numpy(rms: RunningMeanStd, data: np.ndarray) -> None:
    mean, var = rms.mean_var()
    assert mean.dtype == var.dtype == torch.float64
    np.testing.assert_allclose(mean.numpy(), data.mean(0), rtol=1e-13, atol=0)
    # E[x^2] - mean^2 would be off by ~1e-4 (relative) for the feature at 1e6 +- 1.
    np.testing.assert_allclose(var.numpy(), data.var(0), rtol=1e-9, atol=0)
    assert float(rms.merged()[0]) == len(data)


def test_running_mean_std_merges_writers_exactly_despite_a_large_offset():
    rms = RunningMeanStd(writers=3, dim=3)
    data = _fill(rms, writers=3)
    assert len(data) == 231 + 123 + 66
    _assert_matches_numpy(rms, data)
    # Each writer's row holds exactly its own samples; the last row, other nodes', none.
    assert rms.rows[:, 0].tolist() == [231.0, 123.0, 66.0, 0.0]
    own = np.concatenate([x.numpy() for x in _batches(seed=1, sizes=SIZES[1])])
    np.testing.assert_allclose(rms.rows[1, 1:4].numpy(), own.mean(0), rtol=1e-13)
    np.testing.assert_allclose(rms.rows[1, 4:].numpy(), own.var(0) * len(own), rtol=1e-9)
    # merge_rows of all rows is the same as merged(); rows are not modified by reading.
    before = rms.rows.clone()
    torch.testing.assert_close(merge_rows(rms.rows), rms.merged(), rtol=0, atol=0)
    assert torch.equal(rms.rows, before)


def test_running_mean_std_other_nodes_row_counts_their_samples_once():
    here, there = RunningMeanStd(writers=2, dim=3), RunningMeanStd(writers=1, dim=3)
    mine = _fill(here, writers=2)
    theirs = np.concatenate([x.numpy() for x in _batches(seed=9, sizes=(40, 3))])
    for x in _batches(seed=9, sizes=(40, 3)):
        there.add(0, x)
    torch.testing.assert_close(here.local(), here.merged(), rtol=0, atol=0)
    here.set_remote([there.local()])
    _assert_matches_numpy(here, np.concatenate([mine, theirs]))
    torch.testing.assert_close(here.local()[0], torch.tensor(float(len(mine)), dtype=torch.float64))
    here.set_remote([there.local()])  # set, not added: a second round counts nothing twice
    _assert_matches_numpy(here, np.concatenate([mine, theirs]))
    here.set_remote([])
    _assert_matches_numpy(here, mine)


def test_running_mean_std_before_any_sample_and_state_round_trip():
    rms = RunningMeanStd(writers=2, dim=3)
    mean, var = rms.mean_var()
    assert mean.tolist() == [0.0] * 3 and var.tolist() == [1.0] * 3
    data = _fill(rms, writers=2)
    state = rms.state()
    assert state.shape == (1 + 2 * 3,) and state.dtype == torch.float64

    resumed = RunningMeanStd(writers=4, dim=3)  # another worker count: still one merged row
    resumed.load(state)
    assert torch.equal(resumed.rows[0], state) and not resumed.rows[1:].any()
    torch.testing.assert_close(resumed.state(), state, rtol=0, atol=0)
    _assert_matches_numpy(resumed, data)
    # Both go on with the same samples and stay the statistics of everything seen.
    more = _batches(seed=77, sizes=(30,))[0]
    rms.add(1, more)
    resumed.add(3, more)
    everything = np.concatenate([data, more.numpy()])
    _assert_matches_numpy(rms, everything)
    _assert_matches_numpy(resumed, everything)
    # load() accepts what a checkpoint gives back (a float32 tensor or a list) as float64.
    resumed.load(state.tolist())
    torch.testing.assert_close(resumed.state(), state, rtol=0, atol=0)


@pytest.mark.parametrize("shape", [(5,), (1, 7), (9,), ()])
def test_running_mean_std_load_rejects_a_wrong_shape(shape):
    rms = RunningMeanStd(writers=1, dim=3)
    rms.add(0, torch.ones(2, 3))
    before = rms.rows.clone()
    with pytest.raises(ValueError, match=r"shape .*expected \(7,\)"):
        rms.load(torch.zeros(shape))
    assert torch.equal(rms.rows, before)  # nothing half-loaded


def _add_in_child(rms: RunningMeanStd, writer: int, seed: int) -> None:
    torch.set_num_threads(1)
    for x in _batches(seed, sizes=(64, 5)):
        rms.add(writer, x)


def _run_forked(rms: RunningMeanStd, writer: int, seed: int) -> None:
    proc = tmp.get_context("fork").Process(target=_add_in_child, args=(rms, writer, seed))
    proc.start()
    proc.join(30)
    assert proc.exitcode == 0, proc.exitcode


def test_running_mean_std_row_written_by_another_process_is_seen():
    rms = RunningMeanStd(writers=2, dim=3).share_memory()
    assert rms.rows.is_shared()
    mine = _batches(seed=3, sizes=(20,))[0]
    rms.add(0, mine)
    _run_forked(rms, writer=1, seed=4)
    assert rms.rows[1, 0] == 69.0
    child = np.concatenate([x.numpy() for x in _batches(seed=4, sizes=(64, 5))])
    _assert_matches_numpy(rms, np.concatenate([mine.numpy(), child]))
    # Control: without share_memory() the child's row stays in the child.
    private = RunningMeanStd(writers=2, dim=3)
    _run_forked(private, writer=1, seed=4)
    assert not private.rows.any()


# -- ReturnScaler ---------------------------------------------------------------------------

REWARDS = np.array([[1.0, -2.0], [0.5, 3.0], [2.0, 1.0], [-1.0, 0.0], [4.0, 2.0]])
DONES = np.array([[False, False], [True, False], [False, True], [False, False], [True, True]])


def _hand_returns(gamma: float) -> list[float]:
    """R = gamma * R + r per env, folded in before the reset at an episode's end."""
    out, running = [], [0.0, 0.0]
    for rewards, dones in zip(REWARDS.tolist(), DONES.tolist(), strict=True):
        for k in range(2):
            running[k] = gamma * running[k] + rewards[k]
            out.append(running[k])
            if dones[k]:
                running[k] = 0.0
    return out


def test_return_scaler_folds_in_discounted_returns_reset_at_episode_ends():
    gamma = 0.9
    stats = RunningMeanStd(writers=2, dim=1)
    scaler = ReturnScaler(stats, writer=1, num_envs=2, gamma=gamma)
    assert scaler.scale() == pytest.approx(1 / math.sqrt(1 + EPS), rel=1e-12)
    for t in range(3):
        scaler.observe(REWARDS[t], DONES[t])
    assert not stats.rows.any()  # nothing shared before flush()
    scaler.flush()
    scaler.flush()  # nothing new: adds nothing
    for t in range(3, 5):  # the running returns carry over a flush
        scaler.observe(REWARDS[t], DONES[t])
    scaler.flush()

    hand = np.array(_hand_returns(gamma))
    # e.g. env 0: 1, 0.9 + 0.5 (done), 2, 1.8 - 1, 0.72 + 4 (done)
    np.testing.assert_allclose(hand[0::2], [1.0, 1.4, 2.0, 0.8, 4.72])
    np.testing.assert_allclose(hand[1::2], [-2.0, 1.2, 2.08, 0.0, 2.0])
    assert stats.rows[0].tolist() == [0.0, 0.0, 0.0]  # only its own writer's row
    assert stats.rows[1, 0] == len(hand)
    mean, var = stats.mean_var()
    assert float(mean[0]) == pytest.approx(hand.mean(), rel=1e-12)
    assert float(var[0]) == pytest.approx(hand.var(), rel=1e-12)
    assert scaler.scale() == pytest.approx(1 / math.sqrt(hand.var() + 1e-8), rel=1e-12)


def test_a_collector_hands_out_rewards_scaled_by_the_returns_shared_before_them():
    """The collector owns the scaling: a rollout's rewards come out divided by the std of
    the returns shared before it, and its own returns are shared once it is scaled."""
    stats = RunningMeanStd(writers=2, dim=1)
    stats.add(0, np.array([[0.0], [4.0]]))  # another worker's returns: variance 4
    envs = make_vector_env("CartPole-v1", 2, seed=0)
    torch.manual_seed(0)
    collector = Collector(envs, mlp(4, 2), 5, seed=0, return_rms=stats, writer=1, gamma=0.9)
    rollout = collector.collect()
    envs.close()
    # CartPole pays 1 a step: every reward is 1 / sqrt(4 + eps).
    np.testing.assert_allclose(rollout.rewards.numpy(), 1 / math.sqrt(4 + EPS), rtol=1e-6)
    assert stats.rows[1, 0] == rollout.rewards.numel()
