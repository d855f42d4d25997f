"""hogwild.optim: shared optimizers match torch.optim, and stay consistent across processes."""

from __future__ import annotations

import multiprocessing as mp

import pytest
import torch
from proc_helpers import join_all
from torch import nn

from hogwild.checkpoint import load_checkpoint, save_checkpoint
from hogwild.flat import attach_flat_grad, flatten_parameters
from hogwild.optim import (
    OPTIMIZERS,
    SharedAdam,
    SharedRMSprop,
    SharedRMSpropTF,
    SharedSGD,
    adam_step_bound,
    rmsprop_step_bound,
)

pytestmark = pytest.mark.usefixtures("hang_guard")

CTX = mp.get_context("fork")

CASES = [
    (SharedAdam, {"lr": 1e-2}, torch.optim.Adam, {"lr": 1e-2}),
    (
        SharedAdam,
        {"lr": 3e-3, "betas": (0.8, 0.95), "eps": 1e-6, "weight_decay": 0.1},
        torch.optim.Adam,
        {"lr": 3e-3, "betas": (0.8, 0.95), "eps": 1e-6, "weight_decay": 0.1},
    ),
    (
        SharedRMSprop,
        {"lr": 7e-4, "alpha": 0.99, "eps": 1e-5},
        torch.optim.RMSprop,
        {"lr": 7e-4, "alpha": 0.99, "eps": 1e-5, "momentum": 0.0, "centered": False},
    ),
    (
        SharedRMSprop,
        {"lr": 1e-2, "alpha": 0.9, "eps": 0.1},
        torch.optim.RMSprop,
        {"lr": 1e-2, "alpha": 0.9, "eps": 0.1},
    ),
    (SharedSGD, {"lr": 0.1}, torch.optim.SGD, {"lr": 0.1}),
    (
        SharedSGD,
        {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.01},
        torch.optim.SGD,
        {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.01},
    ),
]


@pytest.mark.parametrize(
    ("ours", "our_kw", "theirs", "their_kw"),
    CASES,
    ids=["adam", "adam-wd", "rmsprop", "rmsprop-alpha", "sgd", "sgd-momentum-wd"],
)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_matches_torch_optim(ours, our_kw, theirs, their_kw, dtype):
    gen = torch.Generator().manual_seed(0)
    start = torch.randn(257, generator=gen, dtype=dtype)
    grads = [torch.randn(257, generator=gen, dtype=dtype) * (i + 1) for i in range(6)]
    params = start.clone()
    opt = ours(params, **our_kw)
    ref = nn.Parameter(start.clone())
    ref_opt = theirs([ref], **their_kw)
    for g in grads:
        opt.step(g)
        ref.grad = g.clone()
        ref_opt.step()
        tol = {"rtol": 1e-12, "atol": 1e-12} if dtype == torch.float64 else {}
        torch.testing.assert_close(params, ref.detach(), **tol)
    assert opt.total_steps == len(grads)
    assert not torch.equal(params, start)


def test_tf_rmsprop_starts_its_average_at_one_with_eps_inside_the_root():
    """The formula of TensorFlow's RMSProp (and SB3's RMSpropTFLike), step by step."""
    gen = torch.Generator().manual_seed(0)
    params = torch.randn(64, generator=gen, dtype=torch.float64)
    ref, sq = params.clone(), torch.ones_like(params)
    opt = SharedRMSpropTF(params, lr=7e-4, alpha=0.99, eps=1e-5)
    for i in range(5):
        g = torch.randn(64, generator=gen, dtype=torch.float64) * 10.0**-i
        opt.step(g)
        sq = 0.99 * sq + 0.01 * g * g
        ref -= 7e-4 * g / torch.sqrt(sq + 1e-5)
        torch.testing.assert_close(params, ref, rtol=1e-12, atol=1e-15)
    # Tiny gradients take tiny steps (torch's RMSprop would scale them up to ~lr).
    before = params.clone()
    SharedRMSpropTF(params, lr=1e-3).step(torch.full_like(params, 1e-8))
    assert (before - params).abs().max() < 1e-10


def test_lr_override_applies_to_one_step_only():
    params = torch.zeros(3)
    opt = SharedSGD(params, lr=0.5)
    g = torch.ones(3)
    opt.step(g, lr=0.25)
    assert params.tolist() == [-0.25] * 3
    opt.step(g)
    assert params.tolist() == [-0.75] * 3


def test_each_update_applies_exactly_its_own_gradient():
    """With the flat grad zeroed between updates, step k moves params by exactly -lr*g."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1, bias=False)
    flat = flatten_parameters(model)
    grad = attach_flat_grad(model, flat)
    opt = SharedSGD(flat, lr=0.5)
    x = torch.tensor([[1.0, 2.0, -1.0, 0.5]])  # d(sum(w.x))/dw = x, whatever w is
    before = flat.clone()
    for k in range(1, 6):
        model(x).sum().backward()
        assert torch.equal(grad, x[0]), f"update {k}: the gradient accumulated to {grad}"
        opt.step(grad)
        grad.zero_()
        torch.testing.assert_close(flat, before - 0.5 * k * x[0], rtol=0, atol=1e-6)
    # The optimizer never keeps or reuses a gradient of its own.
    opt.step(torch.zeros(4))
    torch.testing.assert_close(flat, before - 2.5 * x[0], rtol=0, atol=1e-6)


def _step_shared(opt, rank: int, steps: int, seed: int) -> None:
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        opt.step(torch.randn(opt.params.numel(), generator=gen), worker=rank)


def _run_workers(opt, steps: int, workers: int = 2) -> None:
    procs = [
        CTX.Process(target=_step_shared, args=(opt, rank, steps, 100 + rank), daemon=True)
        for rank in range(workers)
    ]
    for p in procs:
        p.start()
    join_all(procs, 30, "stepping process")


def test_two_processes_stepping_one_shared_adam_leave_one_consistent_state():
    params = torch.randn(1000)
    start = params.clone()
    opt = SharedAdam(params, lr=1e-3, num_workers=2).share_memory()
    assert all(t.is_shared() for t in (opt.params, opt.steps, *opt.state.values()))
    _run_workers(opt, steps=300)
    # Counts are exact (one counter per worker, each written by its owner only).
    assert opt.steps.tolist() == [300, 300]
    assert opt.total_steps == 600
    # The workers' updates and moments landed in the parent's (shared) tensors.
    assert not torch.equal(params, start)
    assert torch.isfinite(params).all()
    assert opt.state["exp_avg"].abs().sum() > 0
    assert (opt.state["exp_avg_sq"] > 0).all()
    # Adam moves each coordinate by at most ~lr per step.
    assert (params - start).abs().max() <= 600 * 1e-3 * 1.01


def test_a_lost_second_moment_write_cannot_make_a_step_larger_than_sequential_adams():
    """Lock-free workers can lose a write to the second moment (one worker's ``v * beta2``
    overwriting another's ``+ g**2``); early on the unclamped step is then ~|m| / eps
    times the rate (here ~1e7), the blow-up seen on Pong's first update."""
    lr = 1e-3
    params = torch.zeros(3)
    opt = SharedAdam(params, lr=lr, num_workers=2)
    opt.step(torch.tensor([0.5, -2.0, 1e-3]), worker=0)
    opt.state["exp_avg_sq"].zero_()  # the write that the race lost
    before = params.clone()
    opt.step(torch.zeros(3), worker=1)
    moved = (params - before).abs()
    assert torch.isfinite(params).all()
    assert (moved > 0).all()  # the first moment still moves every weight
    assert moved.max() <= lr * adam_step_bound(0.9, 0.999, t=2) * (1 + 1e-6), moved / lr


def _torch_steps(ours: type, theirs: type, grads: list[float], **kw):
    """Step ours and torch's on one float64 weight with ``grads``; yield ``(t, torch's
    step size)``, ours asserted equal to torch's after every step."""
    params = torch.zeros(1, dtype=torch.float64)
    opt = ours(params, lr=1.0, eps=0.0, **kw)
    ref = nn.Parameter(torch.zeros(1, dtype=torch.float64))
    ref_opt = theirs([ref], lr=1.0, eps=0.0, **kw)
    for t, g in enumerate(grads, start=1):
        before = ref.detach().clone()
        ref.grad = torch.tensor([g], dtype=torch.float64)
        ref_opt.step()
        yield t, (ref.detach() - before).abs().item()
        opt.step(torch.tensor([g], dtype=torch.float64))
        torch.testing.assert_close(params, ref.detach(), rtol=1e-9, atol=0)


@pytest.mark.parametrize("betas", [(0.9, 0.999), (0.8, 0.95)])
@pytest.mark.parametrize("sequence", ["worst", "random"])
def test_sequential_adam_reaches_its_step_bound_but_never_exceeds_it(betas, sequence):
    """Gradients growing as (beta2 / beta1)**i reach the bound at every step, so it is
    tight, and clamping to it leaves a sequential Adam as torch's."""
    b1, b2 = betas
    gen = torch.Generator().manual_seed(1)
    grads = (
        [(b2 / b1) ** i for i in range(50)]
        if sequence == "worst"
        else torch.randn(50, generator=gen).tolist()
    )
    for t, step in _torch_steps(SharedAdam, torch.optim.Adam, grads, betas=betas):
        bound = adam_step_bound(b1, b2, t)
        assert (
            step == pytest.approx(bound, rel=1e-9)
            if sequence == "worst"
            else step <= bound * (1 + 1e-12)
        )


class _LostWrite(torch.Tensor):
    """A square average whose ``+ g**2`` another worker's write-back wiped out."""

    def addcmul_(self, *args, **kwargs):
        return self


@pytest.mark.parametrize("cls", [SharedRMSprop, SharedRMSpropTF])
def test_a_lost_square_average_write_cannot_make_an_rmsprop_step_larger_than_sequential(cls):
    """As Adam's: a worker whose ``+ g**2`` was lost divides its gradient by an average
    that does not hold it; from RMSprop's average of 0 the unclamped step would be
    ~|g| / eps times the rate (here 2e5) instead of at most 10."""
    lr = 1e-3
    params = torch.zeros(3)
    opt = cls(params, lr=lr, eps=1e-5, num_workers=2)
    opt.state["square_avg"] = opt.state["square_avg"].as_subclass(_LostWrite)
    opt.step(torch.tensor([0.5, -2.0, 1e-3]), worker=1)
    moved = params.abs()
    assert torch.isfinite(params).all() and (moved > 0).all()
    assert moved.max() <= lr * rmsprop_step_bound(0.99) * (1 + 1e-6), moved / lr


@pytest.mark.parametrize("alpha", [0.99, 0.9])
def test_sequential_rmsprop_reaches_its_step_bound_on_its_first_step_but_never_exceeds_it(alpha):
    """From an average of 0 the first step is the bound (tight); random gradients after
    stay under it, and the clamped steps are torch's (no eps, to compare exactly)."""
    gen = torch.Generator().manual_seed(1)
    grads = (torch.randn(50, generator=gen) * torch.logspace(0, 3, 50)).tolist()
    bound = rmsprop_step_bound(alpha)
    for t, step in _torch_steps(SharedRMSprop, torch.optim.RMSprop, grads, alpha=alpha):
        assert step == pytest.approx(bound, rel=1e-9) if t == 1 else step <= bound * (1 + 1e-12)


def test_two_processes_stepping_one_shared_rmsprop_share_its_averages():
    """A3C's optimizer: both workers' squared gradients land in one shared average."""
    params = torch.randn(500)
    start = params.clone()
    opt = SharedRMSprop(params, lr=1e-3, num_workers=2).share_memory()
    _run_workers(opt, steps=200)
    assert opt.steps.tolist() == [200, 200]
    square_avg = opt.state["square_avg"]
    assert square_avg.is_shared() and (square_avg > 0).all()
    # Unit-variance gradients from both workers: the average of g^2 is near 1 by now
    # (alpha 0.99, 400 steps), as it is when one process takes all 400 steps.
    assert 0.5 < float(square_avg.mean()) < 1.5
    assert torch.isfinite(params).all() and not torch.equal(params, start)


def test_shared_sgd_steps_from_two_processes_are_all_counted():
    """Lock-free updates may race (Hogwild!); the step counts may not."""
    params = torch.zeros(10)
    opt = SharedSGD(params, lr=1e-3, num_workers=2).share_memory()
    _run_workers(opt, steps=200)
    assert opt.total_steps == 400
    assert params.abs().sum() > 0


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_state_dict_round_trip_through_a_checkpoint(name, tmp_path):
    cls = OPTIMIZERS[name]
    gen = torch.Generator().manual_seed(1)
    params = torch.randn(50, generator=gen)
    kw = {"momentum": 0.9} if name == "sgd" else {}
    opt = cls(params, lr=1e-2, num_workers=3, **kw)
    grads = [torch.randn(50, generator=gen) for _ in range(8)]
    for i, g in enumerate(grads[:5]):
        opt.step(g, worker=i % 3)
    path = save_checkpoint({"optimizer": opt.state_dict(), "params": params}, tmp_path / "o.pt")
    ckpt = load_checkpoint(path, required=("optimizer", "params"))

    restored_params = ckpt["params"].clone()
    restored = cls(restored_params, lr=1e-2, num_workers=2, **kw).share_memory()
    storage = {k: v.data_ptr() for k, v in restored.state.items()}
    restored.load_state_dict(ckpt["optimizer"])
    assert {k: v.data_ptr() for k, v in restored.state.items()} == storage  # loaded in place
    assert all(v.is_shared() for v in restored.state.values())
    assert restored.total_steps == 5
    for key, value in opt.state.items():
        assert torch.equal(restored.state[key], value)
    assert ckpt["optimizer"]["hyperparameters"] == opt.hyperparameters()
    # Resumed training continues exactly as uninterrupted training would.
    for g in grads[5:]:
        opt.step(g)
        restored.step(g, worker=1)
    torch.testing.assert_close(restored_params, params, rtol=0, atol=0)


def test_load_state_dict_rejects_another_optimizer_or_shape():
    adam = SharedAdam(torch.zeros(4))
    with pytest.raises(ValueError, match="for SharedRMSprop, not SharedAdam"):
        adam.load_state_dict(SharedRMSprop(torch.zeros(4)).state_dict())
    with pytest.raises(ValueError, match=r"'exp_avg' has shape \(5,\), expected \(4,\)"):
        adam.load_state_dict(SharedAdam(torch.zeros(5)).state_dict())


def test_rejects_bad_arguments():
    with pytest.raises(ValueError, match="flat parameter vector"):
        SharedAdam(torch.zeros(2, 2))
    with pytest.raises(ValueError, match="positive"):
        SharedSGD(torch.zeros(2), lr=0)
    with pytest.raises(ValueError, match="alpha"):
        SharedRMSprop(torch.zeros(2), alpha=1.0)
