"""A user's own module: models and data factories the supervised trainer's tests name as
``user_models:make_mlp`` and so on, as a user names theirs on the command line."""

from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset, IterableDataset, TensorDataset

FEATURES, CLASSES = 16, 4
USERS, ITEMS, RANK = 500, 200, 8


def make_mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, CLASSES))


def make_table_data(n: int = 4000, seed: int = 0) -> tuple[TensorDataset, TensorDataset]:
    """A table: 16 features, the class the arg-max of a fixed linear map (chance: 25%)."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(FEATURES, CLASSES, generator=g)
    x = torch.randn(n + n // 4, FEATURES, generator=g)
    y = (x @ w).argmax(1)
    return TensorDataset(x[:n], y[:n]), TensorDataset(x[n:], y[n:])


class Pairs(Dataset):
    """A map-style Dataset that is not a TensorDataset: read through a DataLoader."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return self.x.shape[0]

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


def make_pairs_data() -> tuple[Pairs, Pairs]:
    train, val = make_table_data(2000)
    return Pairs(*train.tensors), Pairs(*val.tensors)


class Recommender(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.user = nn.Embedding(USERS, RANK, sparse=True)
        self.item = nn.Embedding(ITEMS, RANK, sparse=True)
        self.scale = nn.Parameter(torch.ones(()))  # a dense parameter beside the tables
        for table in (self.user, self.item):
            nn.init.normal_(table.weight, std=0.3)  # dot products of the ratings' scale

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        return self.scale * (self.user(users) * self.item(items)).sum(-1)


def rating_step(model: nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
    users, items, ratings = batch
    return F.mse_loss(model(users, items), ratings)


def make_ratings(n: int = 20_000) -> tuple[TensorDataset, TensorDataset]:
    """Ratings of a known rank-8 model plus noise; users from 100 on and items from 50 on
    are never rated, so their rows must never be written."""
    g = torch.Generator().manual_seed(1)
    u_true = torch.randn(USERS, RANK, generator=g) / RANK**0.5
    v_true = torch.randn(ITEMS, RANK, generator=g)
    users = torch.randint(0, 100, (n,), generator=g)
    items = torch.randint(0, 50, (n,), generator=g)
    ratings = (u_true[users] * v_true[items]).sum(-1) + 0.1 * torch.randn(n, generator=g)
    cut = n * 4 // 5
    return (
        TensorDataset(users[:cut], items[:cut], ratings[:cut]),
        TensorDataset(users[cut:], items[cut:], ratings[cut:]),
    )


class Bag(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.words = nn.EmbeddingBag(300, 16, mode="mean", sparse=True)
        self.out = nn.Linear(16, 2)

    def forward(self, docs: torch.Tensor) -> torch.Tensor:
        return self.out(self.words(docs))


def make_docs(n: int = 3000) -> tuple[TensorDataset, TensorDataset]:
    """Documents of 12 words; class 1's contain words 0-19 more often (chance: 50%)."""
    g = torch.Generator().manual_seed(2)
    y = torch.randint(0, 2, (n,), generator=g)
    words = torch.randint(20, 300, (n, 12), generator=g)
    topical = (torch.rand(n, 12, generator=g) < 0.3) & (y[:, None] == 1)
    words = torch.where(topical, torch.randint(0, 20, (n, 12), generator=g), words)
    cut = n * 4 // 5
    return TensorDataset(words[:cut], y[:cut]), TensorDataset(words[cut:], y[cut:])


class SmallResNet(nn.Module):
    """A residual block with BatchNorm on 8x8 images: buffers beside the parameters."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Conv2d(1, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv = nn.Conv2d(8, 8, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn1(self.stem(x)))
        h = F.relu(h + self.bn2(self.conv(h)))
        return self.head(h.mean((2, 3)))


def make_images(n: int = 2000) -> tuple[TensorDataset, TensorDataset]:
    """8x8 images offset by +3 (class 1) or -3 (class 0) plus noise: BatchNorm's running
    mean has somewhere to go."""
    g = torch.Generator().manual_seed(3)
    y = torch.randint(0, 2, (n,), generator=g)
    x = torch.randn(n, 1, 8, 8, generator=g) + 3.0 * (2 * y[:, None, None, None] - 1) + 5.0
    cut = n * 4 // 5
    return TensorDataset(x[:cut], y[:cut]), TensorDataset(x[cut:], y[cut:])


class Frozen(nn.Module):
    """A frozen embedding of features, a float64 head: frozen and mixed-dtype parameters."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.proj = nn.Linear(FEATURES, 32)
        self.proj.requires_grad_(False)
        self.head = nn.Linear(32, CLASSES).double()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.proj(x)).double())


# ------------------------------------------------------------------ what users get wrong
def make_nothing() -> str:
    return "not a model"


def make_vector_loss_data() -> tuple[TensorDataset, None]:
    return make_table_data(200)[0], None


def vector_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(output, target, reduction="none")


class Stream(IterableDataset):
    def __iter__(self):
        yield from zip(torch.randn(10, FEATURES), torch.zeros(10, dtype=torch.int64), strict=True)


def make_stream() -> tuple[Stream, None]:
    return Stream(), None


def make_wrong_width_data() -> tuple[TensorDataset, None]:
    return TensorDataset(torch.randn(100, FEATURES + 1), torch.zeros(100, dtype=torch.int64)), None


_CALLS: dict[str, int] = {}  # this process's calls of each step below, by its variable


def _first_at(step: int, env: str) -> bool:
    """Whether this call, in a worker (not the main process's first-batch check), is at
    least its ``step``-th and the first anywhere: $``env`` names a file not yet made, made
    now."""
    _CALLS[env] = _CALLS.get(env, 0) + 1
    marker = os.environ.get(env)
    if not marker or _CALLS[env] < step or multiprocessing.parent_process() is None:
        return False
    try:
        Path(marker).touch(exist_ok=False)
    except FileExistsError:
        return False
    return True


def dying_step(model: nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
    """The loss of a table batch; but the first worker to take its 5th step while
    $DIE_ONCE names a file that does not exist yet creates it and SIGKILLs itself."""
    if _first_at(5, "DIE_ONCE"):
        os.kill(os.getpid(), signal.SIGKILL)
    x, y = batch
    return F.cross_entropy(model(x), y)


def stopping_step(model: nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
    """The loss of a table batch; but the first worker or rank to take its 10th step while
    $STOP_ONCE names a file that does not exist yet creates it and sends the main process
    SIGTERM: a stop from outside, inside an epoch."""
    if _first_at(10, "STOP_ONCE"):
        os.kill(os.getppid(), signal.SIGTERM)
    x, y = batch
    return F.cross_entropy(model(x), y)
