"""Settings declared once: flags, presets, config files and the Python API share one check."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from tb_helpers import scalar_points

from a3c.actions import DiscreteActions
from a3c.envs.spaces import EnvSpaces
from a3c.learning.algorithms import ALGORITHMS
from a3c.run.cli import build_parser, config_from_args
from a3c.run.config import A3CConfig
from a3c.run.presets import config_for, load_presets, preset_names, resolve_preset
from a3c.run.shared_model import model_spec
from a3c.run.trainer import train
from a3c.train import main as train_main
from hogwild.errors import UsageError


def parse(*argv: str) -> A3CConfig:
    return config_from_args(build_parser().parse_args(list(argv)))


def test_every_field_is_a_flag_with_its_default_in_the_help():
    text = build_parser().format_help()
    for f in dataclasses.fields(A3CConfig):
        if not f.metadata["rule"].flag:  # recorded: the preset (--preset), a resume's decay
            continue
        assert "--" + f.name.replace("_", "-") in text, f.name


def test_packaged_presets_are_valid_and_cover_the_suite():
    presets = load_presets()
    for env in ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "LunarLander-v3", "default"):
        assert env in presets
    assert resolve_preset("Acrobot-v1")[0] == "Acrobot-v1"
    assert resolve_preset("Taxi-v3")[0] == "default"
    assert resolve_preset("Acrobot-v1", "none") == (None, {})
    # Every table names its algorithm or leaves A3C, the default; each choice is measured
    # side by side (docs/benchmarks.md).
    chosen = {env: resolve_preset(env)[1].get("algo", "a3c") for env in presets}
    assert chosen["Pendulum-v1"] == chosen["LunarLander-v3"] == "appo"
    assert chosen["mujoco"] == chosen["atari"] == "appo"
    assert chosen["CartPole-v1"] == "a3c"
    # Pong: no table of its own; the family's APPO settings, measured on it; --algo a3c
    # gets A3C's own (its longer decay) instead.
    assert "PongNoFrameskip-v4" not in presets
    _, pong = resolve_preset("PongNoFrameskip-v4")
    assert pong["lr"] == 1.25e-3 and pong["total_steps"] == 3_000_000 and pong["conv"] == "a3c"
    assert pong["lr_warmup_steps"] == 100_000
    assert (pong["minibatches"], pong["optimizer_eps"]) == (4, 1e-5)
    a3c = config_for("PongNoFrameskip-v4", algo="a3c")
    assert (a3c.algo, a3c.lr_schedule, a3c.total_steps) == ("a3c", "linear", 6_000_000)
    assert (a3c.optimizer, a3c.lr, a3c.envs_per_worker) == ("rmsprop", 7e-4, 8)
    # Hopper: PPO's 2,048 samples per rollout, as 4 envs x 512 steps (1.5x the steps/s),
    # and a horizon between PPO's (0.99: falls) and RL-Zoo's (0.999: standing still).
    hopper = config_for("Hopper-v5")
    assert (hopper.envs_per_worker, hopper.n_steps, hopper.minibatches) == (4, 512, 32)
    assert (hopper.gamma, hopper.gae_lambda) == (0.995, 0.95)
    # The whole family stops a worker's epochs past its KL (Ant, Humanoid: 3-10x the others').
    assert config_for("Ant-v5").target_kl == hopper.target_kl == 0.03
    # ... and starts its Gaussian at std e^-0.5 (at std 1, Ant's control cost beats living).
    assert config_for("Ant-v5").log_std_init == hopper.log_std_init == -0.5
    assert config_for("Ant-v5", algo="a3c").log_std_init == 0.0  # measured with APPO only


@pytest.mark.parametrize(
    "env, family",
    [("ALE/Qbert-v5", "atari"), ("Walker2d-v5", "mujoco"), ("MinAtar/Asterix-v1", "minatar")],
)
def test_an_env_in_no_table_gets_its_familys_settings(env, family):
    assert env not in load_presets()
    cfg = config_for(env)
    name, settings = resolve_preset(family)
    assert cfg.preset == family  # what config.json records
    assert {k: getattr(cfg, k) for k in settings} == {
        k: tuple(v) if isinstance(v, list) else v for k, v in settings.items()
    }


def test_a_game_one_policy_plays_against_itself_gets_the_self_play_table():
    pytest.importorskip(
        "pettingzoo", reason='needs the pettingzoo extra: pip install -e ".[pettingzoo]"'
    )
    pytest.importorskip("mpe2", reason='needs the pettingzoo extra: pip install -e ".[pettingzoo]"')
    presets = load_presets()
    family, own = presets["pettingzoo"], presets["self_play"]
    assert own["entropy_coef"] != family["entropy_coef"]
    for env, kwargs in [
        ("pettingzoo.classic.tictactoe_v3:env", {}),
        ("pettingzoo.classic.connect_four_v3:env", {}),
        ("pettingzoo.classic.go_v5:env", {"env_kwargs": {"board_size": 5}}),
    ]:
        cfg = config_for(env, **kwargs)
        assert (cfg.preset, preset_names(cfg)) == ("pettingzoo", "pettingzoo + self_play")
        assert (cfg.entropy_coef, cfg.eval_episodes, cfg.eval_interval, cfg.gamma) == (
            own["entropy_coef"],
            own["eval_episodes"],
            own["eval_interval"],
            family["gamma"],
        )
        assert (cfg.lr_schedule, cfg.total_steps) == ("linear", own["total_steps"])
    # A cooperative turn-based game and a parallel one are a team's: the family's alone.
    for env in ("mpe2.simple_spread_v3:env", "mpe2.simple_spread_v3:parallel_env"):
        cfg = config_for(env)
        assert (preset_names(cfg), cfg.entropy_coef) == ("pettingzoo", family["entropy_coef"])
    ttt = "pettingzoo.classic.tictactoe_v3:env"
    assert config_for(ttt, entropy_coef=0.02).entropy_coef == 0.02, "a flag still wins"
    assert config_for(ttt, preset="self_play").n_steps == family["n_steps"], "on its family"
    assert preset_names(config_for(ttt, preset="none")) == "none"
    # A game read as vectors runs twice the steps in the same time: a budget of its own.
    vectors = presets["self_play_vectors"]
    for env in ("pettingzoo.classic.rps_v2:env", "agent_envs:Doors"):
        cfg = config_for(env)
        names = "pettingzoo + self_play + self_play_vectors"
        assert (preset_names(cfg), cfg.total_steps) == (names, vectors["total_steps"]), env
        assert cfg.entropy_coef == own["entropy_coef"]
    assert config_for("agent_envs:Doors", preset="self_play").total_steps == vectors["total_steps"]
    assert vectors["total_steps"] > own["total_steps"]


def test_rollouts_shrink_with_workers_past_the_count_they_were_chosen_at(tmp_path, capsys):
    from a3c.run.worker import learner_settings, worker_rate, worker_rollout

    def shape(**kw) -> tuple[int, int, float | None]:
        kw = {"algo": "appo", "target_kl": 0.03, **kw}
        return tuple(
            worker_rollout(A3CConfig(env="CartPole-v1", n_steps=512, minibatches=32, **kw))
        )

    assert shape(workers=8) == (512, 32, 0.03), "no --rollout-workers: as given"
    # A quarter (minibatches of 64 still), and the KL cap x 4.
    assert shape(workers=8, rollout_workers=2) == pytest.approx((128, 8, 0.12))
    assert shape(workers=8, rollout_workers=2, target_kl=None) == (128, 8, None)
    assert shape(workers=3, rollout_workers=2) == pytest.approx((341, 21, 0.045))
    assert shape(workers=64, rollout_workers=2)[:2] == (16, 1)
    assert shape(workers=2, rollout_workers=2) == shape(workers=1, rollout_workers=2)
    assert shape(workers=2, rollout_workers=2) == (512, 32, 0.03)
    assert shape(workers=8, rollout_workers=2, algo="ppo") == (512, 32, 0.03), "one learner"
    hopper = worker_rollout(config_for("Hopper-v5", workers=8))
    assert hopper == pytest.approx((128, 8, 0.12)), "[mujoco]"
    # At half the rate 4 Hopper starts of 8 stood still near 1,050 (issue 69).
    assert worker_rate(config_for("Hopper-v5", workers=8)) == 3e-4, "[mujoco]: the rate whole"
    assert worker_rate(config_for("Hopper-v5", workers=2)) == 3e-4
    assert worker_rate(config_for("PongNoFrameskip-v4", workers=8)) == pytest.approx(1.25e-3 / 2)
    settings = learner_settings(
        A3CConfig(env="CartPole-v1", algo="appo", workers=8, rollout_workers=2, n_steps=512,
                  minibatches=32, envs_per_worker=4, target_kl=0.03)
    )  # fmt: skip
    assert (settings.rollout_samples, settings.minibatches) == (128 * 4, 8)
    assert settings.target_kl == pytest.approx(0.12)
    with pytest.raises(UsageError):
        config_from_args(build_parser().parse_args(["--rollout-workers", "0"]))
    cfg = config_for(
        "CartPole-v1", algo="appo", workers=4, rollout_workers=2, n_steps=64, minibatches=4,
        total_steps=2_000, eval_interval=0, logdir=str(tmp_path), seed=1,
    )  # fmt: skip
    result = train(cfg)
    assert result.exit_code == 0
    out = capsys.readouterr().err
    assert "rollouts of 32 steps in 2 minibatches: --n-steps 64, --minibatches 4" in out, out
    tags = scalar_points(result.run_dir)  # the lag those rollouts keep down, logged
    lag_max = max(v for _, v in tags["charts/policy_lag_max"])
    assert 0 < max(v for _, v in tags["charts/policy_lag"]) <= lag_max, lag_max


def test_atari_appo_runs_on_every_core_at_a_rate_scaled_from_two_workers():
    from a3c.run.worker import worker_rate

    cfg = config_for("ALE/Qbert-v5")
    assert cfg.workers == A3CConfig().workers and cfg.center_frames and cfg.lr_workers == 2
    frames = EnvSpaces((4, 84, 84), "uint8", DiscreteActions(6))
    assert model_spec(cfg, frames).center_frames == "background"  # not the mean: see encoders
    assert worker_rate(config_for("ALE/Qbert-v5", workers=2)) == cfg.lr
    assert worker_rate(config_for("ALE/Qbert-v5", workers=8)) == pytest.approx(cfg.lr / 2)


def test_a_run_with_other_workers_than_its_preset_was_measured_with_says_so(
    tmp_path, monkeypatch, capsys
):
    presets = {**load_presets(), "CartPole-v1": {"workers": 1}}
    monkeypatch.setattr("a3c.run.presets.load_presets", lambda: presets)
    for workers in (1, 2):
        cfg = config_for(
            "CartPole-v1", workers=workers, total_steps=2_000, eval_interval=0,
            logdir=str(tmp_path / str(workers)),
        )  # fmt: skip
        assert train(cfg).exit_code == 0
        out = capsys.readouterr()
        warned = "warning: preset CartPole-v1 was measured with 1 workers, not 2" in out.err
        assert warned == (workers == 2), out.err
        assert f"CartPole-v1: preset CartPole-v1, a3c, {workers} workers x 8 envs" in out.err


def test_a_games_own_settings_beat_its_familys_algorithm_table(monkeypatch):
    presets = {
        "default": {},
        "mujoco": {"algo": "appo", "lr": 3e-4, "appo": {"gamma": 0.995, "n_steps": 512}},
        "HalfCheetah-v5": {"gamma": 0.98, "appo": {"lr": 2e-5}},
    }
    monkeypatch.setattr("a3c.run.presets.load_presets", lambda: presets)
    assert resolve_preset("HalfCheetah-v5") == (
        "HalfCheetah-v5",
        {"algo": "appo", "lr": 2e-5, "gamma": 0.98, "n_steps": 512},
    )
    assert resolve_preset("Walker2d-v5")[1] == {
        "algo": "appo",
        "lr": 3e-4,
        "gamma": 0.995,
        "n_steps": 512,
    }


def test_a_games_table_is_laid_over_its_familys(monkeypatch):
    presets = {
        "default": {},
        "atari": {"conv": "a3c", "lr": 7e-4},
        "PongNoFrameskip-v4": {"lr": 1e-3},
    }
    monkeypatch.setattr("a3c.run.presets.load_presets", lambda: presets)
    assert resolve_preset("PongNoFrameskip-v4") == (
        "PongNoFrameskip-v4",
        {"conv": "a3c", "lr": 1e-3},
    )
    assert resolve_preset("ALE/Breakout-v5") == ("atari", {"conv": "a3c", "lr": 7e-4})
    # Named explicitly for another env, the game's table still brings its family's.
    assert resolve_preset("CartPole-v1", "PongNoFrameskip-v4")[1]["conv"] == "a3c"


def test_precedence_defaults_preset_file_flags(tmp_path, monkeypatch):
    presets = {"default": {}, "Acrobot-v1": {"lr": 1e-3, "n_steps": 7, "gamma": 0.97}}
    monkeypatch.setattr("a3c.run.presets.load_presets", lambda: presets)
    file = tmp_path / "my.toml"
    file.write_text('env = "Acrobot-v1"\nn_steps = 9\ngamma = 0.95\nhidden = [32, 16]\n')

    cfg = parse("--config", str(file), "--gamma", "0.9")
    assert cfg.preset == "Acrobot-v1"
    assert cfg.lr == 1e-3  # preset over default
    assert cfg.n_steps == 9  # file over preset
    assert cfg.gamma == 0.9  # flag over file
    assert cfg.hidden == (32, 16)
    assert cfg.entropy_coef == A3CConfig().entropy_coef  # untouched default

    none = parse("--config", str(file), "--preset", "none")
    assert none.preset is None and none.lr == A3CConfig().lr and none.n_steps == 9

    # The Python API lays keyword arguments over the same layers.
    api = config_for("Acrobot-v1", n_steps=3)
    assert (api.lr, api.n_steps, api.gamma) == (1e-3, 3, 0.97)


def test_config_json_records_what_the_run_used(tmp_path, monkeypatch):
    presets = {"default": {}, "CartPole-v1": {"n_steps": 6}}
    monkeypatch.setattr("a3c.run.presets.load_presets", lambda: presets)
    file = tmp_path / "my.toml"
    file.write_text("gamma = 0.95\n")
    code = train_main(
        [
            "--config",
            str(file),
            "--lr",
            "0.002",
            "--workers",
            "1",
            "--total-steps",
            "400",
            "--eval-interval",
            "0",
            "--logdir",
            str(tmp_path / "runs"),
        ]
    )
    assert code == 0
    (run,) = (tmp_path / "runs").iterdir()
    saved = json.loads((run / "config.json").read_text())
    assert saved["preset"] == "CartPole-v1"
    assert (saved["n_steps"], saved["gamma"], saved["lr"]) == (6, 0.95, 0.002)


@pytest.mark.parametrize(
    "text, message",
    [
        ("lrr = 0.1\n", "unknown setting 'lrr'"),
        ('lr = "fast"\n', "lr must be float"),
        ("workers = 2.5\n", "workers must be int"),
        ("normalize_reward = 1\n", "normalize_reward must be true or false"),
        ("hidden = [64, 0]\n", "hidden (--hidden) must be at least 1"),
        ("entropy_coef = -0.1\n", "entropy_coef (--entropy-coef) must be at least 0"),
        ("lr = [\n", "is not valid TOML"),
    ],
)
def test_bad_config_file_is_one_line_and_exit_2(tmp_path, capsys, text, message):
    file = tmp_path / "bad.toml"
    file.write_text(text)
    assert train_main(["--config", str(file), "--logdir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not list(tmp_path.glob("*/config.json"))


def test_bad_preset_entry_names_the_key():
    with pytest.raises(UsageError, match="preset 'X-v0': unknown setting 'bogus'"):
        load_presets('["X-v0"]\nbogus = 1\n')
    with pytest.raises(UsageError, match="preset 'X-v0': gamma must be float"):
        load_presets('["X-v0"]\ngamma = "high"\n')


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"entropy_coef": -1.0}, "entropy_coef"),
        ({"gamma": 1.5}, "gamma"),
        ({"lr": 0.0}, "lr"),
        ({"optimizer": "lbfgs"}, "optimizer"),
        ({"workers": 0}, "workers"),
        ({"max_grad_norm": float("nan")}, "max_grad_norm"),
        ({"snapshot_games": 0.6, "random_games": 0.5}, "at most 1 together"),
    ],
)
def test_python_api_gets_the_same_checks(kwargs, message):
    with pytest.raises(UsageError, match=message):
        A3CConfig(**kwargs)


def test_bool_flags_turn_preset_values_off(monkeypatch):
    presets = {"default": {}, "CartPole-v1": {"normalize_reward": True}}
    monkeypatch.setattr("a3c.run.presets.load_presets", lambda: presets)
    assert parse("--no-normalize-reward").normalize_reward is False
    assert parse().normalize_reward is True


def test_unknown_preset_is_one_line(capsys, tmp_path):
    assert train_main(["--preset", "Nope-v0", "--logdir", str(tmp_path)]) == 2
    assert "unknown preset 'Nope-v0'" in capsys.readouterr().err


def test_presets_file_ships_with_the_package():
    import a3c.run

    assert (Path(a3c.run.__file__).parent / "presets.toml").is_file()


def test_resume_takes_the_runs_own_settings(tmp_path):
    code = train_main(
        ["--env", "Acrobot-v1", "--preset", "none", "--hidden", "32", "--gamma", "0.9"]
        + ["--workers", "1", "--total-steps", "400", "--eval-interval", "0"]
        + ["--logdir", str(tmp_path)]
    )
    assert code == 0
    (ckpt,) = tmp_path.glob("*/checkpoint.pt")
    # No preset, no defaults: the run continues as it was, flags still on top.
    cfg = parse("--resume", str(ckpt), "--total-steps", "800")
    assert (cfg.env, cfg.hidden, cfg.gamma, cfg.preset) == ("Acrobot-v1", (32,), 0.9, None)
    assert cfg.total_steps == 800 and cfg.resume == str(ckpt)
    with pytest.raises(UsageError, match="checkpoint not found"):
        parse("--resume", str(tmp_path / "nope.pt"))


def test_env_kwargs_from_a_flag_a_file_and_the_api(tmp_path):
    cfg = parse("--env-kwargs", "screen_size=42, repeat_action_probability=0.0,mode=hard")
    assert cfg.env_kwargs == {"screen_size": 42, "repeat_action_probability": 0.0, "mode": "hard"}
    assert parse().env_kwargs == {} and parse("--env-kwargs", "none").env_kwargs == {}
    file = tmp_path / "my.toml"
    file.write_text("env_kwargs = { max_episode_steps = 50 }\n")
    assert parse("--config", str(file)).env_kwargs == {"max_episode_steps": 50}
    assert A3CConfig(env_kwargs={"max_episode_steps": 50}).env_kwargs == {"max_episode_steps": 50}
    with pytest.raises(UsageError, match="env_kwargs .* must be a table"):
        A3CConfig(env_kwargs=[1, 2])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--env-kwargs", "screen_size"], "expected KEY=VALUE pairs"),
        (["--env-kwargs", "bogus=1"], "unexpected keyword argument 'bogus'"),
        (["--env", "ALE/Pong-v5", "--env-kwargs", "frame_stack=0"], "frame_stack must be"),
        (["--env", "ALE/Pong-v5", "--env-kwargs", "clip_rewards=maybe"], "must be bool"),
        (["--env-kwargs", "max_episode_steps=abc"], "max_episode_steps` to be an integer"),
    ],
)
def test_bad_env_kwargs_are_one_line_and_exit_2(tmp_path, capsys, argv, message):
    if "ALE/Pong-v5" in argv:
        pytest.importorskip("ale_py", reason="needs the atari extra")
    try:
        code = train_main([*argv, "--logdir", str(tmp_path)])
    except SystemExit as e:  # a flag argparse refuses
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not list(tmp_path.glob("*/config.json"))


def test_a_preset_names_its_algorithm_and_keeps_each_algorithms_settings():
    name, values = resolve_preset("Pendulum-v1")
    assert name == "Pendulum-v1" and values["algo"] == "appo" and values["epochs"] == 8
    assert values["gamma"] == 0.98  # the algorithm's table over the env's own settings
    _, a3c = resolve_preset("Pendulum-v1", algo="a3c")
    assert a3c["gamma"] == 0.9 and "epochs" not in a3c and "n_steps" not in a3c
    # --algo a3c on the command line: A3C with the settings measured for it.
    cfg = config_for("Pendulum-v1", algo="a3c")
    assert cfg.algo == "a3c" and cfg.n_steps == A3CConfig.n_steps and cfg.gamma == 0.9
    assert config_for("Pendulum-v1").algo == "appo"
    with pytest.raises(UsageError, match="'algo' cannot be set here"):
        load_presets('["X-v0"]\nalgo = "a3c"\n["X-v0".appo]\nalgo = "a3c"\n')
    with pytest.raises(UsageError, match="X-v0'.appo: unknown setting 'bogus'"):
        load_presets('["X-v0"]\n["X-v0".appo]\nbogus = 1\n')


def test_an_algorithm_brings_its_own_defaults_under_presets_files_and_flags(tmp_path):
    """APPO on an env with no APPO table once took A3C's 5-step rollouts: CartPole-v1
    unsolved after 60 s (best 441, falling to 267), where 32 steps solve it in ~6 s."""
    for algo in ALGORITHMS.values():
        assert set(algo.defaults) <= {f.name for f in dataclasses.fields(A3CConfig)}, algo.name
    own = ALGORITHMS["appo"].defaults["n_steps"]
    assert own != A3CConfig.n_steps
    for env in ("CartPole-v1", "Acrobot-v1", "MountainCar-v0"):  # no APPO table of their own
        assert config_for(env, algo="appo").n_steps == own, env
        assert config_for(env).n_steps == A3CConfig.n_steps  # A3C keeps the paper's 5
    assert config_for("CartPole-v1", preset=None, algo="ppo").n_steps == own
    assert config_for("LunarLander-v3").n_steps == 256  # the preset's APPO table
    assert config_for("CartPole-v1", algo="appo", n_steps=7).n_steps == 7
    path = tmp_path / "run.toml"
    path.write_text('algo = "appo"\nn_steps = 9\n')
    assert config_for("Acrobot-v1", config_file=path).n_steps == 9
    assert config_for("Acrobot-v1", config_file=path, n_steps=11).n_steps == 11
    assert parse("--env", "Acrobot-v1", "--algo", "appo").n_steps == own
    assert f"appo: {own}" in build_parser().format_help()


def test_an_lstm_asked_for_overrides_a_presets_separate_networks():
    assert config_for("CartPole-v1").separate_networks is True  # the preset's choice
    assert config_for("CartPole-v1", policy="lstm").separate_networks is False
    # Asked for both: the user's contradiction is refused at the model, in one line.
    cfg = config_for("CartPole-v1", policy="lstm", separate_networks=True)
    assert cfg.separate_networks is True


def test_a_pinned_preset_on_more_cores_points_to_the_decoupled_algorithm(
    tmp_path, monkeypatch, capsys
):
    """A preset that sets the workers its settings were measured at: on a machine with
    more cores the run says which algorithm uses them."""
    presets = {**load_presets(), "CartPole-v1": {"workers": 1}}
    monkeypatch.setattr("a3c.run.presets.load_presets", lambda: presets)
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    for algo in ("a3c", "ppo"):
        cfg = config_for(
            "CartPole-v1", algo=algo, workers=2, total_steps=2_000, eval_interval=0,
            logdir=str(tmp_path / algo),
        )  # fmt: skip
        assert train(cfg).exit_code == 0
        err = capsys.readouterr().err
        noted = "note: 16 cores here, 2 workers: preset CartPole-v1 pins a3c to 1" in err
        assert noted == (algo == "a3c"), err
        assert ("--algo ppo uses every core" in err) == (algo == "a3c"), err


def test_the_rate_scales_with_workers_past_the_count_it_was_chosen_at():
    from a3c.run.worker import worker_rate

    def rate(**kw) -> float:
        return worker_rate(A3CConfig(env="CartPole-v1", lr=1e-3, **kw))

    assert rate(workers=8) == 1e-3, "no --lr-workers: the rate as given"
    assert rate(workers=8, algo="appo", lr_workers=2) == pytest.approx(5e-4)
    assert rate(workers=2, algo="appo", lr_workers=2) == 1e-3
    assert rate(workers=1, algo="appo", lr_workers=2) == 1e-3, "never raised"
    assert rate(workers=8, algo="ppo", lr_workers=2) == 1e-3, "one learner: no lock-free steps"
    with pytest.raises(UsageError):
        config_from_args(build_parser().parse_args(["--lr-workers", "0"]))
