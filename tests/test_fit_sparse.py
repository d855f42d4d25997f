"""The supervised trainer on what users' models bring: sparse embedding tables written
only where touched, DDP beside Hogwild!, BatchNorm's buffers, frozen and float64
parameters, map-style Datasets through a DataLoader, and a worker killed mid-epoch."""

from __future__ import annotations

import pytest
import torch
import user_models as um

from hogwild import fit
from hogwild.sharing import SharedModel
from hogwild.sparse import RowAdagrad, RowAdam, RowSGD, touched_rows

RATINGS_VARIANCE = 1.0  # of the true ratings: what a model that learned nothing scores
NOISE = 0.01  # the variance of their noise: the best a model can score


def test_rows_a_batch_never_touches_stay_bitwise_unchanged(tmp_path):
    model = um.Recommender()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    train, val = um.make_ratings()
    result = fit(
        model, train, step=um.rating_step, val_data=val, workers=2, epochs=3,
        logdir=str(tmp_path),
    )  # fmt: skip
    assert result.exit_code == 0
    assert result.metrics["loss"] < 5 * NOISE  # from ~1.0
    for name, rated in (("user.weight", 100), ("item.weight", 50)):
        now = dict(model.named_parameters())[name].detach()
        assert torch.equal(now[rated:], before[name][rated:]), name  # never rated
        changed = (now[:rated] != before[name][:rated]).any(1)
        assert changed.all(), f"{name}: {int((~changed).sum())} rated rows never written"
    assert model.scale.item() != 1.0  # the dense parameter beside the tables trained too


def test_the_ddp_strategy_learns_the_same_sparse_problem(tmp_path):
    train, val = um.make_ratings()
    result = fit(
        um.Recommender(), train, step=um.rating_step, val_data=val, workers=2, epochs=3,
        strategy="ddp", logdir=str(tmp_path),
    )  # fmt: skip
    assert result.exit_code == 0 and result.epochs_done == 3
    assert result.metrics["loss"] < 5 * NOISE  # from ~1.0
    assert result.checkpoint is not None and result.checkpoint.is_file()
    # The caller's module holds the trained weights, as with hogwild.
    users, items, ratings = val.tensors
    loss = torch.nn.functional.mse_loss(result.model(users, items), ratings)
    assert float(loss) == pytest.approx(result.metrics["loss"], rel=1e-4)


def test_a_bag_of_words_on_embedding_bag_learns(tmp_path):
    train, val = um.make_docs()
    result = fit(
        um.Bag(), train, "cross_entropy", val_data=val, metrics=["accuracy"], workers=2,
        epochs=3, logdir=str(tmp_path),
    )  # fmt: skip
    assert result.metrics["accuracy"] > 85.0  # chance: 50


@pytest.mark.parametrize("policy", ["shared", "average"])
def test_batchnorm_statistics_follow_the_data_under_either_buffer_policy(tmp_path, policy):
    model = um.SmallResNet()
    train, val = um.make_images()
    result = fit(
        model, train, val_data=val, metrics=["accuracy"], workers=2, epochs=2, lr=0.05,
        momentum=0.9, buffers=policy, logdir=str(tmp_path),
    )  # fmt: skip
    assert result.metrics["accuracy"] > 95.0  # chance: 50, and scored in eval mode
    # The inputs average 5: the first BatchNorm's running mean left its start at 0.
    assert model.bn1.running_mean.abs().mean() > 0.5
    assert int(model.bn1.num_batches_tracked) >= 2000 * 4 // 5 // 64  # every step counted


def test_frozen_and_float64_parameters_through_a_dataloader(tmp_path):
    model = um.Frozen()
    frozen = model.proj.weight.detach().clone()
    train, val = um.make_pairs_data()
    result = fit(
        model, train, val_data=val, metrics=["accuracy"], workers=2, epochs=3, lr=0.3,
        momentum=0.9, logdir=str(tmp_path),
    )  # fmt: skip
    assert torch.equal(model.proj.weight, frozen)
    assert model.head.weight.dtype == torch.float64
    assert result.metrics["accuracy"] > 60.0  # chance: 25, through a frozen random layer


def test_a_killed_worker_is_restarted_and_its_shard_redone(tmp_path, monkeypatch, caplog):
    marker = tmp_path / "died"
    monkeypatch.setenv("DIE_ONCE", str(marker))
    train, val = um.make_table_data()
    result = fit(
        um.make_mlp, train, step=um.dying_step, val_data=val, workers=2, epochs=1, lr=0.2,
        logdir=str(tmp_path / "runs"),
    )  # fmt: skip
    assert marker.is_file(), "no worker died"
    assert result.exit_code == 0 and result.epochs_done == 1
    # The dead worker's 4 steps were sent or lost; its shard was then trained in full.
    assert len(train) <= result.samples <= len(train) + 4 * 64
    assert "restarting worker" in caplog.text


def test_row_optimizers_match_pytorchs_on_the_rows_they_touch():
    torch.manual_seed(0)
    for ours, theirs, kw in (
        (RowSGD, torch.optim.SGD, {}),
        (RowAdagrad, torch.optim.Adagrad, {}),
        (RowAdam, torch.optim.SparseAdam, {}),
    ):
        ref = torch.nn.Embedding(30, 4, sparse=True)
        table = ref.weight.detach().clone()
        opt, step = theirs(ref.parameters(), lr=0.1, **kw), ours(table, lr=0.1)
        for _ in range(5):
            idx = torch.randint(0, 10, (16,))  # rows 10-29 are never touched
            ref.weight.grad = None
            (ref(idx) ** 2).sum().backward()
            step.step(ref.weight.grad)
            opt.step()
        torch.testing.assert_close(table, ref.weight.detach(), msg=ours.__name__)
        assert torch.equal(table[10:], table[10:].clone())


def test_touched_rows_are_what_coalesce_gives():
    torch.manual_seed(0)
    bag = torch.nn.EmbeddingBag(50, 3, mode="mean", sparse=True)
    bag(torch.randint(0, 20, (8, 6))).sum().backward()  # repeated words, within and across bags
    grad = bag.weight.grad
    assert grad is not None and not grad.is_coalesced()
    rows, values = touched_rows(grad)
    want = grad.coalesce()
    assert torch.equal(rows, want.indices()[0])
    torch.testing.assert_close(values, want.values())
    empty = torch.sparse_coo_tensor(torch.zeros(1, 0, dtype=torch.long), torch.zeros(0, 3), (50, 3))
    assert touched_rows(empty)[0].numel() == 0


def test_parameters_are_grouped_by_dtype_and_tables_follow_the_dense_ones():
    shared = SharedModel(um.Recommender())
    (group,) = shared.groups
    assert group.dense == 1 and sorted(group.tables) == ["item.weight", "user.weight"]
    assert group.flat.is_shared() and group.flat.numel() == 1 + (um.USERS + um.ITEMS) * um.RANK
    mixed = SharedModel(um.Frozen())
    assert [g.dtype for g in mixed.groups] == [torch.float64]  # proj is frozen: not stepped
    assert mixed.module.proj.weight.is_shared()
