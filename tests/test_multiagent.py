"""PettingZoo envs as agent rows (a3c.envs.multiagent): real games, the targets of turns and
of agents that leave, masked actions, and a cooperative env learned by real workers."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tb_helpers import scalar_points

from a3c.envs import env_spaces, make_vector_env
from a3c.learning.collect import Collector
from a3c.learning.returns import gae
from a3c.policy import ModelSpec
from a3c.run.trainer import train
from hogwild.checkpoint import load_checkpoint
from hogwild.errors import UsageError

pytestmark = pytest.mark.usefixtures("hang_guard")
EXTRA = 'needs the pettingzoo extra: pip install -e ".[pettingzoo]"'

SPREAD = "mpe2.simple_spread_v3:parallel_env"
CONNECT_FOUR = "pettingzoo.classic.connect_four_v3:env"
KAZ = "pettingzoo.butterfly.knights_archers_zombies_v11:parallel_env"
SPEAKER_LISTENER = "mpe2.simple_speaker_listener_v4:parallel_env"


@pytest.fixture(autouse=True)
def _pettingzoo():
    pytest.importorskip("pettingzoo", reason=EXTRA)
    pytest.importorskip("mpe2", reason=EXTRA)


def test_own_steps_gae_is_plain_gae_when_every_row_acts():
    torch.manual_seed(0)
    T, N = 9, 6
    rewards, values = torch.randn(T, N), torch.randn(T, N)
    terminated = torch.rand(T, N) < 0.2
    dones = terminated | (torch.rand(T, N) < 0.1)
    # gae's contract: the next step's value inside an episode, V(final_obs) at a truncation
    next_values = torch.cat((values[1:], torch.randn(1, N)))
    next_values = torch.where(dones & ~terminated, torch.randn(T, N), next_values)
    plain = gae(rewards, values, next_values, terminated, dones, gamma=0.9, lam=0.8)
    every = torch.ones(T, N, dtype=torch.bool)
    own = gae(rewards, values, next_values, terminated, dones, gamma=0.9, lam=0.8, acted=every)
    for a, b in zip(plain, own, strict=True):
        torch.testing.assert_close(a, b)


def test_a_turn_takes_the_reward_and_the_end_that_came_between_its_moves():
    """Seat A moves at t = 0 and 2; at t = 3, B's winning move ends the game: A's second
    move takes B's -1 as its own terminal reward, undiscounted and not bootstrapped; A's
    first move bootstraps from its second's value, not from the value of B's turn."""
    gamma, lam = 0.9, 0.95
    acted = torch.tensor([[True], [False], [True], [False]])
    rewards = torch.tensor([[0.0], [0.0], [0.0], [-1.0]])
    values = torch.tensor([[0.1], [5.0], [0.3], [7.0]])
    terminated = torch.tensor([[False], [False], [False], [True]])
    next_values = torch.cat((values[1:], torch.tensor([[9.0]])))
    adv, ret = gae(rewards, values, next_values, terminated, terminated.clone(),
                   gamma=gamma, lam=lam, acted=acted)  # fmt: skip
    a2 = -1.0 - 0.3
    a0 = 0.0 + gamma * 0.3 - 0.1 + gamma * lam * a2
    torch.testing.assert_close(adv[:, 0], torch.tensor([a0, 0.0, a2, 0.0]))
    torch.testing.assert_close(ret[2, 0], torch.tensor(-1.0))


def test_simple_spread_rows_are_every_agent_of_every_game():
    envs = make_vector_env(SPREAD, 2, seed=1, N=3, max_cycles=25)
    try:
        assert envs.num_envs == 6 and envs.single_observation_space.shape == (18,)
        envs.reset(seed=1)
        for step in range(1, 26):
            actions = envs.action_space.sample()
            _, rewards, terminated, truncated, info = envs.step(actions)
            assert info["acted"].all()
            if step < 25:
                assert not (terminated | truncated).any() and info["team"] == []
        assert truncated.all() and not terminated.any(), "max_cycles truncates every agent"
        assert len(info["team"]) == 2 and all(isinstance(o, np.ndarray) for o in info["final_obs"])
    finally:
        envs.close()


def _connect_four_game(envs, moves):
    """Play ``moves`` (columns) in game 0, the seats taking turns; the steps' results."""
    out = []
    for column in moves:
        actions = np.zeros(envs.num_envs, dtype=np.int64)
        actions[:] = column
        out.append(envs.step(actions))
    return out


def test_connect_four_turns_masks_and_both_seats_credited():
    spaces = env_spaces(CONNECT_FOUR)
    assert spaces.action_mask and spaces.obs_shape == (84 + 7,)
    envs = make_vector_env(CONNECT_FOUR, 1, seed=0)
    try:
        obs, _ = envs.reset(seed=0)
        assert obs[0, -7:].all() and not obs[1, -7:].any(), "only the seat to move has moves"
        # player_0 drops four in column 0 while player_1 plays column 1: player_0 wins.
        steps = _connect_four_game(envs, [0, 1, 0, 1, 0, 1, 0])
        for t, (_, _, _, _, info) in enumerate(steps):
            assert info["acted"].tolist() == [t % 2 == 0, t % 2 == 1]
        _, rewards, terminated, _, info = steps[-1]
        assert rewards.tolist() == [1.0, -1.0] and terminated.all(), "the loser is credited too"
        assert info["team"] == [0.0]
    finally:
        envs.close()


def test_a_board_is_read_by_a_conv_net_in_its_own_layout():
    from pettingzoo.classic import connect_four_v3

    from a3c.envs.multiagent import agent_spaces
    from a3c.run.presets import config_for
    from a3c.run.shared_model import model_spec

    spaces = env_spaces(CONNECT_FOUR)
    assert spaces.grid == (6, 7, 2)
    game = connect_four_v3.env()
    game.reset(seed=0)
    for column in (3, 3, 4):
        game.step(column)
    raw = game.observe("player_1")
    row = agent_spaces(game, CONNECT_FOUR).observation("player_1", raw)
    board = torch.as_tensor(row[None])[:, :84].reshape(1, 6, 7, 2)
    assert (board[0].numpy() == raw["observation"]).all(), "the board as the game has it"
    assert board[0, 4, 3].tolist() == [1.0, 0.0], "its own piece on the other seat's"
    assert board[0, 5, 3].tolist() == board[0, 5, 4].tolist() == [0.0, 1.0]

    cfg = config_for(CONNECT_FOUR)  # the family's table, with self_play's over it
    assert (cfg.preset, cfg.algo) == ("pettingzoo", "appo")
    conv = model_spec(cfg, spaces)
    assert conv.grid == (6, 7, 2) and not (conv.normalize_obs or conv.separate)
    flat = model_spec(config_for(CONNECT_FOUR, policy="mlp"), spaces)
    assert flat.grid == () and flat.build().encoder is None
    assert flat.separate, "[self_play]'s separate nets where an MLP reads the board"
    with pytest.raises(UsageError, match="one shared conv net"):
        config_for(CONNECT_FOUR, separate_networks=True)
    model = conv.build()
    assert model.first_conv is not None
    assert ModelSpec.from_dict(conv.to_dict()) == conv, "checkpoints keep the board"
    x = torch.as_tensor(row[None])
    moved = x.clone()
    moved[0, :84] = x[0, :84].reshape(6, 7, 2).flip(1).reshape(-1)  # the board mirrored
    with torch.no_grad():
        assert not torch.equal(model(x)[1], model(moved)[1]), "the value reads the board"
    with pytest.raises(ValueError, match="grid"):
        ModelSpec((91,), {"type": "discrete", "n": 7}, action_mask=True, grid=(6, 7, 3)).check()


def test_a_board_of_boolean_planes_is_numbers_in_front_of_its_mask():
    go = "pettingzoo.classic.go_v5:env"  # 17 boolean planes a point, 26 moves (pass last)
    spaces = env_spaces(go, board_size=5)
    assert spaces.action_mask and spaces.obs_shape == (5 * 5 * 17 + 26,)
    assert spaces.obs_dtype == "float32" and spaces.grid == (5, 5, 17), "planes last, as laid"
    envs = make_vector_env(go, 1, seed=0, board_size=5)
    try:
        obs, _ = envs.reset(seed=0)
        assert set(np.unique(obs[0, :-26])) <= {0.0, 1.0}
        assert obs[0, -26:].all(), "every point and the pass are legal on an empty board"
        assert not obs[1, -26:].any(), "the second seat waits"
    finally:
        envs.close()


def test_masked_actions_are_never_sampled():
    spec = ModelSpec((84 + 7,), {"type": "discrete", "n": 7}, action_mask=True, hidden=(16,))
    torch.manual_seed(0)
    model = spec.build()
    obs = torch.randn(4000, 91)
    legal = torch.rand(4000, 7) < 0.4
    legal[:, 3] = True
    obs[:, -7:] = legal.float()
    with torch.no_grad():
        actions = model.act(obs)
        greedy = model.act(obs, greedy=True)
    assert legal.gather(1, actions.unsqueeze(1)).all()
    assert legal.gather(1, greedy.unsqueeze(1)).all()
    log_p, entropy = model.dist.log_prob_entropy(model.pi(obs), actions)
    assert torch.isfinite(log_p).all() and torch.isfinite(entropy).all()


def test_agents_that_leave_mid_game_leave_rows_no_loss_reads():
    """Agents leave one by one (agent_i at step i + 2): each row acts until its agent's
    own end, then idles with no reward and no advantage until the game restarts; every
    agent's episode is counted once, its return its own."""
    envs = make_vector_env("agent_envs:leavers", 1, seed=0)
    spec = ModelSpec((2,), {"type": "discrete", "n": 2}, hidden=(8,))
    torch.manual_seed(0)
    collector = Collector(envs, spec.build(), 8, seed=0)
    try:
        rollout = collector.collect()
    finally:
        envs.close()
    assert rollout.acted is not None
    acted = rollout.acted.T.tolist()  # per agent, over the 8 steps (games of 4 steps)
    assert acted == [[True, True, False, False] * 2,
                     [True, True, True, False] * 2,
                     [True] * 8]  # fmt: skip
    assert rollout.dones.T.tolist() == [[False, True, False, False] * 2,
                                        [False, False, True, False] * 2,
                                        [False, False, False, True] * 2]  # fmt: skip
    assert (rollout.rewards[~rollout.acted] == 0).all()
    values = torch.randn(8, 3)
    adv = gae(rollout.rewards, values, torch.zeros(8, 3), rollout.terminated, rollout.dones,
              acted=rollout.acted)[0]  # fmt: skip
    assert (adv[~rollout.acted] == 0).all()
    actions = rollout.actions.float()
    played = [  # (return, length, agent)
        (float(actions[g * 4 : g * 4 + i + 2, i].sum()), i + 2, i)
        for g in (0, 1)
        for i in (0, 1, 2)
    ]
    assert collector.take_episodes() == played, "each agent's own return and length, once"


def test_agents_with_different_spaces_are_one_line():
    with pytest.raises(UsageError, match="different spaces.*--agent-groups prefix"):
        env_spaces(SPEAKER_LISTENER)


def test_groups_by_name_prefix_each_learn_a_policy_of_their_own():
    """speaker_0 (3 observations, 3 actions) and listener_0 (11, 5): one row layout, a net
    per group; a speaker never draws the listener's extra actions, and a speaker's loss
    moves the speaker's net alone."""
    from a3c.policy.grouped import GroupedActorCritic

    spaces = env_spaces(SPEAKER_LISTENER, agent_groups="prefix")
    assert spaces.groups == ((3, 3), (11, 5)) and spaces.action_mask
    assert spaces.obs_shape == (1 + 3 + 11 + 5,)
    spec = ModelSpec(spaces.obs_shape, spaces.action, action_mask=True, groups=spaces.groups,
                     normalize_obs=True, hidden=(16,))  # fmt: skip
    model = spec.build()
    assert isinstance(model, GroupedActorCritic)
    assert ModelSpec.from_dict(spec.to_dict()) == spec
    envs = make_vector_env(SPEAKER_LISTENER, 4, seed=0, agent_groups="prefix")
    try:
        obs, _ = envs.reset(seed=0)
        assert obs[:, 0].tolist() == [0, 1] * 4, "each row's group first"
        speaker, listener = obs[0], obs[1]
        assert not speaker[4:15].any() and speaker[-5:].tolist() == [1, 1, 1, 0, 0]
        assert not listener[1:4].any() and listener[-5:].tolist() == [1] * 5
        x = torch.as_tensor(obs)
        torch.manual_seed(0)
        drawn = torch.stack([model.act(x) for _ in range(500)])
        assert drawn[:, 0::2].max() == 2 and drawn[:, 1::2].max() == 4
        envs.step(model.dist.to_env(model.act(x)))
    finally:
        envs.close()
    pi, value = model(x)
    value[0::2].sum().backward()
    moved = {name.split(".")[1] for name, p in model.named_parameters() if p.grad.abs().sum()}
    assert moved == {"0"}, "the speakers' values reach the speaker's net alone"


@pytest.fixture(scope="module")
def spread_run(tmp_path_factory):
    """``a3c.train --env SPREAD --env-kwargs N=2,max_cycles=25`` with its preset, 2 workers,
    100k steps (a step budget: 40 s trained fewer steps on a busier machine), and random
    play's per-agent return in the same harness."""
    from a3c.api import config_for
    from a3c.scoring import play_games

    pytest.importorskip("pettingzoo", reason=EXTRA)
    pytest.importorskip("mpe2", reason=EXTRA)
    kwargs = {"N": 2, "max_cycles": 25}
    # Seed 1: the 100-episode mean -15.5 at 60k steps, -12.8 at 194k (random -20.5). An
    # evaluation a second: alone on 2 free cores the run took ~5 s and ended before a 5 s
    # interval's first, leaving no best.pt.
    cfg = config_for(SPREAD, workers=2, total_steps=100_000, seed=1, eval_interval=1.0,
                     eval_episodes=5, env_kwargs=kwargs,
                     logdir=str(tmp_path_factory.mktemp("runs")))  # fmt: skip
    result = train(cfg)
    spec = ModelSpec((12,), {"type": "discrete", "n": 5}, hidden=cfg.hidden)
    torch.manual_seed(0)
    random_play = play_games(spec.build(), SPREAD, 50, 0, greedy=False, env_kwargs=kwargs)
    return cfg, result, float(random_play.returns.mean())


@pytest.mark.slow
def test_cooperative_agents_learn_simple_spread(spread_run):
    """Random play's per-agent return is about -20.5; the run's 100-episode mean ends
    well above it."""
    _, result, random_return = spread_run
    assert result.exit_code == 0
    assert result.mean_return_100 > random_return + 3, (result.mean_return_100, random_return)
    scalars = scalar_points(result.run_dir)
    team = [v for _, v in scalars["charts/team_return"]]
    agent = [v for _, v in scalars["charts/episodic_return"]]
    assert team[-1] == pytest.approx(2 * agent[-1], rel=0.01), "a game's return: both agents'"
    each = [v for _, v in scalars["agents/agent_0_return"]]
    assert len(each) == len(agent) and "agents/agent_1_return" in scalars, "each agent's"
    assert scalars["charts/illegal_moves"], "logged with the games"
    assert all(v == 0 for _, v in scalars["charts/illegal_moves"])


@pytest.mark.slow
def test_a_policy_of_many_agents_evaluates_predicts_and_resumes(spread_run, capsys):
    """best.pt: a3c.evaluate plays whole games; Policy.predict takes the env's own dict of
    agents' observations and gives each agent an action; the run resumes."""
    from mpe2 import simple_spread_v3

    from a3c.api import Policy
    from a3c.evaluate import main as evaluate_main
    from a3c.train import main as train_main

    cfg, result, _ = spread_run
    best = result.run_dir / "best.pt"
    assert best.is_file()
    assert evaluate_main([str(best), "--episodes", "3"]) == 0
    out = capsys.readouterr().out
    assert "greedy return" in out and "per agent: agent_0" in out and "team return" in out

    policy = Policy.load(best)
    env = simple_spread_v3.parallel_env(N=2, max_cycles=25)
    observations, _ = env.reset(seed=0)
    actions, _ = policy.predict(observations)
    assert set(actions) == set(env.agents)
    assert all(env.action_space(a).contains(int(x)) for a, x in actions.items())
    env.step({a: int(x) for a, x in actions.items()})
    with pytest.raises(UsageError, match="dict of agents"):
        policy.predict(observations["agent_0"])

    extra = 5_000
    checkpoint = str(result.run_dir / "checkpoint.pt")
    total = str(result.env_steps + extra)
    code = train_main(["--workers", "2", "--resume", checkpoint, "--eval-interval", "0",
                       "--total-steps", total])  # fmt: skip
    assert code == 0
    resumed = load_checkpoint(result.run_dir / "checkpoint.pt")
    assert resumed["env_steps"] >= result.env_steps + extra


def test_a_turn_based_game_is_scored_per_seat_against_a_random_player():
    from a3c.scoring import play_games, seat_results

    spec = ModelSpec((91,), {"type": "discrete", "n": 7}, action_mask=True, hidden=(16,))
    torch.manual_seed(0)
    played = play_games(spec.build(), CONNECT_FOUR, 10, 0, greedy=False)
    assert played.seats == ("player_0", "player_1")
    assert set(played.returns.tolist()) <= {-1.0, 0.0, 1.0} and not played.capped.any()
    lines = seat_results(played)
    assert [line.split(":")[0] for line in lines] == ["as player_0", "as player_1"]
    assert all("of 5 games" in line for line in lines)
    assert played.illegal == 0 and played.agent_returns is not None
    assert (played.agent_returns.sum(1) == 0).all(), "one seat's win is the other's loss"


def connect_four_checkpoint(path, seed: int) -> str:
    """An untrained connect four policy saved as a3c.train saves one."""
    torch.manual_seed(seed)
    model = ModelSpec((91,), {"type": "discrete", "n": 7}, action_mask=True, hidden=(16,)).build()
    torch.save({"model": model.state_dict(), "model_spec": model.spec.to_dict(),
                "env_id": CONNECT_FOUR}, path)  # fmt: skip
    return str(path)


def test_evaluate_plays_the_other_seat_with_an_opponent_of_the_users_choice(tmp_path, capsys):
    from a3c.evaluate import main as evaluate_main

    mine = connect_four_checkpoint(tmp_path / "mine.pt", 0)
    other = connect_four_checkpoint(tmp_path / "other.pt", 1)
    for opponent, against in [
        ("random", "a random legal player"),
        ("self", "itself (sampling)"),
        (other, f"{other} (sampling)"),
    ]:
        assert evaluate_main([mine, "--episodes", "6", "--opponent", opponent]) == 0
        out = capsys.readouterr().out
        seats = [line for line in out.splitlines() if line.startswith("as player_")]
        assert len(seats) == 2 and all(f"of 3 games against {against}" in s for s in seats), out
        assert "illegal moves: 0" in out

    cartpole = tmp_path / "cartpole.pt"
    model = ModelSpec((4,), {"type": "discrete", "n": 2}).build()
    torch.save({"model": model.state_dict(), "model_spec": model.spec.to_dict(),
                "env_id": "CartPole-v1"}, cartpole)  # fmt: skip
    for args, words in [
        ([mine, "--opponent", str(cartpole)], "the policy in"),
        ([mine, "--opponent", str(tmp_path / "none.pt")], "not found"),
        ([str(cartpole), "--opponent", "self"], "turn-based PettingZoo games"),
    ]:
        assert evaluate_main(args) == 2, args
        err = capsys.readouterr().err.strip()
        assert words in err and len(err.splitlines()) == 1, err


def test_a_move_the_mask_forbids_is_flagged_and_the_game_judges_it():
    """Six moves fill connect four's first column; a seventh there is illegal: flagged in
    ``info["illegal"]`` for the mover's row alone, and the game's own rule ends it, the
    mover losing."""
    envs = make_vector_env(CONNECT_FOUR, 1, seed=0)
    try:
        envs.reset(seed=0)
        column_0 = np.zeros(2, dtype=np.int64)
        for _ in range(6):
            info = envs.step(column_0)[-1]
            assert not info["illegal"].any()
        _, reward, terminated, _, info = envs.step(column_0)
        assert info["illegal"].tolist() == [True, False]
        assert reward.tolist() == [-1.0, 0.0] and terminated.all() and info["team"] == [-1.0]
    finally:
        envs.close()


def test_an_older_snapshot_plays_one_seat_and_is_not_learned_from():
    """Every game (share 1.0) hands one seat to a snapshot that plays column 3 while the
    policy plays column 0: the snapshot's rows take its moves, are never acted rows, and
    give no episodes; each game counts once, for the policy's seat: the first to move
    completes four in its column first."""
    from a3c.learning.opponents import Opponents

    model = ModelSpec((91,), {"type": "discrete", "n": 7}, action_mask=True, hidden=(16,)).build()
    favour = torch.full((7,), -20.0)
    with torch.no_grad():
        model.head.bias[:7] = favour.index_fill(0, torch.tensor([0]), 20.0)
    snapshots = Opponents(model, share=1.0, agents=2, rows=8, seed=0)
    snapshots.keep()
    with torch.no_grad():
        snapshots.pool[0].head.bias[:7] = favour.index_fill(0, torch.tensor([3]), 20.0)
    envs = make_vector_env(CONNECT_FOUR, 4, seed=0)
    try:
        collector = Collector(envs, model, n_steps=5, seed=0, opponents=snapshots)
        theirs = snapshots.played_by.reshape(4, 2) >= 0
        assert (theirs.sum(1) == 1).all(), "one seat of each game"
        rollout = collector.collect()  # no game ends within 5 moves
        rows = np.flatnonzero(theirs.reshape(-1))
        assert not rollout.acted[:, rows].any()
        for t in range(5):  # player_0 moves at even steps, player_1 at odd ones
            movers = np.arange(t % 2, 8, 2)
            expected = [3 if row in rows else 0 for row in movers]
            assert rollout.actions[t, movers].tolist() == expected
        collector.collect()
        first = theirs[:, 1]  # the policy plays player_0: it wins in 4 moves, else loses in 3
        expected = sorted((1.0, 4, 0) if f else (-1.0, 3, 1) for f in first)
        assert sorted(collector.take_episodes()) == expected
    finally:
        envs.close()


def test_a_random_player_takes_one_seat_of_its_share_of_the_games():
    """--random-games 1.0 without snapshots: one seat of every game moves at random among
    the legal columns while the policy plays column 0; those rows are never acted rows,
    and no snapshot is taken."""
    from a3c.envs.random_player import RandomPlayer
    from a3c.learning.opponents import RANDOM, Opponents

    model = ModelSpec((91,), {"type": "discrete", "n": 7}, action_mask=True, hidden=(16,)).build()
    with torch.no_grad():
        model.head.bias[:7] = torch.full((7,), -20.0).index_fill(0, torch.tensor([0]), 20.0)
    envs = make_vector_env(CONNECT_FOUR, 8, seed=0)
    try:
        opponents = Opponents(
            model, 0.0, agents=2, rows=16, seed=0, randomly=RandomPlayer(envs, 0), random_share=1.0
        )
        collector = Collector(envs, model, n_steps=6, seed=0, opponents=opponents)
        theirs = opponents.played_by.reshape(8, 2) == RANDOM
        assert (theirs.sum(1) == 1).all(), "one seat of each game"
        rollout = collector.collect()  # no column fills and no game ends within 6 moves
        rows = np.flatnonzero(theirs.reshape(-1))
        assert not rollout.acted[:, rows].any()
        moves = {int(rollout.actions[t, r]) for t in range(6) for r in rows if (t + r) % 2 == 0}
        assert len(moves) >= 4, moves  # 24 moves of 7 columns: column 0 alone is 7^-23
        opponents.keep()
        assert not opponents.pool
    finally:
        envs.close()


def test_the_snapshots_kept_are_a_sample_of_the_whole_history():
    """400 snapshots taken, 8 kept: spread over the run, the earliest as likely as the last
    (all 8 from the second half: about 1 chance in 256)."""
    from a3c.learning.opponents import SNAPSHOT_EVERY, SNAPSHOTS_KEPT, Opponents

    model = ModelSpec((3,), {"type": "discrete", "n": 2}, hidden=(4,)).build()
    snapshots = Opponents(model, share=0.5, agents=2, rows=2, seed=0)
    for taken in range(400):
        with torch.no_grad():
            model.head.bias.fill_(taken)  # the snapshot's age, readable in its weights
        for _ in range(SNAPSHOT_EVERY):
            snapshots.keep()
    ages = sorted(int(net.head.bias[0]) for net in snapshots.pool)
    assert snapshots.taken == 400 and len(ages) == len(set(ages)) == SNAPSHOTS_KEPT
    assert ages[0] < 200 and ages[-1] > 200, ages


def test_max_episode_steps_cuts_the_game_for_the_agents_still_in_it():
    envs = make_vector_env("agent_envs:leavers", 1, seed=0, max_episode_steps=2)
    try:
        envs.reset(seed=0)
        _, _, terminated, truncated, info = envs.step(np.ones(3, dtype=np.int64))
        assert not (terminated | truncated).any() and info["team"] == []
        _, _, terminated, truncated, info = envs.step(np.ones(3, dtype=np.int64))
        assert terminated.tolist() == [True, False, False], "agent_0's own end comes first"
        assert truncated.tolist() == [False, True, True]
        assert info["team"] == [6.0] and all(o is not None for o in info["final_obs"])
    finally:
        envs.close()


def test_bad_multiagent_input_is_one_line_and_exit_code_2(tmp_path, capsys):
    from a3c.train import main as train_main

    base = ["--workers", "1", "--total-steps", "100", "--logdir", str(tmp_path)]
    cases = [
        (["--env", "agent_envs:chatty"], "observation space Text"),
        (["--env", "mpe2.simple_speaker_listener_v4:parallel_env"], "different spaces"),
        (["--env", "agent_envs:leavers", "--algo", "ppo", "--workers", "2"], "--algo ppo"),
        (["--env", "CartPole-v1", "--agent-groups", "prefix"], "--agent-groups is for"),
        (["--env", "CartPole-v1", "--snapshot-games", "0.2"], "--snapshot-games is for"),
        (["--env", "CartPole-v1", "--random-games", "0.2"], "--random-games is for"),
        (["--env", SPREAD, "--env-kwargs", "N=0"], "bad arguments for env factory"),  # ValueError
        (["--env", CONNECT_FOUR, "--center-frames"], "connect_four_v3:env's are a board"),
        (["--env", "agent_envs:three_in_a_row", "--env-kwargs", "size=3"], "give its parameters"),
        (
            [
                "--env",
                SPEAKER_LISTENER,
                "--agent-groups",
                "prefix",
                "--env-kwargs",
                "continuous_actions=true",
            ],
            "need Discrete actions",
        ),  # fmt: skip
    ]
    for args, words in cases:
        assert train_main([*base, *args]) == 2, args
        err = capsys.readouterr().err.strip()
        assert words in err and len(err.splitlines()) == 1, err
    assert not any(tmp_path.iterdir()), "nothing written"


def test_a_game_whose_agents_leave_trains_and_evaluates(tmp_path, capsys):
    """Real workers on a game agents leave one by one: it learns that action 1 pays (each
    agent's return is its number of steps, 2 to 4, when it always takes it; random play
    gets half), and a3c.evaluate plays its games."""
    from a3c.api import config_for
    from a3c.evaluate import main as evaluate_main

    cfg = config_for("agent_envs:leavers", workers=2, total_steps=40_000, seed=0,
                     eval_interval=0.0, logdir=str(tmp_path))  # fmt: skip
    result = train(cfg)
    assert result.exit_code == 0
    assert result.mean_return_100 > 2.5, "random play: 1.5 an agent"
    assert evaluate_main([str(result.run_dir / "checkpoint.pt"), "--episodes", "5"]) == 0
    out = capsys.readouterr().out
    assert "greedy return 3.00" in out, out


def test_groups_of_different_spaces_train_evaluate_predict_and_resume(tmp_path, capsys):
    """Real workers on a game of a speaker (3 targets) and a listener (5): each group's own
    policy learns to name its target (4 a game; random play 1.3 and 0.8), a3c.evaluate
    scores each agent, Policy.predict takes both, and the run resumes."""
    from agent_envs import Pairs

    from a3c.api import Policy, config_for
    from a3c.evaluate import main as evaluate_main
    from a3c.train import main as train_main

    cfg = config_for("agent_envs:pairs", workers=2, total_steps=40_000, seed=0,
                     agent_groups="prefix", eval_interval=0.0, logdir=str(tmp_path))  # fmt: skip
    result = train(cfg)
    assert result.exit_code == 0
    assert result.mean_return_100 > 3.5, "random play: about 1 an agent"
    checkpoint = str(result.run_dir / "checkpoint.pt")
    assert evaluate_main([checkpoint, "--episodes", "5"]) == 0
    assert "per agent: speaker_0 4.00, listener_0 4.00" in capsys.readouterr().out

    policy = Policy.load(checkpoint)
    env = Pairs()
    observations, _ = env.reset(seed=3)
    actions, _ = policy.predict(observations)
    assert actions == env.targets
    with pytest.raises(UsageError, match="no agent 'speaker_9'"):
        policy.predict({"speaker_9": observations["speaker_0"]})

    total = str(result.env_steps + 2_000)
    assert train_main(["--resume", checkpoint, "--eval-interval", "0", "--total-steps", total]) == 0
    assert load_checkpoint(checkpoint)["env_steps"] >= result.env_steps + 2_000


def test_a_wrapper_that_fails_on_a_pettingzoo_env_is_one_line():
    with pytest.raises(UsageError, match="wrapper 'user_envs:Positions' failed on PettingZoo"):
        make_vector_env("agent_envs:leavers", 1, seed=0, wrappers=["user_envs:Positions"])


def test_a_game_class_whose_masks_come_in_its_infos_is_a_masked_board():
    """A PettingZoo class that needs arguments (as Shimmy's OpenSpiel games) is a game,
    its infos' masks follow its board in each row, and its planes-first board is read by a
    conv net in that layout."""
    from agent_envs import ThreeInARow

    from a3c.envs.multiagent import agent_spaces
    from a3c.run.presets import config_for
    from a3c.run.shared_model import model_spec

    spaces = env_spaces("agent_envs:ThreeInARow", size=4)
    assert (spaces.obs_shape, spaces.action_mask, spaces.grid) == ((48,), True, (2, 4, 4))
    game = ThreeInARow(4)
    rows = agent_spaces(game, "agent_envs:ThreeInARow")
    for cell in (5, 0):
        game.step(cell)
    raw, mask = game.observe("player_0"), game.infos["player_0"]["action_mask"]
    row = rows.observation("player_0", {"observation": raw, "action_mask": mask})
    assert (row[:32].reshape(2, 4, 4) == raw).all()
    assert row[32:].tolist() == [0, 1, 1, 1, 1, 0] + [1] * 10

    envs = make_vector_env("agent_envs:ThreeInARow", 2, seed=0, size=4)
    obs, _ = envs.reset()
    assert obs[::2, 32:].all() and not obs[1::2, 32:].any(), "the seat to move has 16 cells"
    obs, *_ = envs.step(np.array([5, 0, 6, 0]))
    assert obs[1::2, 32 + 5].tolist() == [0, 1] and obs[1::2, 32:].sum(1).tolist() == [15, 15]
    envs.close()

    spec = model_spec(config_for("agent_envs:ThreeInARow"), spaces)
    assert spec.grid == (2, 4, 4) and not spec.grid_channels_last
    model = spec.build()
    x = torch.as_tensor(row[None])
    moved = x.clone()
    moved[0, :32] = x[0, :32].reshape(2, 4, 4).flip(0).reshape(-1)  # the planes swapped
    with torch.no_grad():
        assert not torch.equal(model(x)[1], model(moved)[1])
    seven = {"type": "discrete", "n": 7}
    assert ModelSpec((91,), seven, action_mask=True, grid=(6, 7, 2)).grid_channels_last, "connect 4"
    assert ModelSpec((432,), seven, action_mask=True, grid=(5, 5, 17)).grid_channels_last, "go"


def test_a_parallel_game_whose_masks_come_in_its_infos_has_them_in_its_rows():
    envs = make_vector_env("agent_envs:MaskedLeavers", 1, seed=0)
    try:
        assert envs.single_observation_space.shape == (4,)
        obs, _ = envs.reset()
        assert obs[:, 2:].tolist() == [[1, 1]] * 3
        obs, *_ = envs.step(np.array([0, 0, 0]))
        assert obs[:, 2:].tolist() == [[1, 0]] * 3, "action 1 forbidden on odd steps"
    finally:
        envs.close()


def test_an_openspiel_game_through_shimmy_is_a_board_scored_per_seat():
    """Shimmy's class takes its game by name, hands masks in infos and has no agents
    before a reset; othello's 3 planes come first."""
    pytest.importorskip("shimmy", reason='needs the openspiel extra: pip install -e ".[openspiel]"')
    pytest.importorskip(
        "pyspiel", reason='needs the openspiel extra: pip install -e ".[openspiel]"'
    )
    from a3c.scoring import play_games, seat_results

    othello, kwargs = "shimmy:OpenSpielCompatibilityV0", {"game_name": "othello"}
    spaces = env_spaces(othello, **kwargs)
    assert (spaces.obs_shape, spaces.action_mask, spaces.grid) == ((257,), True, (3, 8, 8))
    spec = ModelSpec(spaces.obs_shape, spaces.action.to_dict(), action_mask=True, grid=spaces.grid)
    assert not spec.grid_channels_last
    torch.manual_seed(0)
    played = play_games(spec.build(), othello, 4, 0, greedy=False, env_kwargs=kwargs)
    assert played.seats == ("player_0", "player_1") and played.illegal == 0
    assert all("of 2 games" in line for line in seat_results(played))


def test_a_game_with_masks_in_its_infos_learns_both_seats_and_predicts(tmp_path, capsys):
    """Real workers on three in a row (3 x 3) whose moves on a filled cell raise: no illegal
    move is tried, each seat wins well past random play (0.585 as first seat, 0.288 as
    second), and Policy.predict takes the observation and its mask as one dict."""
    from agent_envs import ThreeInARow

    from a3c.api import Policy, config_for
    from a3c.evaluate import main as evaluate_main

    cfg = config_for("agent_envs:ThreeInARow", env_kwargs={"size": 3}, workers=2, seed=0,
                     total_steps=80_000, eval_interval=0.0, logdir=str(tmp_path))  # fmt: skip
    result = train(cfg)
    assert result.exit_code == 0
    saved = json.loads((result.run_dir / "config.json").read_text())
    assert not (saved["separate_networks"] or saved["normalize_obs"]), "the conv net it ran"
    checkpoint = str(result.run_dir / "checkpoint.pt")
    assert evaluate_main([checkpoint, "--episodes", "200"]) == 0
    out = capsys.readouterr().out
    won = [float(line.split("won ")[1].split(",")[0]) for line in out.splitlines() if "won" in line]
    assert won[0] > 0.75 and won[1] > 0.45, out
    assert "illegal moves: 0" in out

    policy = Policy.load(checkpoint)
    game = ThreeInARow(3)
    game.reset(seed=0)
    game.step(4)
    mask = game.infos["player_1"]["action_mask"]
    seen = {"observation": game.observe("player_1"), "action_mask": mask}
    actions, _ = policy.predict({"player_1": seen})
    assert mask[int(actions["player_1"])] == 1


def test_a_game_that_shows_every_seat_the_same_tells_each_row_its_seat(tmp_path, capsys):
    """Doors shows both players the same observation, and each seat wins with another
    door: the rows end in their seat, so one policy learns both (lost 0.5 as one seat or the
    other, before), and Policy.predict and its export play each agent's own door."""
    from a3c.api import Policy, config_for
    from a3c.evaluate import main as evaluate_main

    envs = make_vector_env("agent_envs:Doors", 1, seed=0)
    obs, _ = envs.reset()
    assert obs.tolist() == [[1, 1, 1, 0], [1, 1, 0, 1]], "observation, then the seat"
    envs.close()

    cfg = config_for("agent_envs:Doors", workers=2, seed=0, total_steps=20_000,
                     eval_interval=0.0, logdir=str(tmp_path))  # fmt: skip
    result = train(cfg)
    assert result.exit_code == 0
    checkpoint = str(result.run_dir / "checkpoint.pt")
    assert evaluate_main([checkpoint, "--episodes", "200"]) == 0
    out = capsys.readouterr().out
    lost = [
        float(line.split("lost ")[1].split(" ")[0]) for line in out.splitlines() if "lost" in line
    ]
    assert len(lost) == 2 and max(lost) < 0.1, out

    policy = Policy.load(checkpoint)
    seen = np.ones(2, dtype=np.float32)
    actions, _ = policy.predict({"player_0": seen, "player_1": seen})
    assert {a: int(x) for a, x in actions.items()} == {"player_0": 0, "player_1": 1}
    path = policy.export(tmp_path / "doors.pt2")
    inputs = [i["name"] for i in policy.export_signature()["inputs"]]
    assert inputs == ["obs.observation", "obs.seat"]
    both = {"observation": torch.as_tensor(np.stack([seen, seen])), "seat": torch.tensor([0, 1])}
    assert torch.export.load(str(path)).module()(both).tolist() == [0, 1]
