"""``--grad-accum`` and ``--amp`` of hogwild.mnist: one step's arithmetic, DDP's all-reduce
count in a real two-process gloo group, a short CLI run per mode, and the refusals.

Real MNIST images throughout (a few hundred), fp32 SGD where exactness is claimed: N
micro-batches of B must leave the parameters where one batch of N x B does.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from proc_helpers import free_port
from tb_helpers import scalar_values
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel

from hogwild.errors import UsageError
from hogwild.flat import flatten_parameters
from hogwild.mnist import ConvNet, main, params_digest
from hogwild.mnist.config import MnistConfig
from hogwild.mnist.data import load_mnist
from hogwild.mnist.model import channels_last
from hogwild.optim import SharedSGD
from hogwild.precision import Precision
from hogwild.sharing import SharedModel
from hogwild.supervised import ddp
from hogwild.supervised.checkpoints import resume_scaler
from hogwild.supervised.ddp_rank import ddp_step
from hogwild.supervised.steps import backward_micro_batches
from hogwild.supervised.task import Objective
from hogwild.supervised.worker import hogwild_step

N, B, STEPS = 4, 16, 2  # micro-batches per step, their size, steps taken


@pytest.fixture(scope="module")
def images(mnist_dir: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """The first 512 real training images (normalised, NHWC strides) and labels."""
    data = load_mnist(mnist_dir, download=False)
    return channels_last(data.train_images[:512].clone()), data.train_labels[:512].clone()


def step_batches(x: torch.Tensor, y: torch.Tensor, step: int, micro: bool) -> list:
    """Step ``step``'s N x B samples: as N micro-batches, or as one batch."""
    xs, ys = x[step * N * B : (step + 1) * N * B], y[step * N * B : (step + 1) * N * B]
    return list(zip(xs.split(B), ys.split(B), strict=True)) if micro else [(xs, ys)]


NLL = Objective(loss=F.nll_loss)  # MNIST's: the models end in log_softmax


def hogwild_run(images, micro: bool, precision: Precision) -> tuple[torch.Tensor, list]:
    """STEPS Hogwild! steps (SGD with momentum) from one fixed start: parameters, stats."""
    flat, opt, grads, model = _shared()
    stats = [
        hogwild_step(
            model, NLL, step_batches(*images, s, micro), precision, grads, [opt], {}, {}, 0.1
        )
        for s in range(STEPS)
    ]
    return flat, stats


def _shared() -> tuple[torch.Tensor, SharedSGD, list[torch.Tensor], ConvNet]:
    """A fresh ConvNet as the trainer shares it: its flat vector, SGD, private gradients."""
    model = _fresh()
    shared = SharedModel(model)
    opt = SharedSGD(shared.primary.dense_vector, lr=0.1, momentum=0.5)
    return shared.primary.flat, opt, shared.attach_grads(), model


# ----------------------------------------------------------------- one step's arithmetic


def test_hogwild_step_n_micro_batches_equal_one_batch_of_n_b(images):
    start = flatten_parameters(_fresh()).clone()
    accumulated, acc_stats = hogwild_run(images, micro=True, precision=Precision())
    whole, whole_stats = hogwild_run(images, micro=False, precision=Precision())
    assert (accumulated - start).abs().max() > 1e-3  # the steps moved the parameters
    torch.testing.assert_close(accumulated, whole, rtol=1e-5, atol=1e-6)
    for a, w in zip(acc_stats, whole_stats, strict=True):
        assert a.samples == w.samples == N * B
        assert float(a.loss_sum) == pytest.approx(float(w.loss_sum), rel=1e-5)


def test_bf16_runs_the_forward_pass_in_bf16_and_steps_in_fp32(images):
    seen: list[torch.dtype] = []
    flat, opt, grads, model = _shared()
    model.fc1.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    hogwild_step(
        model, NLL, step_batches(*images, 0, True), Precision("bf16"), grads, [opt], {}, {}, 0.1
    )
    assert seen == [torch.bfloat16] * N
    assert flat.dtype == grads[0].dtype == opt.state["momentum_buffer"].dtype == torch.float32
    assert all(p.dtype == torch.float32 for p in model.parameters())
    # Close to the fp32 step: bf16 rounds activations, it does not change the arithmetic.
    bf16, _ = hogwild_run(images, micro=True, precision=Precision("bf16"))
    fp32, _ = hogwild_run(images, micro=True, precision=Precision())
    assert (bf16 - fp32).abs().max() < 2e-3


def test_fp16_grad_scaler_unscales_the_accumulated_gradient_once(images):
    """The fp16 path (CUDA in the app; autocast and GradScaler also run on the CPU here)."""
    finals = []
    for precision in (Precision(), Precision("fp16", "cpu")):
        model = _fresh()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for s in range(STEPS):
            opt.zero_grad(set_to_none=True)
            backward_micro_batches(model, NLL, step_batches(*images, s, True), precision)
            precision.step(opt)
        finals.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
    fp32, fp16 = finals
    assert (fp16 - fp32).abs().max() < 2e-3  # scaled by 65536 (or skipped) would be far off


def _fresh() -> ConvNet:
    torch.manual_seed(0)
    return ConvNet()


# ------------------------------------------------------------- DDP: two real processes


def counting_allreduce(calls, bucket):  # no annotations: DDP checks them against its own
    """DDP's default all-reduce of one gradient bucket, noted in ``calls`` first."""
    calls.append(bucket.index())
    return allreduce_hook(None, bucket)


def _ddp_rank(rank: int, port: int, images: torch.Tensor, labels: torch.Tensor, out: Any):
    """One gloo rank: the same STEPS taken three ways, counting the gradient all-reduces;
    sends the counts and how far the parameters ended from each other (a few numbers: a
    pipe holds little, and the parent reads only after the ranks have exited)."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        x, y = images[rank::2], labels[rank::2]  # each rank its own samples
        counts, params = {}, {}
        for way in ("accumulated", "whole", "without no_sync"):
            calls: list[int] = []
            model = DistributedDataParallel(_fresh())
            model.register_comm_hook(calls, counting_allreduce)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for s in range(STEPS):
                batches = step_batches(x, y, s, micro=way != "whole")
                if way == "without no_sync":
                    opt.zero_grad(set_to_none=True)
                    backward_micro_batches(model, NLL, batches, Precision())
                    opt.step()
                else:
                    ddp_step(model, NLL, [opt], batches, Precision(), torch.device("cpu"))
            counts[way] = len(calls)
            params[way] = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        start = flatten_parameters(_fresh())
        out.put(
            (
                rank,
                counts,
                float((params["accumulated"] - params["whole"]).abs().max()),
                float((params["accumulated"] - start).abs().max()),
                params_digest(params["accumulated"]),
            )
        )
        dist.barrier()  # leave together, as hogwild/supervised/ddp_rank.py does
    finally:
        dist.destroy_process_group()
    # DDP's gloo threads outlive destroy_process_group: the interpreter's teardown around
    # them once aborted a rank ("terminate called without an active exception"). All is sent.
    os._exit(0)


@pytest.mark.usefixtures("hang_guard")
def test_ddp_accumulation_all_reduces_once_per_step_and_equals_one_big_batch(images):
    # Forked, not spawned as the app's ranks are: this is about ddp_step, and a spawned
    # rank spends ~4 s importing torch here.
    ctx = mp.get_context("fork")
    out = ctx.SimpleQueue()
    x, y = images
    mp.start_processes(
        _ddp_rank, args=(free_port(), x, y, out), nprocs=2, join=True, start_method="fork"
    )
    results = [out.get() for _ in range(2)]
    for rank, counts, off_whole, moved, _ in results:
        # One all-reduce per step, not one per micro-batch (which a plain loop would do).
        assert counts == {"accumulated": STEPS, "whole": STEPS, "without no_sync": N * STEPS}
        assert off_whole < 1e-5, (rank, off_whole)  # float rounding, on weights of ~0.1
        assert moved > 1e-3, rank
    assert results[0][4] == results[1][4]  # both ranks hold the same parameters


# ------------------------------------------------------------------ the CLI, each mode


def run_args(mnist_dir: Path, tmp_path: Path, *extra: str) -> list[str]:
    return [
        "--data-dir", str(mnist_dir), "--no-download", "--logdir", str(tmp_path / "runs"),
        "--workers", "2", "--epochs", "1", "--max-batches-per-epoch", "60", "--seed", "3",
        "--grad-accum", "2", "--amp", "bf16", *extra,
    ]  # fmt: skip


@pytest.mark.parametrize("mode", ["hogwild", "ddp"])
def test_cli_trains_with_grad_accum_and_bf16(mnist_dir, tmp_path, capsys, mode):
    assert main(run_args(mnist_dir, tmp_path, "--mode", mode)) == 0
    assert "bf16 autocast, 2 micro-batches of 64 per step" in capsys.readouterr().out
    (run,) = (tmp_path / "runs").iterdir()
    config = json.loads((run / "config.json").read_text())
    assert (config["amp"], config["grad_accum"]) == ("bf16", 2)
    ckpt = torch.load(run / "checkpoint.pt", weights_only=True)
    assert ckpt["samples"] == 2 * 60 * 64  # --max-batches-per-epoch counts micro-batches
    assert ckpt["test_accuracy"] > 60.0  # chance is 10%
    # Telemetry every --log-interval (10) steps: 30 steps make 3 reports per worker (hogwild)
    # or 3 all-reduced ones (ddp); 60 steps would have made twice as many.
    assert len(scalar_values(run)["train/loss"]) == (6 if mode == "hogwild" else 3)


# ------------------------------------------------------------- fp16's loss scale, resumed


def test_ddp_fp16_resume_continues_from_the_saved_loss_scale(mnist_dir, tmp_path, monkeypatch):
    """The checkpoint holds the GradScaler's state and a resume starts from it.

    fp16 is refused on the CPU as slow, not as wrong: this gloo run lets the ranks' CPU
    GradScaler work. Adam at --lr 0.05 makes the first steps large enough to overflow fp16,
    so the scale backs off from 2**16 within a few steps.
    """
    monkeypatch.setattr(ddp, "check_amp", lambda *args, **kwargs: None)
    argv = [
        "--mode", "ddp", "--amp", "fp16", "--optimizer", "adam", "--lr", "0.05",
        "--workers", "2", "--seed", "3", "--train-subset", "1024", "--data-dir", str(mnist_dir),
        "--no-download", "--logdir", str(tmp_path / "runs"),
    ]  # fmt: skip
    assert main([*argv, "--epochs", "1", "--max-batches-per-epoch", "4"]) == 0
    (run,) = (tmp_path / "runs").iterdir()
    saved = torch.load(run / "checkpoint.pt", weights_only=True)["scaler"]
    assert saved["scale"] < 2.0**16, saved  # moved away from GradScaler's initial scale
    resume = ["--resume", str(run / "checkpoint.pt")]
    assert main([*argv, *resume, "--epochs", "2", "--max-batches-per-epoch", "1"]) == 0
    after = torch.load(run / "checkpoint.pt", weights_only=True)["scaler"]
    # One step on from the saved state: the same scale one clean step further, or halved
    # by an overflow. A fresh scaler would be at 2**16 or 2**15 with a tracker of 1 or 0.
    assert (after["scale"], after["_growth_tracker"]) in {
        (saved["scale"], saved["_growth_tracker"] + 1),
        (saved["scale"] / 2, 0),
    }, (saved, after)


def test_resume_scaler_takes_old_checkpoints_and_refuses_a_damaged_state(tmp_path):
    fp16 = MnistConfig(amp="fp16", resume=str(tmp_path / "checkpoint.pt"))
    state = {"scale": 512.0, "growth_factor": 2.0, "backoff_factor": 0.5}
    state |= {"growth_interval": 2000, "_growth_tracker": 7}
    assert resume_scaler({}, fp16) is None  # written before the scaler was saved
    assert resume_scaler({"scaler": None}, fp16) is None  # written without fp16
    assert resume_scaler({"scaler": state}, MnistConfig(amp="bf16")) is None
    assert resume_scaler({"scaler": state}, fp16) == state
    for damaged in ({}, [1], {**state, "scale": float("nan")}, {**state, "_growth_tracker": "7"}):
        with pytest.raises(UsageError, match="its GradScaler state is damaged"):
            resume_scaler({"scaler": damaged}, fp16)


# ------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--amp", "fp16"], "--amp fp16 runs on CUDA only, and Hogwild! workers"),
        (["--grad-accum", "0"], "grad_accum (--grad-accum) must be at least 1, got 0"),
        (["--grad-accum", "-3"], "grad_accum (--grad-accum) must be at least 1, got -3"),
        (["--mode", "ddp", "--grad-accum", "0"], "must be at least 1, got 0"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(tmp_path, capsys, flags, expected):
    nowhere = ["--data-dir", str(tmp_path / "nowhere"), "--logdir", str(tmp_path / "runs")]
    assert main([*nowhere, "--no-download", *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hogwild-mnist: error: "), err
    assert expected in err[0], err
    assert not (tmp_path / "runs").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="with GPUs, ddp mode may run fp16")
def test_ddp_fp16_without_a_gpu_per_rank_is_refused(tmp_path, capsys):
    argv = ["--mode", "ddp", "--amp", "fp16", "--logdir", str(tmp_path / "runs")]
    assert main([*argv, "--data-dir", str(tmp_path / "nowhere"), "--no-download"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "--amp fp16 runs on CUDA only, and ddp trains on the CPU" in line


@pytest.mark.parametrize("mode", ["hogwild", "ddp"])
def test_amp_on_a_torch_without_torch_amp_is_one_line(tmp_path, capsys, monkeypatch, mode):
    monkeypatch.delattr(torch.amp, "GradScaler")
    argv = ["--mode", mode, "--amp", "bf16", "--logdir", str(tmp_path / "runs")]
    assert main([*argv, "--data-dir", str(tmp_path / "nowhere"), "--no-download"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "--amp bf16 needs torch.amp.GradScaler (torch 2.3 or newer)" in line
    # --amp off never needs it: the run gets as far as the (missing) data.
    assert main([*argv[:2], *argv[4:], "--data-dir", str(tmp_path / "x"), "--no-download"]) == 2
    assert "MNIST files missing" in capsys.readouterr().err
