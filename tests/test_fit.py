"""The supervised trainer from the command line and from Python: a user's own module file
trains, resumes, loads back; every mistake is one line and exit code 2 before training."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import user_models
from tb_helpers import scalar_values
from user_models import make_table_data

from hogwild import EarlyStopping, UsageError, fit, load
from hogwild.checkpoint import load_checkpoint, save_checkpoint
from hogwild.supervised.config import FitConfig
from hogwild.supervised.data import batches
from hogwild.supervised.position import EpochPosition, resume_position, shape_of
from hogwild.train import main

CHANCE = 25.0  # four classes
PER_WORKER = 2000 // 64 + 1  # a worker's steps per epoch: its 2000 samples in 64s


def cli(tmp_path: Path, *extra: str) -> list[str]:
    return [
        "--model", "user_models:make_mlp", "--data", "user_models:make_table_data",
        "--metric", "accuracy", "--workers", "2", "--lr", "0.05",
        "--batch-size", "64", "--logdir", str(tmp_path / "runs"), *extra,
    ]  # fmt: skip


def dense_steps(ck: dict) -> list[list[int]]:
    """Each worker's dense optimizer steps, per parameter group, in a checkpoint."""
    return [[int(g["steps"].sum()) for g in w] for w in ck["optimizers"]["dense"]]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Two epochs through the command, then a resume to three: (first ck, resumed ck, run)."""
    tmp = tmp_path_factory.mktemp("fit")
    settings = tmp / "settings.toml"  # the file's lr is not the flag's (the default): the flag wins
    settings.write_text('epochs = 2\nlr = 0.0001\nmetrics = ["accuracy"]\n')
    assert main([*cli(tmp), "--config", str(settings)]) == 0
    (run,) = (tmp / "runs").iterdir()
    first = load_checkpoint(run / "checkpoint.pt")
    assert main(["--resume", str(run / "checkpoint.pt"), "--epochs", "3"]) == 0
    return first, load_checkpoint(run / "checkpoint.pt"), run


def test_a_users_module_trains_through_the_command_well_past_chance(trained):
    first, _, run = trained
    assert first["epoch"] == 2
    assert first["val_accuracy"] > CHANCE + 50
    assert (run / "best.pt").is_file() and (run / "config.json").is_file()
    values = scalar_values(run)
    assert len(values["val/accuracy"]) == 3  # two epochs, then the resumed third
    assert values["train/loss"][-1] < values["train/loss"][0]


def test_resume_continues_the_epochs_and_the_optimizer_state(trained):
    first, resumed, _ = trained
    assert resumed["epoch"] == 3 and len(resumed["history"]) == 3
    assert dense_steps(resumed) == [[3 * PER_WORKER], [3 * PER_WORKER]]  # not restarted from zero
    before = first["optimizers"]["dense"][0][0]["state"]["momentum_buffer"]
    after = resumed["optimizers"]["dense"][0][0]["state"]["momentum_buffer"]
    assert before.abs().sum() > 0 and not torch.equal(before, after)
    assert resumed["history"][:2] == first["history"]
    assert resumed["history"][2]["val_loss"] < 0.75 * first["history"][0]["val_loss"]  # no restart
    assert resumed["val_accuracy"] >= first["val_accuracy"] - 3


def stopped_once(marker: Path, monkeypatch, **kw) -> tuple[Any, dict[str, Any]]:
    """The table data and fit's settings for a run that SIGTERMs itself at a worker's 10th
    step, once (``marker`` records that it did), inside its one epoch."""
    monkeypatch.setenv("STOP_ONCE", str(marker))
    train, val = make_table_data()
    settings = dict(
        step=user_models.stopping_step, val_data=val, workers=2,
        epochs=1, logdir=str(marker.parent), **kw,
    )  # fmt: skip
    return train, settings


@pytest.mark.parametrize("strategy", ["hogwild", "ddp"])
def test_a_run_stopped_inside_an_epoch_resumes_where_it_stopped(strategy, tmp_path, monkeypatch):
    marker = tmp_path / "stopped"
    train, settings = stopped_once(marker, monkeypatch, strategy=strategy)
    first = fit(user_models.make_mlp, train, **settings)
    assert marker.is_file() and first.exit_code == 143 and first.epochs_done == 0
    stopped = load_checkpoint(first.checkpoint)
    position = stopped["position"]
    assert position["epoch"] == 0 and 0 < sum(position["done"]) < 2 * PER_WORKER
    if strategy == "hogwild":  # each worker's optimizer stepped once per batch it recorded
        assert dense_steps(stopped) == [[d] for d in position["done"]]
    resumed = fit(user_models.make_mlp, train, resume=str(first.checkpoint), **settings)
    assert resumed.exit_code == 0 and resumed.epochs_done == 1
    # Every sample once: the stopped run's, then only what it had not done.
    assert resumed.samples == resumed.history[0]["samples"] == len(train)
    assert resumed.metrics["loss"] < 0.8  # chance: ln 4 = 1.39; one epoch: ~0.22, ddp ~0.5
    saved = load_checkpoint(resumed.checkpoint)
    assert saved["position"] is None
    if strategy == "hogwild":
        assert dense_steps(saved) == [[PER_WORKER], [PER_WORKER]]


@pytest.mark.parametrize("done", [[PER_WORKER, 0], [0, PER_WORKER]])
def test_a_worker_whose_shard_was_done_takes_no_step_after_a_resume(done, tmp_path, monkeypatch):
    """A stop can come after one worker finished its shard and before the other began (a
    loaded machine): the resumed epoch gives the first nothing, not one empty batch."""
    train, settings = stopped_once(tmp_path / "stopped", monkeypatch)
    first = fit(user_models.make_mlp, train, **settings)
    ck = load_checkpoint(first.checkpoint)
    ck["position"]["done"], ck["position"]["samples"] = done, len(train) // 2
    for worker, steps in zip(ck["optimizers"]["dense"], done, strict=True):
        for group in worker:
            group["steps"] = torch.tensor([steps])
    save_checkpoint(ck, first.checkpoint)
    resumed = fit(user_models.make_mlp, train, resume=str(first.checkpoint), **settings)
    assert resumed.exit_code == 0
    assert dense_steps(load_checkpoint(resumed.checkpoint)) == [[PER_WORKER], [PER_WORKER]]
    assert list(batches(train, torch.arange(0), 64)) == []


def test_a_resume_of_another_shape_redoes_the_stopped_epoch():
    ck = {"epoch": 0, "position": EpochPosition(0, [3, 4], 448, 50.0, 1.0, {}).state()}
    cfg = FitConfig(workers=2, resume="checkpoint.pt")
    ck["position"]["shape"] = shape_of(cfg, 4000)
    assert resume_position(ck, cfg, 4000, print) is not None
    said: list[str] = []
    assert (
        resume_position(ck, FitConfig(workers=3, resume="checkpoint.pt"), 4000, said.append) is None
    )
    assert said == [
        "checkpoint.pt stopped inside epoch 1, but this run's workers differ: "
        "that epoch starts over"
    ]
    ck["position"]["done"] = [3]
    with pytest.raises(UsageError, match="its position inside epoch 1 is damaged"):
        resume_position(ck, cfg, 4000, print)


def test_load_gives_back_the_trained_model(trained):
    _, resumed, run = trained
    model = load(run / "checkpoint.pt")
    _, val = make_table_data()
    x, y = val.tensors
    accuracy = 100.0 * float((model(x).argmax(1) == y).double().mean())
    assert accuracy == pytest.approx(resumed["val_accuracy"], abs=1e-6)
    best = load(run / "best.pt")
    assert 100.0 * float((best(x).argmax(1) == y).double().mean()) == pytest.approx(
        resumed["best"]["value"], abs=1e-6
    )


def test_fit_from_python_returns_the_model_metrics_and_history(tmp_path):
    train, val = make_table_data()
    stops = []

    class StopAfterTwo:
        def on_epoch_end(self, epoch, metrics):
            stops.append((epoch, sorted(metrics)))
            return epoch == 2

    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    result = fit(
        model,
        train,
        torch.nn.functional.cross_entropy,
        val_data=val,
        metrics=["accuracy"],
        callbacks=[StopAfterTwo()],
        workers=2,
        epochs=5,
        logdir=str(tmp_path),
    )
    assert result.exit_code == 0 and result.epochs_done == 2
    assert stops == [(1, ["accuracy", "loss"]), (2, ["accuracy", "loss"])]
    assert result.model is model and result.metrics["accuracy"] > CHANCE + 50
    assert [h["epoch"] for h in result.history] == [1, 2]
    x, y = val.tensors
    assert 100.0 * float((model(x).argmax(1) == y).double().mean()) == pytest.approx(
        result.metrics["accuracy"], abs=1e-6
    )


def test_early_stopping_waits_its_patience_on_the_monitored_score():
    stop = EarlyStopping("loss", patience=2)
    verdicts = [
        stop.on_epoch_end(e, {"loss": v}) for e, v in enumerate([3, 2, 2.5, 1, 1.5, 1.2], 1)
    ]
    assert verdicts == [False, False, False, False, False, True]
    higher = EarlyStopping("accuracy", patience=1)
    assert [higher.on_epoch_end(1, {"accuracy": 50}), higher.on_epoch_end(2, {"accuracy": 40})] == [
        False,
        True,
    ]


BAD = [
    (["--model", "no_such_pkg:make"], "cannot import module 'no_such_pkg'"),
    (["--model", "user_models:make_nothing"], "returned a str, not a torch.nn.Module"),
    (["--data", "user_models:make_wrong_width_data"], "the first training batch does not fit"),
    (
        ["--data", "user_models:make_vector_loss_data", "--loss", "user_models:vector_loss"],
        "the loss must be a floating-point scalar tensor, got (64,)",
    ),
    (["--data", "user_models:make_stream"], "is an IterableDataset"),
    (["--table-optimizer", "rmsprop"], "invalid choice: 'rmsprop'"),  # it has no row update
    (["--workers", "0"], "must be at least 1, got 0"),
    (["--loss", "hinge"], "unknown loss 'hinge'"),
    (["--monitor", "f1"], "--monitor 'f1' is not a scored metric (loss, accuracy)"),
    (["--resume", "nowhere.pt"], "checkpoint not found: nowhere.pt"),
    (["--config", "nowhere.toml"], "cannot read config file nowhere.toml"),
]


@pytest.mark.parametrize(("flags", "message"), BAD, ids=[m for _, m in BAD])
def test_bad_input_is_one_line_and_exit_2_before_training(tmp_path, capsys, flags, message):
    try:
        code = main([*cli(tmp_path), *flags])
    except SystemExit as e:  # argparse's own refusals (a flag's choices) exit
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_damaged_checkpoint_is_refused_in_one_line(tmp_path, capsys):
    bad = tmp_path / "checkpoint.pt"
    bad.write_bytes(b"not a checkpoint")
    assert main([*cli(tmp_path), "--resume", str(bad)]) == 2
    assert "not a readable checkpoint" in capsys.readouterr().err
    with pytest.raises(UsageError, match="not a readable checkpoint"):
        load(bad)


def test_help_lists_every_setting_with_its_default(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    flags = "--model --data --loss --step --metric --strategy --buffers --early-stop --target"
    for flag in [*flags.split(), "--grad-accum", "--amp", "--resume", "--config"]:
        assert flag in out


def test_a_config_file_with_an_unknown_setting_is_one_line(tmp_path, capsys):
    settings = tmp_path / "settings.toml"
    settings.write_text("epochz = 2\n")
    assert main([*cli(tmp_path), "--config", str(settings)]) == 2
    assert "unknown setting 'epochz'; did you mean 'epochs'?" in capsys.readouterr().err
