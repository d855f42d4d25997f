"""Unusable places to write are one line and exit code 2; failed mid-run checkpoint writes
are one warning line; the Python API of both apps, run as the README shows it."""

from __future__ import annotations

import errno
import hashlib
import io
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import warm_python
from proc_helpers import CHILD_ENV, folder_state, run_python, wait_until

from a3c.run.config import A3CConfig
from a3c.run.trainer import train as a3c_train
from a3c.train import main as a3c_main
from hogwild.checkpoint import load_checkpoint, save_checkpoint, save_checkpoint_or_warn
from hogwild.errors import UsageError
from hogwild.mnist.cli import main as mnist_main
from hogwild.mnist.config import PROG
from hogwild.mnist.data import MD5, download_mnist
from hogwild.run import RunLoop
from hogwild.rundir import RunDir
from hogwild.supervised import ddp

REPO = Path(__file__).resolve().parents[1]


def one_error_line(proc: subprocess.CompletedProcess, prog: str) -> str:
    """The one line a refused run prints; fails unless that is all it printed to stderr."""
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"{prog}: error: "), lines[0]
    return lines[0]


def refused(main: Callable[[list[str]], int], argv: list[str], capsys, prog: str) -> str:
    """:func:`one_error_line` of a command run in this process (no interpreter to start)."""
    capsys.readouterr()
    done = subprocess.CompletedProcess(argv, main(argv), "", capsys.readouterr().err)
    return one_error_line(done, prog)


def under_a_file(tmp_path: Path) -> Path:
    (tmp_path / "file.txt").write_text("a file, not a folder\n")
    return tmp_path / "file.txt" / "sub"


UNUSABLE: dict[str, Callable[[Path], Path]] = {
    "proc": lambda tmp_path: Path("/proc/nope"),
    "under-a-file": under_a_file,
}


def contents(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


# ----------------------------------------------------------- unusable places, at start


@pytest.mark.parametrize("place", UNUSABLE)
def test_a3c_unusable_logdir_is_one_line_and_leaves_nothing(place, tmp_path, capsys):
    logdir = UNUSABLE[place](tmp_path)
    before = contents(tmp_path)
    argv = ["--env", "Acrobot-v1", "--logdir", str(logdir)]
    line = refused(a3c_main, argv, capsys, "a3c.train")
    assert "cannot create the run folder" in line and str(logdir) in line
    assert contents(tmp_path) == before


@pytest.mark.parametrize("place", UNUSABLE)
@pytest.mark.parametrize("flag", ["--logdir", "--checkpoint", "--data-dir"])
def test_mnist_unusable_places_are_one_line_and_leave_nothing(flag, place, tmp_path, capsys):
    bad = UNUSABLE[place](tmp_path)
    args = {
        "--logdir": str(tmp_path / "runs"),
        "--data-dir": str(tmp_path / "no-mnist-here"),  # missing files: a download is needed
    }
    args[flag] = str(bad / "ck.pt" if flag == "--checkpoint" else bad)
    before = contents(tmp_path)
    flat = [x for kv in args.items() for x in kv]
    line = refused(mnist_main, [*flat, "--workers", "1"], capsys, "hogwild-mnist")
    assert str(bad) in line
    # Paths are checked first: no download was tried (its message would be a second
    # line), no run folder left half-made.
    assert contents(tmp_path) == before


def test_mnist_existing_but_unwritable_data_dir_is_refused_before_any_download(tmp_path, capsys):
    # /proc exists but takes no new files, even from root (chmod does not stop root).
    argv = ["--data-dir", "/proc", "--logdir", str(tmp_path)]
    line = refused(mnist_main, argv, capsys, "hogwild-mnist")
    assert "cannot write in the MNIST data folder /proc" in line
    assert "--data-dir" in line  # says what to do about it
    assert not any(tmp_path.iterdir())


def test_mnist_download_into_a_folder_that_vanishes_is_one_line(tmp_path):
    """The folder is removed while a file downloads: a write error, not a mirror's."""
    target, payload = tmp_path / "data", b"not really MNIST"

    def opener(url: str, timeout: float) -> io.BytesIO:
        shutil.rmtree(target)
        return io.BytesIO(payload)

    checksums = {name: hashlib.md5(payload).hexdigest() for name in MD5}
    with pytest.raises(UsageError) as info:
        download_mnist(
            target, mirrors=["https://a.invalid/"], checksums=checksums, opener=opener, log=print
        )
    message = str(info.value)
    assert message.startswith(
        f"cannot write {target / 'train-images-idx3-ubyte.gz'} (No such file or directory); "
    )
    assert "--data-dir" in message and "\n" not in message
    assert not target.exists()  # not made again, and nothing half-written in it


def test_ddp_mode_checks_the_checkpoint_path_before_starting_ranks(tmp_path, capsys, monkeypatch):
    def no_ranks(*args, **kwargs):
        raise AssertionError("DDP ranks were started")

    monkeypatch.setattr(ddp.mp, "start_processes", no_ranks)
    bad = under_a_file(tmp_path) / "ck.pt"
    argv = ["--mode", "ddp", "--checkpoint", str(bad), "--logdir", str(tmp_path / "runs")]
    line = refused(mnist_main, [*argv, "--data-dir", str(tmp_path / "none")], capsys, PROG)
    assert "is a file, not a folder" in line
    assert not (tmp_path / "runs").exists()


def test_run_dir_that_fails_half_way_is_removed(tmp_path, monkeypatch):
    """config.json is written, then the TensorBoard writer fails (disk full): nothing stays."""

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("hogwild.rundir.SummaryWriter", full_disk)
    with pytest.raises(UsageError, match="No space left on device") as info:
        RunDir(tmp_path / "runs" / "deeper", "app", {"lr": 0.1})
    assert "\n" not in str(info.value)
    assert not (tmp_path / "runs").exists()


# -------------------------------------------------------------- failed writes, mid-run


def test_run_dir_whose_folder_is_taken_away_warns_once_and_goes_on(tmp_path, capsys):
    """TensorBoard's writer thread fails (a file where the folder was): one warning line,
    no thread traceback, and logging calls after it are harmless no-ops."""
    run_dir = RunDir(tmp_path, "app", {"lr": 0.1})
    run_dir.scalar("x", 1.0, 0)
    run_dir.flush()
    shutil.rmtree(run_dir.path)
    run_dir.path.write_text("in the way")
    for step in range(1, 4):
        run_dir.scalars({"x": float(step), "y": 0.0}, step)
        run_dir.flush()
    run_dir.close({"score": 1.0})
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"warning: TensorBoard events in {run_dir.path} not written from here on "
        "(Not a directory); the run goes on"
    ], err


def test_failed_checkpoint_write_keeps_the_previous_one(tmp_path, monkeypatch, capsys):
    path = tmp_path / "ck" / "checkpoint.pt"
    save_checkpoint({"step": 1}, path)
    real_save = torch.save

    def fills_the_disk(obj, f):
        f.write(b"\0" * 4096)  # a part of the file gets out before the disk is full
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(torch, "save", fills_the_disk)
    assert save_checkpoint_or_warn({"step": 2}, path, "prog") is None
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        f"prog: warning: checkpoint {path} not written (No space left on device); "
        "the previous one there is intact"
    )
    assert load_checkpoint(path) == {"step": 1}
    assert contents(path.parent) == {"checkpoint.pt"}  # no temporary file left

    # The folder is gone and a file is in its way: said as plainly, nothing raised.
    monkeypatch.setattr(torch, "save", real_save)
    path.unlink()
    path.parent.rmdir()
    path.parent.write_text("in the way")
    assert save_checkpoint_or_warn({"step": 3}, path, "prog") is None
    assert capsys.readouterr().err.endswith("no earlier checkpoint is there\n")


def test_a3c_run_goes_on_when_its_disk_fills_up(tmp_path, monkeypatch, capsys):
    """The first checkpoint is written, later ones fail: the run still ends normally and
    the first checkpoint is intact and loadable."""
    real_save, saved = torch.save, []

    def disk_fills_after_one(obj, f):
        saved.append(obj["env_steps"])
        if len(saved) == 1:
            return real_save(obj, f)
        f.write(b"\0" * 4096)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(torch, "save", disk_fills_after_one)
    # The run ends (by its time limit, as any run may) right after the first failed
    # periodic write, however long a busy machine takes to get there: not after a fixed
    # few seconds that may hold too few checkpoints. time_limit=120 is only a backstop.
    periodic_save = RunLoop.save_checkpoint

    def then_end_the_run(loop: RunLoop, *args, **kwargs):
        path = periodic_save(loop, *args, **kwargs)
        if len(saved) >= 2:
            loop.time_limit = 0.0
        return path

    monkeypatch.setattr(RunLoop, "save_checkpoint", then_end_the_run)
    cfg = A3CConfig(
        env="Acrobot-v1",
        preset=None,
        workers=1,
        envs_per_worker=4,
        total_steps=10**9,
        target_return=1e9,
        time_limit=120.0,
        eval_interval=0.0,
        log_interval=0.1,
        checkpoint_interval=0.3,
        logdir=str(tmp_path),
    )
    result = a3c_train(cfg)
    err = capsys.readouterr().err
    assert result.exit_code == 0
    assert len(saved) >= 3, saved  # one good, at least one periodic failure and the final
    warnings = [line for line in err.splitlines() if "warning: checkpoint" in line]
    assert len(warnings) == len(saved) - 1, err
    assert all("No space left on device); the previous one there is intact" in w for w in warnings)
    assert "Traceback" not in err
    ckpt = load_checkpoint(result.run_dir / "checkpoint.pt")
    assert ckpt["env_steps"] == saved[0] < result.env_steps
    assert not [p for p in result.run_dir.iterdir() if p.name.endswith(".tmp")]


def test_mnist_run_goes_on_when_its_checkpoint_folder_is_taken_away(mnist_dir, tmp_path):
    """After epoch 1's checkpoint, its folder is moved away and a file put in its place:
    the later epochs' writes fail with one warning each, training finishes, exit 0."""
    ck_dir = tmp_path / "ck"
    ck = ck_dir / "ck.pt"
    proc = warm_python.Popen(
        [sys.executable, "-m", "hogwild.mnist", "--data-dir", str(mnist_dir)]
        + ["--no-download", "--logdir", str(tmp_path / "runs"), "--checkpoint", str(ck)]
        + ["--workers", "2", "--epochs", "3", "--max-batches-per-epoch", "20", "--seed", "3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=CHILD_ENV,
    )
    try:
        wait_until(
            ck.is_file,
            what="no first checkpoint",
            progress=lambda: folder_state(tmp_path),
            procs=[proc],
            interval=0.01,
        )
        ck_dir.rename(tmp_path / "moved")
        ck_dir.write_text("in the way")
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "epoch 3: test loss" in out  # the run went on
    assert "Traceback" not in err
    warnings = [line for line in err.splitlines() if "warning: checkpoint" in line]
    assert warnings == 2 * [  # epochs 2 and 3, one line each
        f"hogwild-mnist: warning: checkpoint {ck} not written ({ck_dir} is a file, not a "
        "folder); no earlier checkpoint is there"
    ], err
    moved = load_checkpoint(tmp_path / "moved" / "ck.pt")
    assert moved["epoch"] == 1


# ------------------------------------------------------------------------ Python API


def test_import_a3c_is_light_and_the_api_has_its_own_module():
    """``import a3c`` pulls in no torch; the commands are modules and the API's functions
    live in a3c.api, so neither hides the other; hogwild.mnist has its API too."""
    code = "\n".join(
        [
            "import inspect, sys",
            "import a3c",
            "assert 'torch' not in sys.modules and 'gymnasium' not in sys.modules",
            "import a3c.evaluate  # the command modules",
            "assert 'hogwild.supervised.api' not in sys.modules  # imported on first use",
            "import a3c.train",
            "from a3c.api import A3CConfig, A3CResult, config_for, evaluate, train",
            "assert inspect.ismodule(a3c.train) and inspect.ismodule(a3c.evaluate)",
            "assert inspect.isfunction(train) and train.__module__ == 'a3c.run.trainer'",
            "assert inspect.isfunction(evaluate) and a3c.train.train is train",
            "assert config_for('Acrobot-v1', workers=3).workers == 3",
            "assert isinstance(config_for('CartPole-v1'), A3CConfig)",
            "from hogwild.mnist import MnistConfig, train as mnist_train",
            "assert MnistConfig(workers=1).workers == 1 and callable(mnist_train)",
            "import hogwild",
            "assert hogwild.fit.__module__ == 'hogwild.supervised.api' and callable(hogwild.load)",
            "print('ok')",
        ]
    )
    proc = run_python(["-c", code], timeout=60)
    assert proc.returncode == 0 and proc.stdout == "ok\n", proc.stderr


def test_evaluate_refuses_a_bad_checkpoint_in_one_line(tmp_path):
    from a3c.api import evaluate

    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(UsageError, match="not a readable checkpoint"):
        evaluate(bad)
    with pytest.raises(UsageError, match="checkpoint not found"):
        evaluate(tmp_path / "missing.pt")
