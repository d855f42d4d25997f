"""The observation statistics of many agents count live rows only: none of an agent that
left the game, and with a policy per group none of the zeros in the other groups' blocks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from a3c.envs import env_spaces, make_vector_env
from a3c.learning.collect import Collector
from a3c.learning.normalize import RunningMeanStd, mean_var_of
from a3c.policy import ModelSpec
from a3c.run.worker import add_live_obs

pytestmark = pytest.mark.usefixtures("hang_guard")


@pytest.fixture(autouse=True)
def _pettingzoo():
    pytest.importorskip(
        "pettingzoo", reason='needs the pettingzoo extra: pip install -e ".[pettingzoo]"'
    )


def _rollouts(env_id: str, games: int, steps: int, rollouts: int, **kwargs):
    spaces = env_spaces(env_id, **kwargs)
    spec = ModelSpec(spaces.obs_shape, spaces.action, action_mask=spaces.action_mask,
                     groups=spaces.groups, normalize_obs=True, hidden=(8,))  # fmt: skip
    torch.manual_seed(0)
    model = spec.build()
    rms = RunningMeanStd(1, spec.obs_dim, per_column=bool(spec.groups))
    envs = make_vector_env(env_id, games, seed=0, **kwargs)
    try:
        collector = Collector(envs, model, steps, seed=0)
        obs, acted = [], []
        for _ in range(rollouts):
            rollout = collector.collect()
            add_live_obs(rms, 0, model, rollout.obs, rollout.acted)
            obs.append(rollout.obs.reshape(-1, spec.obs_dim).double())
            acted.append(rollout.acted.reshape(-1))
    finally:
        envs.close()
    return rms, torch.cat(obs), torch.cat(acted)


def test_agents_that_left_count_no_rows():
    """agent_i observes ``[t, i]`` for t < i + 2, then leaves: 9 live rows of 12 a game
    (4 steps, one rollout), whose mean is [10/9, 11/9]; the 3 zero rows would pull it to
    [10/12, 11/12]."""
    rms, obs, acted = _rollouts("agent_envs:leavers", games=2, steps=4, rollouts=3)
    assert int(acted.sum()) == 9 * 2 * 3 < len(obs)
    mean, var = rms.mean_var()
    assert float(rms.merged()[0]) == 9 * 2 * 3
    torch.testing.assert_close(mean, torch.tensor([10 / 9, 11 / 9], dtype=torch.float64))
    torch.testing.assert_close(var, obs[acted].var(0, unbiased=False))


def test_each_group_counts_its_own_rows_in_its_own_columns():
    """Speaker (3 one-hot observations) and listener (5): each group's block has the mean
    and variance of its own rows (the speaker's 1/3 a column, not the 1/6 that the
    listener's zeros there would make); the legal-action columns count both groups' rows;
    the group index, which no net reads, none."""
    rms, obs, acted = _rollouts("agent_envs:pairs", games=3, steps=4, rollouts=4,
                                agent_groups="prefix")  # fmt: skip
    assert acted.all()
    state = rms.state()
    assert state.shape == (3 * 14,)  # [group, speaker 3, listener 5, legal 5]: a count each
    mean, var = mean_var_of(state, 14)
    counts = state[:14]
    speaker, listener = obs[obs[:, 0] == 0], obs[obs[:, 0] == 1]
    assert counts.tolist() == [0] + [len(speaker)] * 3 + [len(listener)] * 5 + [len(obs)] * 5
    for rows, block in ((speaker, slice(1, 4)), (listener, slice(4, 9))):
        torch.testing.assert_close(mean[block], rows[:, block].mean(0))
        torch.testing.assert_close(var[block], rows[:, block].var(0, unbiased=False))
    assert mean[1:4].sum() == pytest.approx(1.0), "one-hot: the speaker's own means sum to 1"
    assert mean[0] == 0 and var[0] == 1


def test_per_column_counts_merge_exactly_and_take_an_older_single_count():
    """Writers filling different columns merge into each column's exact statistics; a
    checkpoint's single count (from before per-column counts) loads as every column's."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(7, 2, generator=g, dtype=torch.float64), torch.randn(5, 3, generator=g)
    rms = RunningMeanStd(writers=2, dim=3, per_column=True)
    rms.add(0, a, columns=[0, 2])
    rms.add(1, b)
    mean, var = rms.mean_var()
    column_0 = torch.cat((a[:, 0], b[:, 0].double()))
    torch.testing.assert_close(mean[0], column_0.mean())
    torch.testing.assert_close(var[0], column_0.var(unbiased=False))
    torch.testing.assert_close(mean[1], b[:, 1].double().mean())
    assert rms.state()[:3].tolist() == [12, 5, 12]

    single = RunningMeanStd(writers=1, dim=3)
    single.add(0, b)
    resumed = RunningMeanStd(writers=2, dim=3, per_column=True)
    resumed.load(single.state())
    for x, y in zip(resumed.mean_var(), single.mean_var(), strict=True):
        torch.testing.assert_close(x, y)
    with pytest.raises(ValueError, match="per-column"):
        single.add(0, a, columns=[0, 2])
    np.testing.assert_array_equal(resumed.state()[:3].numpy(), [5, 5, 5])
