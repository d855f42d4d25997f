"""MNIST without torchvision: an IDX reader, a loader and an offline-friendly downloader.

The Hogwild! trainer loads the whole data set once in the parent process, normalises
it, moves it into shared memory and lets every worker index the same tensors, so
nothing here needs a ``Dataset``/``DataLoader``. Bad or missing files are the user's
to fix, so every problem is reported as a one-line :class:`UsageError` naming the file.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import struct
import sys
import tempfile
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch

from hogwild.errors import UsageError
from hogwild.files import check_writable, make_dirs, os_reason

__all__ = [
    "FILES",
    "MD5",
    "MIRRORS",
    "MNIST_MEAN",
    "MNIST_STD",
    "MnistData",
    "default_data_dir",
    "download_mnist",
    "load_data",
    "load_mnist",
    "load_test_set",
    "read_idx",
]

# Mean and std of the MNIST training pixels in [0, 1], as in PyTorch's mnist example.
MNIST_MEAN = 0.1307
MNIST_STD = 0.3081

# Standard file names (without ".gz"), keyed by role.
FILES: dict[str, str] = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}

# The well-known published MD5 sums of the original .gz files.
MD5: dict[str, str] = {
    "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
}

# Public mirrors of the .gz files, tried in order (yann.lecun.com no longer serves them).
MIRRORS: tuple[str, ...] = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
)

DOWNLOAD_TIMEOUT_S = 30.0

_IDX_UBYTE = 0x08
_GZIP_MAGIC = b"\x1f\x8b"
_IMAGE_MAGIC = 0x00000803
_LABEL_MAGIC = 0x00000801

Opener = Callable[[str, float], BinaryIO]


# --------------------------------------------------------------------------- IDX


def _read_bytes(path: Path) -> bytes:
    """The file's content, gunzipped when it is gzip (by name or by its magic bytes)."""
    name = path.name
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory, not an IDX file") from None
    except OSError as e:
        raise UsageError(f"{path}: cannot read: {e.strerror or e}") from None
    if not raw:
        raise UsageError(f"{name}: empty file (0 bytes)")
    if raw[:2] == _GZIP_MAGIC:
        try:
            data = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            # BadGzipFile is an OSError; a cut-off stream raises EOFError.
            msg = str(e) or type(e).__name__
            raise UsageError(
                f"{name}: corrupt gzip data ({msg}); delete it and download it again"
            ) from None
        if not data:
            raise UsageError(f"{name}: empty file (gzip stream holds 0 bytes)")
        return data
    if name.endswith(".gz"):
        raise UsageError(f"{name}: not a gzip file (name ends in .gz, content does not)")
    return raw


def read_idx(path: str | Path) -> torch.Tensor:
    """Read an IDX file of unsigned bytes (raw or ``.gz``) into a uint8 tensor.

    The header is checked strictly (magic, number of dims, payload size equal to the
    product of the dims) because a silently mis-shaped data set would only show up
    as a mysteriously bad accuracy much later.
    """
    path = Path(path)
    name = path.name
    data = _read_bytes(path)

    if len(data) < 4:
        raise UsageError(f"{name}: truncated: {len(data)} bytes, too short for an IDX header")
    zero, dtype_code, ndim = struct.unpack(">HBB", data[:4])
    magic = int.from_bytes(data[:4], "big")
    if zero != 0:
        raise UsageError(
            f"{name}: bad magic number 0x{magic:08X}: not an IDX file "
            "(expected 0x00000803 for images, 0x00000801 for labels)"
        )
    if dtype_code != _IDX_UBYTE:
        raise UsageError(
            f"{name}: unsupported IDX data type 0x{dtype_code:02X} in magic 0x{magic:08X} "
            "(only unsigned byte, 0x08, is supported)"
        )
    if not 1 <= ndim <= 4:
        raise UsageError(f"{name}: bad magic number 0x{magic:08X}: {ndim} dims (expected 1 to 4)")
    header_len = 4 + 4 * ndim
    if len(data) < header_len:
        raise UsageError(
            f"{name}: truncated header: {ndim} dims need {header_len} bytes, file has {len(data)}"
        )
    dims = struct.unpack(f">{ndim}I", data[4:header_len])
    expected = 1
    for d in dims:
        expected *= d
    got = len(data) - header_len
    if got != expected:
        what = "truncated" if got < expected else "trailing bytes"
        shape = "x".join(str(d) for d in dims)
        raise UsageError(
            f"{name}: {what}: header says {shape} = {expected} bytes of data, file has {got}"
        )
    array = np.frombuffer(data, dtype=np.uint8, offset=header_len).reshape(dims)
    # frombuffer over bytes is read-only; torch wants writable memory it can own.
    return torch.from_numpy(array.copy())


# ------------------------------------------------------------------------ loading


@dataclass
class MnistData:
    """The four MNIST tensors, images normalised and shaped [N, 1, 28, 28] for a conv net."""

    train_images: torch.Tensor  # float32 [60000, 1, 28, 28]
    train_labels: torch.Tensor  # int64 [60000]
    test_images: torch.Tensor  # float32 [10000, 1, 28, 28]
    test_labels: torch.Tensor  # int64 [10000]

    def share_memory_(self) -> MnistData:
        """Move all tensors to shared memory so forked/spawned workers read one copy."""
        for t in (self.train_images, self.train_labels, self.test_images, self.test_labels):
            t.share_memory_()
        return self


def default_data_dir() -> Path:
    """``$HOGWILD_DATA`` if set (so CI and shared machines can point at one copy), else
    ``./data/mnist``."""
    env = os.environ.get("HOGWILD_DATA")
    return Path(env) if env else Path("data") / "mnist"


def _find(data_dir: Path, base: str) -> Path | None:
    """The raw file if present (faster to read), else the .gz, else None."""
    for candidate in (data_dir / base, data_dir / f"{base}.gz"):
        if candidate.is_file():
            return candidate
    return None


def _missing(data_dir: Path) -> list[str]:
    return [base for base in FILES.values() if _find(data_dir, base) is None]


def _where_to_put(data_dir: Path, missing: Sequence[str]) -> str:
    names = ", ".join(f"{b}.gz" for b in missing)
    return (
        f"put {names} (gzipped or not) in {data_dir}, "
        "or point --data-dir / HOGWILD_DATA at a directory holding them"
    )


def _pair(data_dir: Path, images_base: str, labels_base: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Read and check one images/labels pair; return normalised images and int64 labels."""
    img_path = _find(data_dir, images_base)
    lbl_path = _find(data_dir, labels_base)
    assert img_path is not None and lbl_path is not None  # checked by the caller
    images = read_idx(img_path)
    labels = read_idx(lbl_path)
    if images.dim() != 3 or tuple(images.shape[1:]) != (28, 28):
        shape = "x".join(str(d) for d in images.shape)
        raise UsageError(f"{img_path.name}: expected N x 28 x 28 images, file holds {shape}")
    if labels.dim() != 1:
        shape = "x".join(str(d) for d in labels.shape)
        raise UsageError(f"{lbl_path.name}: expected a 1-d list of labels, file holds {shape}")
    if images.shape[0] != labels.shape[0]:
        raise UsageError(
            f"{img_path.name} has {images.shape[0]} images but {lbl_path.name} has "
            f"{labels.shape[0]} labels"
        )
    if images.shape[0] == 0:
        raise UsageError(f"{img_path.name}: holds no images")
    top = int(labels.max())
    if top > 9:
        raise UsageError(f"{lbl_path.name}: label {top} out of range 0..9")
    return _normalise(images), labels.to(torch.int64)


def _normalise(images: torch.Tensor) -> torch.Tensor:
    """uint8 [N, 28, 28] -> float32 [N, 1, 28, 28], standardised with the training stats."""
    return images.unsqueeze(1).to(torch.float32).div_(255.0).sub_(MNIST_MEAN).div_(MNIST_STD)


def load_mnist(
    data_dir: str | Path,
    download: bool = True,
    *,
    mirrors: Sequence[str] = MIRRORS,
    checksums: Mapping[str, str] = MD5,
) -> MnistData:
    """Load (downloading first if allowed and needed) and normalise all of MNIST.

    Everything is read eagerly into memory (~220 MB as float32), which is what lets the
    Hogwild! workers share it; ``mirrors``/``checksums`` are for tests and odd setups.
    """
    data_dir = Path(data_dir)
    missing = _missing(data_dir)
    if missing:
        if not download:
            raise UsageError(
                f"MNIST files missing in {data_dir} (download disabled): "
                + _where_to_put(data_dir, missing)
            )
        download_mnist(data_dir, mirrors=mirrors, checksums=checksums)
    train_x, train_y = _pair(data_dir, FILES["train_images"], FILES["train_labels"])
    test_x, test_y = _pair(data_dir, FILES["test_images"], FILES["test_labels"])
    return MnistData(train_x, train_y, test_x, test_y)


def load_data(
    data_dir: str | Path, download: bool = False, train_subset: int | None = None
) -> MnistData:
    """All of MNIST (or the first ``train_subset`` training images), in shared memory."""
    data = load_mnist(data_dir, download=download)
    if train_subset is not None:
        if train_subset > data.train_images.shape[0]:
            raise UsageError(
                f"--train-subset {train_subset} exceeds the "
                f"{data.train_images.shape[0]} training images"
            )
        data.train_images = data.train_images[:train_subset].clone()
        data.train_labels = data.train_labels[:train_subset].clone()
    return data.share_memory_()


def load_test_set(data_dir: str | Path) -> tuple[torch.Tensor, torch.Tensor]:
    """Only the 10k test images and labels, normalised (the evaluator needs no more)."""
    data_dir = Path(data_dir)
    tensors = []
    for base in (FILES["test_images"], FILES["test_labels"]):
        raw = data_dir / base
        tensors.append(read_idx(raw if raw.is_file() else data_dir / f"{base}.gz"))
    images, labels = tensors
    return _normalise(images), labels.to(torch.int64)


# ----------------------------------------------------------------------- download


def _urlopen(url: str, timeout: float) -> BinaryIO:
    req = urllib.request.Request(url, headers={"User-Agent": "hogwild-a3c"})
    return urllib.request.urlopen(req, timeout=timeout)


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _fetch(opener: Opener, url: str, timeout: float, dest: Path, md5: str) -> str | None:
    """Download url to dest atomically; return None on success or a short failure reason.

    Network errors other than HTTP errors are raised (the caller skips that mirror). A
    local write error (disk full, folder gone) is a UsageError: no mirror can fix it.
    """
    try:
        fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    except OSError as e:
        raise _cannot_write(dest, e) from None
    tmp = Path(tmp_name)
    try:
        digest = hashlib.md5()
        with os.fdopen(fd, "wb") as out, opener(url, timeout) as resp:
            while chunk := resp.read(1 << 20):
                digest.update(chunk)
                try:
                    out.write(chunk)
                except OSError as e:
                    raise _cannot_write(dest, e) from None
            try:
                out.flush()
            except OSError as e:
                raise _cannot_write(dest, e) from None
        if digest.hexdigest() != md5:
            return f"{url}: MD5 {digest.hexdigest()} != expected {md5}"
        try:
            os.replace(tmp, dest)
        except OSError as e:
            raise _cannot_write(dest, e) from None
        return None
    finally:
        tmp.unlink(missing_ok=True)


def _cannot_write(dest: Path, e: OSError) -> UsageError:
    return UsageError(
        f"cannot write {dest} ({os_reason(e)}); "
        + _where_to_put(dest.parent, [dest.name.removesuffix(".gz")])
    )


def download_mnist(
    data_dir: str | Path,
    *,
    mirrors: Sequence[str] = MIRRORS,
    checksums: Mapping[str, str] = MD5,
    opener: Opener = _urlopen,
    timeout: float = DOWNLOAD_TIMEOUT_S,
    log: Callable[[str], None] = _stderr,
) -> None:
    """Fetch whichever of the four .gz files are missing from ``data_dir``.

    Each file is verified by MD5 (a bad copy is deleted and the next mirror tried) and
    written via a temp file + ``os.replace`` so an interrupted download never leaves a
    half file that would later look present. A mirror that cannot be reached at all is
    not retried for the remaining files, so being offline costs one timeout per mirror.
    """
    data_dir = Path(data_dir)
    missing = _missing(data_dir)
    if not missing:
        return
    # An unusable folder is the user's to fix, before any network traffic: one line.
    try:
        check_writable(data_dir, "MNIST data folder")
    except UsageError as e:
        raise UsageError(f"{e}; {_where_to_put(data_dir, missing)}") from None
    make_dirs(data_dir, "MNIST data folder")

    dead: set[str] = set()
    still_missing: list[str] = []
    reasons: list[str] = []
    for base in missing:
        gz = f"{base}.gz"
        md5 = checksums.get(gz)
        if md5 is None:
            raise ValueError(f"no checksum known for {gz}")
        done = False
        for mirror in mirrors:
            if mirror in dead:
                continue
            url = mirror.rstrip("/") + "/" + gz
            log(f"downloading {url}")
            try:
                failure = _fetch(opener, url, timeout, data_dir / gz, md5)
            except urllib.error.HTTPError as e:
                failure = f"{url}: HTTP {e.code}"
            except (urllib.error.URLError, OSError, ValueError) as e:
                # Unreachable (DNS, refused, timeout, no such local file): try next mirror.
                reason = getattr(e, "reason", None) or e
                failure = f"{url}: {reason}"
                if not url.startswith("file:"):
                    dead.add(mirror)
            if failure is None:
                done = True
                break
            log(f"  failed: {failure}")
            reasons.append(failure)
        if not done:
            still_missing.append(base)
    if still_missing:
        last = f" (last error: {' '.join(reasons[-1].split())})" if reasons else ""
        raise UsageError(
            f"could not download MNIST from any mirror{last}; "
            + _where_to_put(data_dir, still_missing)
        )
