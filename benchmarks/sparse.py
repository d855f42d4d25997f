"""Sparse embeddings, Hogwild!'s home ground: one process, Hogwild! workers and DDP ranks
side by side on two seeded synthetic problems.

* ``recommender``: user and item tables (``nn.Embedding(sparse=True)``) whose dot product
  predicts a rating; the ratings come from a known low-rank model plus noise, users and
  items drawn Zipf-like, so a few rows are hot and most are cold.
* ``bow``: a bag-of-words classifier, ``nn.EmbeddingBag(sparse=True)`` then a linear
  layer, on documents whose words are drawn from a Zipf background and per-class topics.

For each problem and setup it reports samples/s over the training epochs, the validation
score after each epoch, and the time to a validation target; then the row-collision rate
of two concurrent batches (the Hogwild! paper's rho) and the hottest row's share of the
samples (its Delta), and from those and the measured speed-up a prediction at more cores.

    python benchmarks/sparse.py --problem recommender --setups one,hogwild,ddp
    python benchmarks/sparse.py --problem bow --workers 2 --epochs 3
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from hogwild import fit


class Recommender(nn.Module):
    """A rating is the dot product of a user's and an item's vectors, plus their biases."""

    def __init__(self, users: int, items: int, rank: int) -> None:
        super().__init__()
        self.user = nn.Embedding(users, rank, sparse=True)
        self.item = nn.Embedding(items, rank, sparse=True)
        self.user_bias = nn.Embedding(users, 1, sparse=True)
        self.item_bias = nn.Embedding(items, 1, sparse=True)
        self.mean = nn.Parameter(torch.zeros(()))
        for table in (self.user, self.item):
            nn.init.normal_(table.weight, std=0.1)
        for table in (self.user_bias, self.item_bias):
            nn.init.zeros_(table.weight)

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        dot = (self.user(users) * self.item(items)).sum(-1)
        bias = self.user_bias(users).squeeze(-1) + self.item_bias(items).squeeze(-1)
        return dot + bias + self.mean


def rating_step(model: nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
    users, items, ratings = batch
    return F.mse_loss(model(users, items), ratings)


class BagOfWords(nn.Module):
    """fastText's shape: the mean of a document's word vectors, then a linear classifier."""

    def __init__(self, vocab: int, dim: int, classes: int) -> None:
        super().__init__()
        self.words = nn.EmbeddingBag(vocab, dim, mode="mean", sparse=True)
        self.out = nn.Linear(dim, classes)
        nn.init.uniform_(self.words.weight, -0.5 / dim, 0.5 / dim)

    def forward(self, docs: torch.Tensor) -> torch.Tensor:
        return self.out(self.words(docs))


def zipf_indices(rng: np.random.Generator, n: int, size: int, exponent: float) -> np.ndarray:
    """``size`` draws from ``range(n)`` with P(k) proportional to (k + 1) ** -exponent, the
    ranks shuffled so that hot rows are spread over the table."""
    p = 1.0 / np.arange(1, n + 1) ** exponent
    p /= p.sum()
    ranks = rng.choice(n, size=size, p=p)
    return rng.permutation(n)[ranks]


@dataclass
class Problem:
    name: str
    model: nn.Module
    train: TensorDataset
    val: TensorDataset
    loss: str | None
    step: object | None
    metrics: tuple[str, ...]
    monitor: str
    target: float
    rows: list[torch.Tensor]  # per sample, the rows it touches, for the collision rate


def recommender(
    seed: int, users: int = 100_000, items: int = 20_000, rank: int = 32, ratings: int = 5_000_000
) -> Problem:
    rng = np.random.default_rng(seed)
    true_u = rng.normal(0, 1 / math.sqrt(rank), (users, rank)).astype(np.float32)
    true_v = rng.normal(0, 1, (items, rank)).astype(np.float32)
    n = ratings + ratings // 20
    u = zipf_indices(rng, users, n, 0.8)
    i = zipf_indices(rng, items, n, 1.0)
    noise = 0.3
    r = (true_u[u] * true_v[i]).sum(1) + rng.normal(0, noise, n).astype(np.float32)
    u_t, i_t, r_t = torch.from_numpy(u), torch.from_numpy(i), torch.from_numpy(r)
    train = TensorDataset(u_t[:ratings], i_t[:ratings], r_t[:ratings])
    val = TensorDataset(u_t[ratings:], i_t[ratings:], r_t[ratings:])
    torch.manual_seed(seed)
    return Problem(
        "recommender",
        Recommender(users, items, rank),
        train,
        val,
        None,
        rating_step,
        (),
        "loss",
        # The noise floor is 0.09; a model that knows nothing scores ~1.0 (the ratings' var).
        0.5,
        [u_t[:ratings], i_t[:ratings] + users],
    )


def bow(
    seed: int, vocab: int = 50_000, dim: int = 32, classes: int = 20, docs: int = 1_000_000
) -> Problem:
    rng = np.random.default_rng(seed)
    length = 32
    n = docs + docs // 20
    labels = rng.integers(0, classes, n)
    background = zipf_indices(rng, vocab, n * length, 1.0).reshape(n, length)
    topic_words = rng.integers(0, vocab, (classes, 200))  # each class's own words
    topical = rng.random((n, length)) < 0.15
    picks = topic_words[labels[:, None], rng.integers(0, 200, (n, length))]
    words = np.where(topical, picks, background)
    x, y = torch.from_numpy(words), torch.from_numpy(labels)
    torch.manual_seed(seed)
    return Problem(
        "bow",
        BagOfWords(vocab, dim, classes),
        TensorDataset(x[:docs], y[:docs]),
        TensorDataset(x[docs:], y[docs:]),
        "cross_entropy",
        None,
        ("accuracy",),
        "accuracy",
        90.0,
        [x[:docs]],
    )


PROBLEMS = {"recommender": recommender, "bow": bow}


def collisions(rows: list[torch.Tensor], batch: int, trials: int = 200, seed: int = 0) -> dict:
    """rho: the share of a batch's rows that another, concurrent batch also writes; Delta:
    the hottest row's share of the samples."""
    n = rows[0].shape[0]
    g = torch.Generator().manual_seed(seed)
    shares = []
    for _ in range(trials):
        a, b = (
            torch.randint(0, n, (batch,), generator=g),
            torch.randint(0, n, (batch,), generator=g),
        )
        ra = torch.cat([r[a].reshape(-1) for r in rows]).unique()
        rb = torch.cat([r[b].reshape(-1) for r in rows]).unique()
        shares.append(float(torch.isin(ra, rb).double().mean()))
    counts = torch.cat([r.reshape(-1) for r in rows]).bincount()
    return {
        "rho": float(np.mean(shares)),
        "delta": float(counts.max()) / n,
        "rows_per_batch": float(torch.cat([r[:batch].reshape(-1) for r in rows]).unique().numel()),
    }


def run_setup(problem: Problem, setup: str, args: argparse.Namespace) -> dict:
    workers = 1 if setup == "one" else args.workers
    strategy = "ddp" if setup == "ddp" else "hogwild"
    start = time.monotonic()
    result = fit(
        problem.model,
        problem.train,
        problem.loss or "cross_entropy",
        step=problem.step,  # type: ignore[arg-type]
        val_data=problem.val,
        metrics=problem.metrics,
        workers=workers,
        strategy=strategy,
        epochs=args.epochs,
        batch_size=args.batch_size,
        optimizer=args.optimizer,
        lr=args.lr,
        table_optimizer=args.table_optimizer,
        table_lr=args.table_lr,
        val_batch_size=65_536,
        log_interval=50,
        logdir=args.logdir,
        seed=args.seed,
        monitor=problem.monitor,
    )
    wall = time.monotonic() - start
    history = result.history
    rates = [h["samples_per_sec"] for h in history]
    key = f"val_{problem.monitor}"
    lower = problem.monitor == "loss"
    reached = [
        h for h in history if (h[key] <= problem.target if lower else h[key] >= problem.target)
    ]
    return {
        "setup": setup,
        "workers": workers,
        "exit_code": result.exit_code,
        "samples_per_sec": float(np.median(rates)) if rates else 0.0,
        "scores": [round(h[key], 4) for h in history],
        "time_to_target_s": reached[0]["elapsed"] if reached else None,
        "wall_s": wall,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--problem", choices=sorted(PROBLEMS), default="recommender")
    p.add_argument("--setups", default="one,hogwild,ddp", help="comma-separated: one,hogwild,ddp")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--optimizer", default="adam", help="the dense parameters'")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--table-optimizer", default="adam", help="the sparse tables' rows'")
    p.add_argument("--table-lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--logdir", default="runs/bench-sparse")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args()
    t = time.monotonic()
    out = []
    for setup in args.setups.split(","):
        problem = PROBLEMS[args.problem](args.seed)  # fresh weights for every setup
        if not out:
            print(f"{args.problem}: data made in {time.monotonic() - t:.1f} s", flush=True)
        row = run_setup(problem, setup, args)
        print(json.dumps(row), flush=True)
        out.append(row)
    problem = PROBLEMS[args.problem](args.seed)
    stats = collisions(problem.rows, args.batch_size)
    one = next((r for r in out if r["setup"] == "one"), None)
    hog = next((r for r in out if r["setup"] == "hogwild"), None)
    if one and hog and one["samples_per_sec"]:
        speedup = hog["samples_per_sec"] / one["samples_per_sec"]
        stats["speedup"] = speedup
        shortfall = args.workers / speedup - 1
        if shortfall > 0:  # read as rho * (W - 1) * k: k per colliding share of a batch
            k = shortfall / max(stats["rho"] * (args.workers - 1), 1e-12)
            for cores in (16, 64):
                stats[f"predicted_{cores}"] = cores / (1 + stats["rho"] * (cores - 1) * k)
    print(json.dumps(stats), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "runs": out, "collisions": stats}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
