"""``--device cuda``: Hogwild! workers sharing one model on one GPU (spawned, as PyTorch's
CUDA-sharing rules require), DDP with a GPU under each rank; and where there is no GPU, the
flag refused in one line."""

from __future__ import annotations

import pytest
import torch
import user_models as um

from hogwild import UsageError, fit, load
from hogwild.train import main

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
NOISE = 0.01  # the recommender's rating noise: the best a model can score


@pytest.mark.skipif(CUDA, reason="checks the refusal where there is no CUDA device")
@pytest.mark.parametrize(
    ("strategy", "says"),
    [
        ("hogwild", "--device cuda: no CUDA device is available here; use --device cpu"),
        ("ddp", "--device cuda with --strategy ddp puts one GPU under each rank: 2 rank(s), 0"),
    ],
)
def test_cuda_where_there_is_none_is_one_line_and_exit_2(tmp_path, capsys, strategy, says):
    argv = ["--model", "user_models:make_mlp", "--data", "user_models:make_table_data"]
    argv += ["--device", "cuda", "--strategy", strategy, "--logdir", str(tmp_path / "runs")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1, err
    assert not (tmp_path / "runs").exists()


@needs_cuda
def test_hogwild_workers_share_one_model_on_the_gpu(tmp_path):
    train, val = um.make_table_data()
    result = fit(
        um.make_mlp, train, val_data=val, metrics=["accuracy"], workers=2, epochs=3,
        device="cuda", eval_interval=1.0, logdir=str(tmp_path),
    )  # fmt: skip
    assert result.exit_code == 0 and result.epochs_done == 3
    assert result.metrics["accuracy"] > 85.0  # chance: 25
    assert all(p.device.type == "cpu" for p in result.model.parameters())
    saved = load(result.checkpoint)
    inputs, _ = val.tensors
    assert torch.equal(saved(inputs).argmax(1), result.model(inputs).argmax(1))


@needs_cuda
def test_sparse_rows_on_the_gpu_are_written_only_where_touched(tmp_path):
    model = um.Recommender()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    train, val = um.make_ratings()
    result = fit(
        model, train, step=um.rating_step, val_data=val, workers=2, epochs=3, device="cuda",
        logdir=str(tmp_path),
    )  # fmt: skip
    assert result.exit_code == 0 and result.metrics["loss"] < 5 * NOISE  # from ~1.0
    for name, rated in (("user.weight", 100), ("item.weight", 50)):
        now = dict(model.named_parameters())[name].detach()
        assert torch.equal(now[rated:], before[name][rated:]), name  # never rated
        assert (now[:rated] != before[name][:rated]).any(1).all(), name


@needs_cuda
def test_batchnorm_buffers_averaged_on_the_gpu(tmp_path):
    model = um.SmallResNet()
    train, val = um.make_images()
    result = fit(
        model, train, val_data=val, metrics=["accuracy"], workers=2, epochs=2, device="cuda",
        buffers="average", logdir=str(tmp_path),
    )  # fmt: skip
    assert result.metrics["accuracy"] > 95.0  # chance: 50
    assert int(model.bn1.num_batches_tracked) >= 2000 * 4 // 5 // 64


@needs_cuda
def test_ddp_puts_a_rank_on_the_gpu(tmp_path):
    train, val = um.make_table_data()
    result = fit(
        um.make_mlp(), train, val_data=val, metrics=["accuracy"], workers=1, epochs=3,
        strategy="ddp", device="cuda", amp="bf16", logdir=str(tmp_path),
    )  # fmt: skip
    assert result.exit_code == 0 and result.metrics["accuracy"] > 85.0


@needs_cuda
def test_fp16_hogwild_on_the_gpu_is_refused_in_one_line(tmp_path):
    train, _ = um.make_table_data()
    with pytest.raises(UsageError, match="--amp fp16 needs a GradScaler"):
        fit(um.make_mlp(), train, device="cuda", amp="fp16", logdir=str(tmp_path))
