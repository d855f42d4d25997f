"""Tests for hogwild.mnist.data: IDX parsing, validation errors, offline download, real data."""

from __future__ import annotations

import gzip
import hashlib
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import MNIST_FILES, locate_mnist, require_mnist

from hogwild.errors import UsageError
from hogwild.mnist import data as mnist_data
from hogwild.mnist.data import (
    FILES,
    MD5,
    MnistData,
    default_data_dir,
    download_mnist,
    load_mnist,
    read_idx,
)


def idx_bytes(array: np.ndarray, magic: int | None = None) -> bytes:
    """Serialise a uint8 array as IDX (big-endian magic, dims, payload)."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    if magic is None:
        magic = 0x00000800 | array.ndim
    header = struct.pack(">I", magic) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.tobytes()


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def make_mnist_dir(
    d: Path, n_train: int = 12, n_test: int = 5, gz: bool = True, seed: int = 0
) -> dict[str, bytes]:
    """Write a tiny fake MNIST into d; return the file contents written, by file name."""
    rng = np.random.default_rng(seed)
    d.mkdir(parents=True, exist_ok=True)
    arrays = {
        FILES["train_images"]: rng.integers(0, 256, (n_train, 28, 28)),
        FILES["train_labels"]: rng.integers(0, 10, n_train),
        FILES["test_images"]: rng.integers(0, 256, (n_test, 28, 28)),
        FILES["test_labels"]: rng.integers(0, 10, n_test),
    }
    written = {}
    for base, arr in arrays.items():
        name = f"{base}.gz" if gz else base
        raw = idx_bytes(arr)
        data = gzip.compress(raw, mtime=0) if gz else raw
        (d / name).write_bytes(data)
        written[name] = data
    return written


def md5_table(files: dict[str, bytes]) -> dict[str, str]:
    return {name: hashlib.md5(data).hexdigest() for name, data in files.items()}


def quiet(msg: str) -> None:
    pass


# ---------------------------------------------------------------- good IDX files


@pytest.mark.parametrize("suffix", ["", ".gz"])
@pytest.mark.parametrize(
    "shape", [(7,), (3, 4), (5, 28, 28), (2, 3, 4, 5), (0, 28, 28)], ids=lambda s: str(s)
)
def test_read_idx_roundtrip(tmp_path: Path, suffix: str, shape: tuple[int, ...]) -> None:
    arr = np.random.default_rng(1).integers(0, 256, shape, dtype=np.uint8)
    path = write(tmp_path / f"x-idx{len(shape)}-ubyte{suffix}", idx_bytes(arr))
    t = read_idx(path)
    assert t.dtype == torch.uint8
    assert tuple(t.shape) == shape
    assert np.array_equal(t.numpy(), arr)
    t += 1  # writable, owns its memory


def test_read_idx_sniffs_gzip_without_gz_suffix(tmp_path: Path) -> None:
    arr = np.arange(10, dtype=np.uint8)
    path = tmp_path / "labels-idx1-ubyte"
    path.write_bytes(gzip.compress(idx_bytes(arr)))
    assert read_idx(str(path)).tolist() == list(range(10))


# ----------------------------------------------------------------- bad IDX files


def bad(tmp_path: Path, name: str, data: bytes, *needles: str, gz: bool = False) -> None:
    path = tmp_path / name
    path.write_bytes(gzip.compress(data) if gz else data)
    with pytest.raises(UsageError) as info:
        read_idx(path)
    msg = str(info.value)
    assert "\n" not in msg
    assert name in msg
    for needle in needles:
        assert needle in msg, msg


def test_wrong_magic(tmp_path: Path) -> None:
    bad(tmp_path, "a-idx3-ubyte", b"\x12\x34\x08\x03" + b"\0" * 20, "bad magic number 0x12340803")


def test_unsupported_dtype(tmp_path: Path) -> None:
    data = struct.pack(">II", 0x00000D01, 2) + b"\0" * 8  # float32 labels
    bad(tmp_path, "f-idx1-float", data, "unsupported IDX data type 0x0D")


@pytest.mark.parametrize("ndim", [0, 5])
def test_bad_ndim(tmp_path: Path, ndim: int) -> None:
    data = struct.pack(">I", 0x00000800 | ndim) + struct.pack(f">{ndim}I", *([1] * ndim)) + b"x"
    bad(tmp_path, "n-idx-ubyte", data, f"{ndim} dims")


def test_truncated_payload(tmp_path: Path) -> None:
    data = idx_bytes(np.zeros((3, 28, 28), np.uint8))[:-100]
    bad(
        tmp_path,
        "train-images-idx3-ubyte.gz",
        data,
        "truncated: header says 3x28x28 = 2352 bytes of data, file has 2252",
        gz=True,
    )


def test_truncated_header(tmp_path: Path) -> None:
    bad(tmp_path, "h-idx3-ubyte", struct.pack(">II", 0x803, 60000), "truncated header")
    bad(tmp_path, "tiny-idx3-ubyte", b"\0\0", "truncated")


def test_trailing_bytes(tmp_path: Path) -> None:
    data = idx_bytes(np.zeros(4, np.uint8)) + b"junk"
    bad(tmp_path, "l-idx1-ubyte", data, "trailing bytes: header says 4 = 4 bytes", "has 8")


def test_empty_file(tmp_path: Path) -> None:
    bad(tmp_path, "empty-idx1-ubyte", b"", "empty file")
    bad(tmp_path, "empty-idx1-ubyte.gz", b"", "empty", gz=True)


def test_corrupt_gzip(tmp_path: Path) -> None:
    good = gzip.compress(idx_bytes(np.arange(200, dtype=np.uint8)))
    flipped = bytearray(good)
    flipped[20] ^= 0xFF
    bad(tmp_path, "c1-idx1-ubyte.gz", bytes(flipped), "corrupt gzip")
    bad(tmp_path, "c2-idx1-ubyte.gz", good[: len(good) // 2], "corrupt gzip")
    bad(tmp_path, "c3-idx1-ubyte.gz", idx_bytes(np.arange(3, dtype=np.uint8)), "not a gzip file")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="nope-idx1-ubyte: no such file"):
        read_idx(tmp_path / "nope-idx1-ubyte")


# ------------------------------------------------------------------- load_mnist


@pytest.mark.parametrize("gz", [True, False])
def test_load_fake_mnist(tmp_path: Path, gz: bool) -> None:
    make_mnist_dir(tmp_path, gz=gz)
    data = load_mnist(tmp_path, download=False)
    assert data.train_images.shape == (12, 1, 28, 28)
    assert data.train_images.dtype == torch.float32
    assert data.train_labels.shape == (12,)
    assert data.train_labels.dtype == torch.int64
    assert data.test_images.shape == (5, 1, 28, 28)
    assert data.test_labels.shape == (5,)
    raw = read_idx(tmp_path / (FILES["train_images"] + (".gz" if gz else "")))
    expected = (raw.float() / 255 - 0.1307) / 0.3081
    assert torch.allclose(data.train_images[:, 0], expected, atol=1e-6)


def test_share_memory(tmp_path: Path) -> None:
    make_mnist_dir(tmp_path)
    data = load_mnist(tmp_path, download=False)
    assert data.share_memory_() is data
    for t in (data.train_images, data.train_labels, data.test_images, data.test_labels):
        assert t.is_shared()


def test_count_mismatch(tmp_path: Path) -> None:
    make_mnist_dir(tmp_path)
    write(tmp_path / (FILES["test_labels"] + ".gz"), idx_bytes(np.zeros(4, np.uint8)))
    with pytest.raises(UsageError, match="has 5 images but .* has 4 labels"):
        load_mnist(tmp_path, download=False)


def test_label_out_of_range(tmp_path: Path) -> None:
    make_mnist_dir(tmp_path)
    write(tmp_path / (FILES["train_labels"] + ".gz"), idx_bytes(np.full(12, 10, np.uint8)))
    with pytest.raises(UsageError, match="label 10 out of range 0..9"):
        load_mnist(tmp_path, download=False)


def test_wrong_image_shape(tmp_path: Path) -> None:
    make_mnist_dir(tmp_path)
    write(tmp_path / (FILES["test_images"] + ".gz"), idx_bytes(np.zeros((5, 32, 32), np.uint8)))
    with pytest.raises(UsageError, match="expected N x 28 x 28 images, file holds 5x32x32"):
        load_mnist(tmp_path, download=False)


def test_missing_without_download(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as info:
        load_mnist(tmp_path / "nowhere", download=False)
    msg = str(info.value)
    assert "\n" not in msg
    assert str(tmp_path / "nowhere") in msg
    for base in FILES.values():
        assert base in msg
    assert "--data-dir" in msg and "HOGWILD_DATA" in msg


def test_missing_with_download_all_mirrors_fail(tmp_path: Path) -> None:
    empty = tmp_path / "empty_mirror"
    empty.mkdir()
    target = tmp_path / "data"
    with pytest.raises(UsageError) as info:
        load_mnist(target, mirrors=[empty.as_uri() + "/", (tmp_path / "gone").as_uri()])
    msg = str(info.value)
    assert "\n" not in msg
    assert "could not download MNIST" in msg
    assert str(target) in msg
    for name in MD5:
        assert name in msg
    assert "--data-dir" in msg and "HOGWILD_DATA" in msg
    assert not [p for p in target.iterdir()], "no partial files left behind"


# --------------------------------------------------------------------- download


def test_download_from_file_mirror_with_md5_check(tmp_path: Path) -> None:
    mirror_bad, mirror_good = tmp_path / "bad", tmp_path / "good"
    files = make_mnist_dir(mirror_good, seed=1)
    make_mnist_dir(mirror_bad, seed=2)  # same names, different content -> MD5 mismatch
    target = tmp_path / "data"
    log: list[str] = []
    download_mnist(
        target,
        mirrors=[mirror_bad.as_uri(), mirror_good.as_uri() + "/"],
        checksums=md5_table(files),
        log=log.append,
    )
    assert sorted(p.name for p in target.iterdir()) == sorted(files)
    for name, data in files.items():
        assert (target / name).read_bytes() == data
    assert sum("MD5" in line for line in log) == 4  # every bad-mirror copy rejected
    data = load_mnist(target, download=False)
    assert data.train_images.shape == (12, 1, 28, 28)


def test_download_md5_mismatch_everywhere_is_rejected(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    files = make_mnist_dir(mirror)
    table = md5_table(files)
    table[FILES["train_labels"] + ".gz"] = "0" * 32
    target = tmp_path / "data"
    with pytest.raises(UsageError) as info:
        download_mnist(target, mirrors=[mirror.as_uri()], checksums=table, log=quiet)
    msg = str(info.value)
    assert "MD5" in msg and FILES["train_labels"] in msg
    assert FILES["train_images"] not in msg  # only the bad one is reported missing
    present = sorted(p.name for p in target.iterdir())
    assert present == sorted(n for n in files if n != FILES["train_labels"] + ".gz")


def test_download_only_fetches_missing_files(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    files = make_mnist_dir(mirror)
    target = tmp_path / "data"
    make_mnist_dir(target, gz=False, seed=5)
    (target / FILES["test_labels"]).unlink()
    fetched: list[str] = []

    def opener(url: str, timeout: float):
        fetched.append(url)
        return open(mirror / url.rsplit("/", 1)[1], "rb")

    download_mnist(
        target,
        mirrors=["https://example.invalid/mnist"],
        checksums=md5_table(files),
        opener=opener,
        log=quiet,
    )
    assert fetched == ["https://example.invalid/mnist/" + FILES["test_labels"] + ".gz"]
    load_mnist(target, download=False)


def test_unreachable_mirror_is_skipped_after_first_failure(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    files = make_mnist_dir(mirror)
    calls: list[str] = []

    def opener(url: str, timeout: float):
        calls.append(url)
        if url.startswith("https://down.invalid"):
            raise OSError("network is unreachable")
        return open(mirror / url.rsplit("/", 1)[1], "rb")

    download_mnist(
        tmp_path / "data",
        mirrors=["https://down.invalid/", "https://up.invalid/"],
        checksums=md5_table(files),
        opener=opener,
        log=quiet,
    )
    assert sum(u.startswith("https://down.invalid") for u in calls) == 1
    assert sum(u.startswith("https://up.invalid") for u in calls) == 4


def test_well_known_md5s_match_shared_copy(mnist_dir: Path) -> None:
    for name, md5 in MD5.items():
        assert hashlib.md5((mnist_dir / name).read_bytes()).hexdigest() == md5, name


def test_download_real_files_via_file_mirror(mnist_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "data"
    download_mnist(target, mirrors=[mnist_dir.as_uri()], log=quiet)  # default MD5 table
    assert sorted(p.name for p in target.iterdir()) == sorted(MD5)


# ------------------------------------------------------------------ misc / real


def test_default_data_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("HOGWILD_DATA", raising=False)
    assert default_data_dir() == Path("data/mnist")
    monkeypatch.setenv("HOGWILD_DATA", str(tmp_path))
    assert default_data_dir() == tmp_path


def test_real_mnist(mnist_dir: Path) -> None:
    data = load_mnist(mnist_dir, download=False)
    assert isinstance(data, MnistData)
    assert data.train_images.shape == (60000, 1, 28, 28)
    assert data.train_images.dtype == torch.float32
    assert data.train_labels.shape == (60000,)
    assert data.train_labels.dtype == torch.int64
    assert data.test_images.shape == (10000, 1, 28, 28)
    assert data.test_images.dtype == torch.float32
    assert data.test_labels.shape == (10000,)
    assert data.test_labels.dtype == torch.int64
    assert abs(data.train_images.mean().item()) < 1e-3
    assert abs(data.train_images.std().item() - 1.0) < 1e-3
    assert data.train_labels.bincount().tolist()[:2] == [5923, 6742]
    assert data.test_labels.bincount().tolist() == [
        980,
        1135,
        1032,
        1010,
        982,
        892,
        958,
        1028,
        974,
        1009,
    ]


def test_module_constants() -> None:
    assert mnist_data.MIRRORS[0].startswith("https://ossci-datasets.s3.amazonaws.com/")
    assert set(MD5) == {f"{b}.gz" for b in FILES.values()}


# ------------------------------------------------- where the tests find the real data


def test_the_tests_look_for_the_standard_files() -> None:
    assert sorted(MNIST_FILES) == sorted(MD5)


def _complete(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for name in MNIST_FILES:
        (folder / name).write_bytes(b"")
    return folder


def test_the_tests_find_mnist_in_hogwild_data_then_beside_the_checkout(tmp_path: Path) -> None:
    env, sibling = _complete(tmp_path / "env"), _complete(tmp_path / "sibling")
    assert locate_mnist({"HOGWILD_DATA": str(env)}, sibling) == (env, "")
    assert locate_mnist({}, sibling) == (sibling, "")
    # $HOGWILD_DATA may be an empty download target: the sibling folder is still used.
    assert locate_mnist({"HOGWILD_DATA": str(tmp_path / "empty")}, sibling) == (sibling, "")
    (env / MNIST_FILES[2]).unlink()
    assert locate_mnist({"HOGWILD_DATA": str(env)}, sibling) == (sibling, "")
    assert require_mnist({"CI": "true", "HOGWILD_DATA": str(env)}, sibling) == sibling


def test_missing_mnist_skips_saying_where_it_looked_but_fails_under_ci(tmp_path: Path) -> None:
    partial, sibling = _complete(tmp_path / "partial"), tmp_path / "no-shared"
    (partial / MNIST_FILES[0]).unlink()
    environ = {"HOGWILD_DATA": str(partial)}
    for ci in (None, "", "0", "false"):
        with pytest.raises(pytest.skip.Exception) as skipped:
            require_mnist({**environ, **({"CI": ci} if ci is not None else {})}, sibling)
        reason = str(skipped.value)
        assert f"{partial} ($HOGWILD_DATA): no {MNIST_FILES[0]}" in reason, reason
        assert f"{sibling} (shared/data/mnist beside the checkout): no such folder" in reason
        assert "Point HOGWILD_DATA at a folder" in reason
    for ci in ("true", "1"):
        with pytest.raises(pytest.fail.Exception) as failed:
            require_mnist({**environ, "CI": ci}, sibling)
        assert str(failed.value).startswith(f"CI={ci}: the MNIST tests must run, but real MNIST")
        assert str(sibling) in str(failed.value)
