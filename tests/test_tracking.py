"""``--track``: the run in Weights & Biases, tested offline (``WANDB_MODE=offline``): the
W&B run file in the run folder holds the run's name, its config and the TensorBoard
scalars; without wandb, one line and exit 2."""

from __future__ import annotations

import struct
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from tb_helpers import scalar_values

from a3c.train import main as train_main

FLAGS = ["--workers", "1", "--total-steps", "3000", "--eval-interval", "0", "--preset", "none"]


def test_track_without_wandb_is_one_line_and_leaves_no_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb -> ImportError
    code = train_main([*FLAGS, "--track", "--logdir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and '--track needs wandb: pip install "hogwild-a3c[wandb]"' in err, err
    assert not any(tmp_path.iterdir())


def wandb_records(path: Path) -> Iterator[object]:
    """The records of a ``.wandb`` file: a LevelDB-style log of 32 KiB blocks after a
    7-byte header, each chunk ``crc32 (4) | length (2) | type (1)``, the type saying whether
    it holds a whole protobuf ``Record`` (1) or its first (2), middle (3) or last (4) part."""
    from wandb.proto import wandb_internal_pb2

    data, pos, parts, block = path.read_bytes(), 7, b"", 32768
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 0:
            continue
        parts = chunk if kind in (1, 2) else parts + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts)
            yield record


def test_track_records_the_run_offline(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="--track needs the [wandb] extra")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    code = train_main([*FLAGS, "--track", "--wandb-project", "tests", "--logdir", str(tmp_path)])
    assert code == 0
    (run_dir,) = tmp_path.iterdir()
    (run_file,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    names, config, history, kinds = set(), {}, Counter(), []
    for record in wandb_records(run_file):  # read at once: the run's end waits for its file
        kind = record.WhichOneof("record_type")
        kinds.append(kind)
        if kind == "run":
            names.add(record.run.display_name)
            config.update({i.key: i.value_json for i in record.run.config.update})
            assert record.run.project == "tests"
        elif kind == "history":
            history.update(i.key or "/".join(i.nested_key) for i in record.history.item)
    assert kinds[-1] == "exit", kinds[-3:]  # the file is whole, not still being written
    assert names == {run_dir.name}
    assert config["env"] == '"CartPole-v1"' and config["track"] == "true"
    counts = {tag: len(written) for tag, written in scalar_values(run_dir).items()}
    assert "hparam/env_steps" in counts  # the summary written as the run closes
    assert {tag: history[tag] for tag in counts} == counts  # every point, none twice


def test_a_hung_wandb_finish_is_one_warning_not_a_hang(monkeypatch, capsys):
    pytest.importorskip("wandb", reason="--track needs the [wandb] extra")
    from hogwild import tracking

    released = threading.Event()

    class HungRun:  # a W&B service that never answers
        def finish(self) -> None:
            released.wait(30)

    start = time.monotonic()
    tracking.finish(HungRun(), timeout=0.5)
    waited = time.monotonic() - start
    released.set()
    err = capsys.readouterr().err
    assert 0.5 <= waited < 10, waited
    assert err.count("\n") == 1 and "W&B did not finish within 0.5 s" in err, err


def test_a_failing_wandb_finish_is_one_warning_not_a_traceback(capsys):
    pytest.importorskip("wandb", reason="--track needs the [wandb] extra")
    from hogwild import tracking

    class BrokenRun:
        def finish(self) -> None:
            raise RuntimeError("service\n  gone")

    tracking.finish(BrokenRun(), timeout=5)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "warning: --track: W&B service gone;" in err, err
