"""The data set loaders and the downloader, on tiny files written here in every format."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import pickle
import struct
import tarfile
from pathlib import Path

import numpy as np
import pytest

from deepfault.data import download as dl
from deepfault.data import list_datasets, load_dataset
from deepfault.data import mnist as mnist_mod
from deepfault.data.cifar import CIFAR10_CLASSES
from deepfault.data.mnist import FASHION_CLASSES, read_idx
from deepfault.data.npz import load_npz
from deepfault.errors import DeepFaultError

STEMS = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}
MNIST_TRAIN_IMAGES_MD5 = "f68b3c2dcbeaaa9fbdd348bbdeb94873"


@pytest.fixture(autouse=True)
def _private_user_cache(tmp_path, monkeypatch):
    """Never touch the real user cache directory."""
    monkeypatch.setattr(mnist_mod, "_user_cache_root", lambda: tmp_path / "user-cache")


def idx_bytes(array: np.ndarray) -> bytes:
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = b"\x00\x00\x08" + bytes([array.ndim]) + struct.pack(f">{array.ndim}i", *array.shape)
    return header + array.tobytes()


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def mnist_arrays(n_train=6, n_test=4, seed=0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x_train": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "y_train": rng.integers(0, 10, n_train, dtype=np.uint8),
        "x_test": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "y_test": rng.integers(0, 10, n_test, dtype=np.uint8),
    }


def write_mnist(root: Path, arrays=None, *, folder="MNIST", gz=True) -> dict[str, np.ndarray]:
    arrays = mnist_arrays() if arrays is None else arrays
    raw = root / folder / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for role, stem in STEMS.items():
        data = idx_bytes(arrays[role])
        if gz:
            (raw / f"{stem}.gz").write_bytes(gzip.compress(data))
        else:
            (raw / stem).write_bytes(data)
    return arrays


# -- MNIST and Fashion-MNIST ---------------------------------------------------------


def test_registry_lists_the_loaders():
    assert {"mnist", "fashion-mnist", "cifar10", "svhn", "digits"} <= set(list_datasets())


@pytest.mark.parametrize("gz", [True, False], ids=["gzip", "plain"])
def test_mnist_reads_idx_files(tmp_path, gz):
    arrays = write_mnist(tmp_path, gz=gz)
    ds = load_dataset("mnist", data_dir=tmp_path)
    assert ds.name == "mnist"
    assert ds.x_train.shape == (6, 1, 28, 28)
    assert ds.x_test.shape == (4, 1, 28, 28)
    assert ds.x_train.dtype == np.float32
    assert ds.y_train.dtype == np.int64
    np.testing.assert_array_equal(ds.x_train[:, 0], arrays["x_train"].astype(np.float32) / 255)
    np.testing.assert_array_equal(ds.x_test[:, 0], arrays["x_test"].astype(np.float32) / 255)
    np.testing.assert_array_equal(ds.y_train, arrays["y_train"])
    np.testing.assert_array_equal(ds.y_test, arrays["y_test"])
    assert ds.x_train.min() >= 0.0
    assert ds.x_train.max() <= 1.0
    assert ds.bounds == (0.0, 1.0)
    assert ds.class_names == tuple("0123456789")
    assert ds.input_shape == (1, 28, 28)
    assert ds.num_classes == 10


def test_fashion_mnist_layout_and_class_names(tmp_path):
    arrays = write_mnist(tmp_path, folder="FashionMNIST")
    ds = load_dataset("fashion-mnist", data_dir=tmp_path)
    assert ds.class_names == FASHION_CLASSES
    assert ds.class_names[0] == "T-shirt/top"
    assert ds.class_names[9] == "Ankle boot"
    np.testing.assert_array_equal(ds.y_test, arrays["y_test"])
    with pytest.raises(DeepFaultError, match="deepfault data download mnist"):
        load_dataset("mnist", data_dir=tmp_path)


def test_plain_file_preferred_over_gzip(tmp_path):
    write_mnist(tmp_path, mnist_arrays(seed=1), gz=True)
    plain = write_mnist(tmp_path, mnist_arrays(seed=2), gz=False)
    ds = load_dataset("mnist", data_dir=tmp_path)
    np.testing.assert_array_equal(ds.y_train, plain["y_train"])


def test_missing_file_names_it_and_the_command(tmp_path):
    write_mnist(tmp_path)
    (tmp_path / "MNIST/raw/t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DeepFaultError) as err:
        load_dataset("mnist", data_dir=tmp_path)
    msg = str(err.value)
    assert "t10k-labels-idx1-ubyte" in msg
    assert "deepfault data download mnist" in msg
    assert "\n" not in msg


def _corrupt_and_load(tmp_path, role, data: bytes, name="mnist", folder="MNIST"):
    write_mnist(tmp_path, folder=folder)
    path = tmp_path / folder / "raw" / f"{STEMS[role]}.gz"
    path.write_bytes(data)
    with pytest.raises(DeepFaultError) as err:
        load_dataset(name, data_dir=tmp_path, cache=False)
    return str(err.value)


def test_bad_magic_number(tmp_path):
    labels_as_images = idx_bytes(np.zeros(6, np.uint8))
    msg = _corrupt_and_load(tmp_path, "x_train", gzip.compress(labels_as_images))
    assert "bad IDX magic number 0x00000801" in msg
    assert "train-images-idx3-ubyte.gz" in msg
    assert MNIST_TRAIN_IMAGES_MD5 in msg
    assert "9,912,422 bytes" in msg
    assert "deepfault data download mnist" in msg


def test_truncated_uncompressed_payload(tmp_path):
    data = idx_bytes(mnist_arrays()["x_train"])[:-100]
    msg = _corrupt_and_load(tmp_path, "x_train", gzip.compress(data))
    assert "ends after" in msg
    assert f"{len(data):,}" in msg
    assert MNIST_TRAIN_IMAGES_MD5 in msg


def test_truncated_gzip_stream(tmp_path):
    data = gzip.compress(idx_bytes(mnist_arrays()["x_train"]))
    msg = _corrupt_and_load(tmp_path, "x_train", data[: len(data) // 2])
    assert "cannot decompress" in msg
    assert MNIST_TRAIN_IMAGES_MD5 in msg


def test_short_header(tmp_path):
    msg = _corrupt_and_load(tmp_path, "y_test", b"\x00\x00\x08\x01\x00")
    assert "header is cut short" in msg
    assert "ec29112dd5afa0611ce80d1b7f02629c" in msg


def test_empty_file(tmp_path):
    msg = _corrupt_and_load(tmp_path, "y_test", b"")
    assert "too few for an IDX header" in msg


def test_fashion_error_names_fashion_checksum(tmp_path):
    msg = _corrupt_and_load(tmp_path, "x_test", b"junk", name="fashion-mnist", folder="FashionMNIST")
    assert "bef4ecab320f06d8554ea6380940ec79" in msg
    assert "deepfault data download fashion-mnist" in msg


def test_trailing_bytes_are_rejected(tmp_path):
    path = tmp_path / "labels"
    path.write_bytes(idx_bytes(np.arange(5, dtype=np.uint8)) + b"\x00")
    with pytest.raises(DeepFaultError, match="has 14 bytes but its header"):
        read_idx(path, ndim=1)
    path.write_bytes(idx_bytes(np.arange(5, dtype=np.uint8)))
    np.testing.assert_array_equal(read_idx(path, ndim=1), np.arange(5))


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda a: a.update(y_train=a["y_train"][:-1]), "5 labels for 6 images"),
        (lambda a: a.update(y_test=np.full(4, 10, np.uint8)), "label 10 is outside 0-9"),
        (lambda a: a.update(x_test=np.zeros((4, 27, 28), np.uint8)), "images are (27, 28)"),
    ],
)
def test_inconsistent_files(tmp_path, change, problem):
    arrays = mnist_arrays()
    change(arrays)
    write_mnist(tmp_path, arrays)
    with pytest.raises(DeepFaultError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        load_dataset("mnist", data_dir=tmp_path)


# -- the processed cache -------------------------------------------------------------


def _forbid_decoding(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("the raw files were decoded although the cache is valid")

    monkeypatch.setattr(mnist_mod, "_decode", fail)


def test_cache_is_written_then_used(tmp_path, monkeypatch):
    arrays = write_mnist(tmp_path)
    first = load_dataset("mnist", data_dir=tmp_path)
    assert first.meta["cache_hit"] is False
    assert first.meta["cache"].startswith(str(tmp_path / "user-cache" / "mnist-"))
    assert sorted(p.name for p in Path(first.meta["cache"]).iterdir()) == [
        "deepfault-mnist-deepfault-cache.json",
        "deepfault-mnist-x_test.npy",
        "deepfault-mnist-x_train.npy",
        "deepfault-mnist-y_test.npy",
        "deepfault-mnist-y_train.npy",
    ]
    with monkeypatch.context() as m:
        _forbid_decoding(m)
        second = load_dataset("mnist", data_dir=tmp_path)
    assert second.meta["cache_hit"] is True
    for field in ("x_train", "y_train", "x_test", "y_test"):
        np.testing.assert_array_equal(getattr(second, field), getattr(first, field))
        assert getattr(second, field).dtype == getattr(first, field).dtype
    np.testing.assert_array_equal(second.y_test, arrays["y_test"])


def test_cache_invalidated_when_a_raw_file_changes(tmp_path):
    write_mnist(tmp_path)
    load_dataset("mnist", data_dir=tmp_path)
    # Same size, new content: only the mtime tells; set it explicitly so that coarse
    # file-system clocks cannot hide the change.
    new = mnist_arrays(seed=7)
    path = tmp_path / "MNIST/raw/t10k-labels-idx1-ubyte.gz"
    before = path.stat()
    path.write_bytes(gzip.compress(idx_bytes(new["y_test"])))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
    ds = load_dataset("mnist", data_dir=tmp_path)
    assert ds.meta["cache_hit"] is False
    np.testing.assert_array_equal(ds.y_test, new["y_test"])
    assert load_dataset("mnist", data_dir=tmp_path).meta["cache_hit"] is True


def test_cache_invalidated_when_switching_to_the_uncompressed_file(tmp_path):
    write_mnist(tmp_path, gz=True)
    load_dataset("mnist", data_dir=tmp_path)
    plain = write_mnist(tmp_path, mnist_arrays(seed=3), gz=False)
    ds = load_dataset("mnist", data_dir=tmp_path)
    assert ds.meta["cache_hit"] is False
    np.testing.assert_array_equal(ds.y_train, plain["y_train"])


def test_damaged_cache_is_rebuilt(tmp_path):
    arrays = write_mnist(tmp_path)
    first = load_dataset("mnist", data_dir=tmp_path)
    npy = Path(first.meta["cache"]) / "deepfault-mnist-x_train.npy"
    npy.write_bytes(npy.read_bytes()[:50])
    ds = load_dataset("mnist", data_dir=tmp_path)
    assert ds.meta["cache_hit"] is False
    np.testing.assert_array_equal(ds.x_train[:, 0] * 255, arrays["x_train"])


def test_read_only_data_dir_is_never_written(tmp_path):
    write_mnist(tmp_path)
    mnist_dir = tmp_path / "MNIST"
    before = sorted(p.relative_to(tmp_path) for p in mnist_dir.rglob("*"))
    mnist_dir.chmod(0o555)
    try:
        first = load_dataset("mnist", data_dir=tmp_path)
        second = load_dataset("mnist", data_dir=tmp_path)
    finally:
        mnist_dir.chmod(0o755)
    assert sorted(p.relative_to(tmp_path) for p in mnist_dir.rglob("*")) == before
    user_cache = tmp_path / "user-cache"
    assert first.meta["cache"].startswith(str(user_cache))
    assert not first.meta["cache_hit"]
    assert second.meta["cache"] == first.meta["cache"]
    assert second.meta["cache_hit"]


def test_writable_data_dir_is_not_written_either(tmp_path):
    write_mnist(tmp_path)
    before = sorted(p.relative_to(tmp_path) for p in (tmp_path / "MNIST").rglob("*"))
    ds = load_dataset("mnist", data_dir=tmp_path)
    assert ds.meta["cache"].startswith(str(tmp_path / "user-cache"))
    assert sorted(p.relative_to(tmp_path) for p in (tmp_path / "MNIST").rglob("*")) == before


def test_explicit_cache_dir_and_no_cache(tmp_path):
    write_mnist(tmp_path)
    ds = load_dataset("mnist", data_dir=tmp_path, cache_dir=tmp_path / "c")
    assert ds.meta["cache"] == str(tmp_path / "c")
    assert (tmp_path / "c").is_dir()
    ds = load_dataset("mnist", data_dir=tmp_path, cache=False)
    assert ds.meta["cache"] is None
    assert not (tmp_path / "MNIST" / "processed").exists()


# -- CIFAR-10 ------------------------------------------------------------------------


def cifar_batch(n: int, seed: int, *, bytes_keys=True) -> dict:
    rng = np.random.default_rng(seed)
    batch = {
        "batch_label": "training batch",
        "data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
        "labels": [int(v) for v in rng.integers(0, 10, n)],
        "filenames": [f"img_{i}.png" for i in range(n)],
    }
    if bytes_keys:  # as the official Python 2 pickles read with encoding="bytes"
        batch = {k.encode(): v for k, v in batch.items()}
    return batch


def write_cifar_batches(root: Path, *, protocol=2, bytes_keys=True) -> dict[str, dict]:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    batches = {}
    for i, name in enumerate(names):
        batches[name] = cifar_batch(3 if name != "test_batch" else 4, i, bytes_keys=bytes_keys)
        (folder / name).write_bytes(pickle.dumps(batches[name], protocol=protocol))
    return batches


def _key(batch, key):
    return batch[key.encode()] if key.encode() in batch else batch[key]


@pytest.mark.parametrize(("protocol", "bytes_keys"), [(2, True), (2, False), (4, False), (5, True)])
def test_cifar_pickle_batches(tmp_path, protocol, bytes_keys):
    batches = write_cifar_batches(tmp_path, protocol=protocol, bytes_keys=bytes_keys)
    ds = load_dataset("cifar10", data_dir=tmp_path)
    assert ds.x_train.shape == (15, 3, 32, 32)
    assert ds.x_test.shape == (4, 3, 32, 32)
    assert ds.x_train.dtype == np.float32
    assert ds.y_train.dtype == np.int64
    assert ds.bounds == (0.0, 255.0)
    assert ds.x_train.max() <= 255
    assert ds.x_train.max() > 1
    assert ds.class_names == CIFAR10_CLASSES
    assert ds.class_names[0] == "airplane"
    first = _key(batches["data_batch_1"], "data")
    # Row layout of the official batches: 1024 red, then 1024 green, then 1024 blue.
    np.testing.assert_array_equal(ds.x_train[0, 1, 0, :], first[0, 1024:1056])
    np.testing.assert_array_equal(ds.x_train[:3].reshape(3, -1), first)
    expected = np.concatenate([_key(batches[f"data_batch_{i}"], "labels") for i in range(1, 6)])
    np.testing.assert_array_equal(ds.y_train, expected)
    np.testing.assert_array_equal(ds.y_test, _key(batches["test_batch"], "labels"))


def test_cifar_scale01(tmp_path):
    write_cifar_batches(tmp_path)
    raw = load_dataset("cifar10", data_dir=tmp_path)
    scaled = load_dataset("cifar10", data_dir=tmp_path, scale01=True)
    assert scaled.bounds == (0.0, 1.0)
    assert scaled.x_test.max() <= 1.0
    np.testing.assert_allclose(scaled.x_test * 255, raw.x_test, rtol=1e-6)


class _Exploit:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_cifar_pickle_refuses_arbitrary_globals(tmp_path):
    write_cifar_batches(tmp_path)
    marker = tmp_path / "pwned"
    batch = cifar_batch(3, 0)
    batch[b"labels"] = _Exploit(marker)
    (tmp_path / "cifar-10-batches-py" / "data_batch_2").write_bytes(pickle.dumps(batch))
    with pytest.raises(DeepFaultError, match="not allowed in a CIFAR batch") as err:
        load_dataset("cifar10", data_dir=tmp_path)
    assert not marker.exists()
    assert "data_batch_2" in str(err.value)
    assert "d4bba439e000b95fd0a9bffe97cbabec" in str(err.value)


def test_cifar_truncated_batch(tmp_path):
    write_cifar_batches(tmp_path)
    path = tmp_path / "cifar-10-batches-py" / "data_batch_1"
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(DeepFaultError) as err:
        load_dataset("cifar10", data_dir=tmp_path)
    msg = str(err.value)
    assert "data_batch_1" in msg
    assert "c99cafc152244af753f735de768cd75f" in msg
    assert "deepfault data download cifar10" in msg


def test_cifar_missing_batch_and_missing_data(tmp_path):
    with pytest.raises(DeepFaultError, match="CIFAR-10 not found.*deepfault data download"):
        load_dataset("cifar10", data_dir=tmp_path)
    write_cifar_batches(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(DeepFaultError, match="data_batch_3 is missing"):
        load_dataset("cifar10", data_dir=tmp_path)


def test_cifar_batch_with_wrong_content(tmp_path):
    write_cifar_batches(tmp_path)
    batch = cifar_batch(3, 0)
    batch[b"data"] = batch[b"data"][:, :100]
    (tmp_path / "cifar-10-batches-py" / "test_batch").write_bytes(pickle.dumps(batch))
    with pytest.raises(DeepFaultError, match=r"'data' should be uint8 N x 3072"):
        load_dataset("cifar10", data_dir=tmp_path)
    batch = cifar_batch(3, 0)
    batch[b"labels"] = [0, 1, 10]
    (tmp_path / "cifar-10-batches-py" / "test_batch").write_bytes(pickle.dumps(batch))
    with pytest.raises(DeepFaultError, match=r"labels range over 0\.\.10"):
        load_dataset("cifar10", data_dir=tmp_path)


def test_cifar_npz_layout(tmp_path):
    rng = np.random.default_rng(0)
    folder = tmp_path / "cifar10"
    folder.mkdir()
    x_train = rng.integers(0, 256, (5, 32, 32, 3), dtype=np.uint8)
    x_test = rng.integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    np.savez(folder / "cifar10_train.npz", x=x_train, y=np.arange(5).reshape(5, 1))
    np.savez(folder / "cifar10_test.npz", x=x_test, y=np.array([9, 0]))
    ds = load_dataset("cifar10", data_dir=tmp_path)
    assert ds.x_train.shape == (5, 3, 32, 32)
    assert ds.x_train.dtype == np.float32
    np.testing.assert_array_equal(ds.x_train, x_train.transpose(0, 3, 1, 2))
    np.testing.assert_array_equal(ds.y_train, np.arange(5))
    np.testing.assert_array_equal(ds.y_test, [9, 0])
    assert ds.y_test.dtype == np.int64
    assert ds.bounds == (0.0, 255.0)
    assert load_dataset("cifar10", data_dir=tmp_path, scale01=True).x_test.max() <= 1.0

    np.savez(folder / "cifar10_test.npz", x=x_test.astype(np.float32), y=np.array([9, 0]))
    with pytest.raises(DeepFaultError, match="save x as uint8 N x 32 x 32 x 3"):
        load_dataset("cifar10", data_dir=tmp_path)
    (folder / "cifar10_test.npz").unlink()
    with pytest.raises(DeepFaultError, match="cifar10_test.npz is missing"):
        load_dataset("cifar10", data_dir=tmp_path)


# -- SVHN ----------------------------------------------------------------------------


def write_svhn(folder: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    from scipy.io import savemat

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    out = {}
    for split, n in (("train", 5), ("test", 3)):
        x = rng.integers(0, 256, (32, 32, 3, n), dtype=np.uint8)
        y = np.array([[10], [1], [2], [9], [10]][:n], dtype=np.uint8)
        savemat(folder / f"{split}_32x32.mat", {"X": x, "y": y})
        out[split] = (x, y)
    return out


@pytest.mark.parametrize("sub", ["svhn", "."])
def test_svhn(tmp_path, sub):
    written = write_svhn(tmp_path / sub)
    ds = load_dataset("svhn", data_dir=tmp_path)
    assert ds.x_train.shape == (5, 3, 32, 32)
    assert ds.x_test.shape == (3, 3, 32, 32)
    assert ds.x_train.dtype == np.float32
    assert ds.y_train.dtype == np.int64
    x, _ = written["train"]
    np.testing.assert_array_equal(ds.x_train[4, 2, 7, 3], x[7, 3, 2, 4])
    np.testing.assert_array_equal(ds.x_train, x.transpose(3, 2, 0, 1))
    np.testing.assert_array_equal(ds.y_train, [0, 1, 2, 9, 0])
    np.testing.assert_array_equal(ds.y_test, [0, 1, 2])
    assert ds.bounds == (0.0, 255.0)
    assert ds.class_names == tuple("0123456789")
    scaled = load_dataset("svhn", data_dir=tmp_path, scale01=True)
    assert scaled.bounds == (0.0, 1.0)
    np.testing.assert_allclose(scaled.x_train * 255, ds.x_train, rtol=1e-6)


def test_svhn_missing_and_corrupt(tmp_path):
    with pytest.raises(DeepFaultError, match="train_32x32.mat not found.*download svhn"):
        load_dataset("svhn", data_dir=tmp_path)
    write_svhn(tmp_path / "svhn")
    path = tmp_path / "svhn" / "test_32x32.mat"
    path.write_bytes(path.read_bytes()[:300])
    with pytest.raises(DeepFaultError) as err:
        load_dataset("svhn", data_dir=tmp_path)
    msg = str(err.value)
    assert "test_32x32.mat" in msg
    assert "eb5a983be6a315427106f1b164d9cef3" in msg
    assert "deepfault data download svhn" in msg


def test_svhn_wrong_arrays(tmp_path):
    from scipy.io import savemat

    write_svhn(tmp_path / "svhn")
    savemat(
        tmp_path / "svhn" / "test_32x32.mat", {"X": np.zeros((28, 28, 1, 2), np.uint8), "y": np.ones((2, 1))}
    )
    with pytest.raises(DeepFaultError, match="not uint8 32x32x3xN"):
        load_dataset("svhn", data_dir=tmp_path)
    savemat(tmp_path / "svhn" / "test_32x32.mat", {"Z": np.zeros(3)})
    with pytest.raises(DeepFaultError, match="lacks 'X' or 'y'"):
        load_dataset("svhn", data_dir=tmp_path)


@pytest.mark.parametrize(("y", "message"), [
    (np.array([["3"], ["x"], ["1"]]), "'y' holds <U1 values, not numbers 1..10"),
    (np.array([[1.0], [np.nan], [2.0]]), "'y' holds NaN, infinite or fractional labels"),
    (np.array([[1.0], [2.5], [2.0]]), "'y' holds NaN, infinite or fractional labels"),
    (np.array([[1.0], [1e300], [2.0]]), "labels range over"),
], ids=["strings", "NaN", "fraction", "huge"])
def test_svhn_labels_that_are_no_whole_numbers_are_refused(tmp_path, y, message):
    """Issue 43: text was a ValueError traceback, NaN a label of -2**63, 2.5 the label 2."""
    from scipy.io import savemat

    write_svhn(tmp_path / "svhn")
    savemat(tmp_path / "svhn" / "test_32x32.mat", {"X": np.zeros((32, 32, 3, 3), np.uint8), "y": y})
    with pytest.raises(DeepFaultError, match=message.replace("(", r"\(")) as err:
        load_dataset("svhn", data_dir=tmp_path)
    assert "test_32x32.mat" in str(err.value)
    assert "\n" not in str(err.value)


# -- a user's .npz -------------------------------------------------------------------


def test_npz_test_split_only(tmp_path):
    x = np.random.default_rng(0).random((4, 2, 3)).astype(np.float64)
    np.savez(tmp_path / "mine.npz", x=x, y=[0, 2, 1, 2])
    ds = load_npz(tmp_path / "mine.npz")
    assert ds.name == "mine"
    assert ds.bounds == (0.0, 1.0)
    assert ds.x_test.dtype == np.float32
    assert ds.y_test.dtype == np.int64
    np.testing.assert_allclose(ds.x_test, x, rtol=1e-6)
    assert ds.x_train.shape == (0, 2, 3)
    assert ds.x_train.dtype == np.float32
    assert ds.y_train.shape == (0,)
    assert ds.y_train.dtype == np.int64
    assert ds.class_names == ("0", "1", "2")
    assert ds.input_shape == (2, 3)


def test_npz_full(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "full.npz"
    np.savez(
        path,
        x=rng.integers(0, 256, (3, 1, 4, 4)),
        y=np.array([[0], [1], [0]]),
        x_train=rng.integers(0, 256, (5, 1, 4, 4)).astype(np.uint8),
        y_train=np.array([0, 1, 2, 0, 1.0]),
        bounds=np.array([0, 255]),
        class_names=np.array(["cat", "dog", "cow"]),
    )
    ds = load_npz(path, name="farm")
    assert ds.name == "farm"
    assert ds.bounds == (0.0, 255.0)
    assert ds.class_names == ("cat", "dog", "cow")
    assert ds.x_train.shape == (5, 1, 4, 4)
    assert ds.x_train.dtype == np.float32
    np.testing.assert_array_equal(ds.y_train, [0, 1, 2, 0, 1])
    np.testing.assert_array_equal(ds.y_test, [0, 1, 0])
    assert ds.meta["path"] == str(path)


def test_load_dataset_accepts_an_npz_path(tmp_path):
    np.savez(tmp_path / "mine.npz", x=np.zeros((2, 3)), y=[0, 1])
    ds = load_dataset(str(tmp_path / "mine.npz"))
    assert ds.name == "mine"
    assert ds.x_test.shape == (2, 3)


@pytest.mark.parametrize(
    ("arrays", "problem"),
    [
        ({"x": np.full((2, 3), 2.0), "y": [0, 1], "bounds": [0, 1]}, "outside the bounds.*fix the inputs"),
        ({"x": np.full((2, 3), 300.0), "y": [0, 1], "bounds": [0, 255]}, "fix the inputs"),
        ({"x": np.zeros((2, 3)), "y": [0, 1], "bounds": [1, 0]}, "lo < hi"),
        ({"x": np.array([[0.0, np.nan]]), "y": [0]}, "NaN"),
        ({"x": np.zeros((2, 3)), "y": [0, 1, 1]}, r"expected \(2,\)"),
        ({"x": np.zeros((2, 3)), "y": [0, -1]}, "negative label"),
        ({"x": np.zeros((2, 3)), "y": [0, 0.5]}, "non-integer labels"),
        ({"x": np.zeros(3), "y": [0, 1, 1]}, r"expected \(N, \*input_shape\)"),
        ({"x": np.zeros((0, 3)), "y": np.zeros(0, int)}, "holds no inputs"),
        ({"y": [0]}, "lacks array 'x'"),
        ({"x": np.zeros((2, 3)), "y": [0, 1], "x_train": np.zeros((2, 3))}, "both x_train"),
        (
            {"x": np.zeros((2, 3)), "y": [0, 1], "x_train": np.zeros((2, 4)), "y_train": [0, 1]},
            "same input shape",
        ),
        ({"x": np.zeros((2, 3)), "y": [0, 2], "class_names": np.array(["a", "b"])}, "label 2"),
        ({"x": np.array([["a", "b"]]), "y": [0]}, "save numbers"),
    ],
)
def test_npz_validation(tmp_path, arrays, problem):
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(DeepFaultError, match=problem):
        load_npz(tmp_path / "bad.npz")


def test_npz_unreadable(tmp_path):
    with pytest.raises(DeepFaultError, match="not found"):
        load_npz(tmp_path / "absent.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(DeepFaultError, match="cannot read"):
        load_npz(tmp_path / "junk.npz")
    np.savez(tmp_path / "obj.npz", x=np.array([{"a": 1}], dtype=object), y=[0])
    with pytest.raises(DeepFaultError, match="cannot read"):
        load_npz(tmp_path / "obj.npz")


# -- download and status -------------------------------------------------------------


class FakeTransport:
    """Serves ``payloads[url]``; records the URLs asked for; no network."""

    def __init__(self, payloads: dict[str, bytes | Exception]):
        self.payloads = payloads
        self.calls: list[str] = []

    def __call__(self, url: str, dest: Path) -> None:
        self.calls.append(url)
        payload = self.payloads[url]
        if isinstance(payload, Exception):
            raise payload
        Path(dest).write_bytes(payload)


def fake_mnist_source(monkeypatch) -> tuple[dict[str, bytes], dict[str, np.ndarray]]:
    """Replace the MNIST table by tiny files, served at two mirrors."""
    arrays = mnist_arrays()
    files, remote, local = {}, [], []
    for role, stem in STEMS.items():
        raw = idx_bytes(arrays[role])
        data = gzip.compress(raw, mtime=0)
        files[f"{stem}.gz"] = data
        urls = (f"https://a.example/{stem}.gz", f"https://b.example/{stem}.gz")
        remote.append(dl.RemoteFile(f"{stem}.gz", md5(data), len(data), urls))
        local.append(dl.LocalFile(f"{stem}.gz", md5(data), stem, md5(raw)))
    source = dl.DatasetSource("mnist", "MNIST/raw", tuple(remote), tuple(local))
    monkeypatch.setitem(dl.SOURCES, "mnist", source)
    return files, arrays


def test_download_then_load(tmp_path, monkeypatch):
    files, arrays = fake_mnist_source(monkeypatch)
    assert [s.present for s in dl.dataset_status("mnist", tmp_path)] == [False] * 4
    transport = FakeTransport({f"https://a.example/{n}": d for n, d in files.items()})
    paths = dl.download("mnist", tmp_path, transport=transport)
    assert [p.name for p in paths] == list(files)
    assert len(transport.calls) == 4
    status = dl.dataset_status("mnist", tmp_path)
    assert all(s.present and s.verified for s in status)
    assert status[0].file == tmp_path / "MNIST/raw/train-images-idx3-ubyte.gz"
    ds = load_dataset("mnist", data_dir=tmp_path)
    np.testing.assert_array_equal(ds.y_train, arrays["y_train"])
    # Intact files are not fetched again.
    again = FakeTransport({})
    dl.download("mnist", tmp_path, transport=again)
    assert again.calls == []


def test_download_falls_back_to_the_next_mirror(tmp_path, monkeypatch):
    files, _ = fake_mnist_source(monkeypatch)
    payloads = {}
    for name, data in files.items():
        payloads[f"https://a.example/{name}"] = OSError("connection refused")
        payloads[f"https://b.example/{name}"] = data
    dl.download("mnist", tmp_path, transport=FakeTransport(payloads))
    assert all(s.verified for s in dl.dataset_status("mnist", tmp_path))


def test_corrupted_download_is_not_moved_into_place(tmp_path, monkeypatch):
    files, _ = fake_mnist_source(monkeypatch)
    payloads = {}
    for name, data in files.items():
        bad = bytearray(data)
        bad[20] ^= 0xFF  # same size, wrong md5
        payloads[f"https://a.example/{name}"] = bytes(bad)
        payloads[f"https://b.example/{name}"] = data[:-10]  # truncated
    with pytest.raises(DeepFaultError) as err:
        dl.download("mnist", tmp_path, transport=FakeTransport(payloads))
    msg = str(err.value)
    first = dl.SOURCES["mnist"].remote[0]
    assert first.name in msg
    assert "md5" in msg
    assert first.md5 in msg
    assert "https://a.example" in msg
    assert "https://b.example" in msg
    assert f"{len(files[first.name]) - 10:,} bytes instead of" in msg
    # neither the file, nor a temporary, nor the folders the download created are left behind
    assert list(tmp_path.iterdir()) == []
    assert [s.present for s in dl.dataset_status("mnist", tmp_path)] == [False] * 4


def test_status_reports_present_but_unverified(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    (raw / "train-images-idx3-ubyte.gz").write_bytes(b"not the real thing")
    (raw / "t10k-labels-idx1-ubyte").write_bytes(b"uncompressed stand-in")
    status = dl.dataset_status("mnist", tmp_path)
    assert [(s.present, s.verified) for s in status] == [
        (True, False),
        (False, False),
        (False, False),
        (True, False),
    ]
    assert status[3].file.name == "t10k-labels-idx1-ubyte"
    file, present, verified = status[0]  # still a plain tuple
    assert present
    assert not verified


def test_unknown_download_name(tmp_path):
    with pytest.raises(DeepFaultError, match="downloadable: cifar10, fashion-mnist, mnist, svhn"):
        dl.download("imagenet", tmp_path, transport=FakeTransport({}))
    with pytest.raises(DeepFaultError, match="no download source"):
        dl.dataset_status("imagenet", tmp_path)


def _tarball(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def fake_cifar_source(monkeypatch, members: dict[str, bytes]) -> bytes:
    archive = _tarball(members)
    remote = dl.RemoteFile(
        "cifar-10-python.tar.gz", md5(archive), len(archive), ("https://c.example/cifar.tgz",)
    )
    local = tuple(dl.LocalFile(n, md5(d)) for n, d in members.items() if "batches-py/" in n)
    monkeypatch.setitem(
        dl.SOURCES, "cifar10", dl.DatasetSource("cifar10", "", (remote,), local, archive=True)
    )
    return archive


def test_download_cifar_extracts_the_batches(tmp_path, monkeypatch):
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    members = {
        f"cifar-10-batches-py/{n}": pickle.dumps(cifar_batch(2, i), protocol=2) for i, n in enumerate(names)
    }
    members["cifar-10-batches-py/batches.meta"] = pickle.dumps({b"label_names": []})
    archive = fake_cifar_source(monkeypatch, members)
    dl.download("cifar10", tmp_path, transport=FakeTransport({"https://c.example/cifar.tgz": archive}))
    assert all(s.verified for s in dl.dataset_status("cifar10", tmp_path))
    assert (tmp_path / "cifar-10-python.tar.gz").is_file()
    assert not any(p.name.startswith(".extract-") for p in tmp_path.iterdir())
    ds = load_dataset("cifar10", data_dir=tmp_path)
    assert ds.x_train.shape == (10, 3, 32, 32)
    assert ds.x_test.shape == (2, 3, 32, 32)


def test_download_cifar_refuses_unsafe_archive(tmp_path, monkeypatch):
    target = tmp_path / "data"
    archive = fake_cifar_source(
        monkeypatch, {"cifar-10-batches-py/../../evil": b"x", "cifar-10-batches-py/test_batch": b"y"}
    )
    with pytest.raises(DeepFaultError, match="unsafe member"):
        dl.download("cifar10", target, transport=FakeTransport({"https://c.example/cifar.tgz": archive}))
    assert not (tmp_path / "evil").exists()
    assert not (target / "cifar-10-batches-py").exists()


def test_embedded_digits_equal_scikit_learns_split():
    """The shipped digits file is scikit-learn's digits with its fixed stratified split."""
    sklearn = pytest.importorskip("sklearn")
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    from deepfault.data.digits import SPLIT_SEED, TEST_FRACTION

    bunch = load_digits()
    x = (bunch.data.astype(np.float32) / 16.0).reshape(-1, 1, 8, 8)
    x_train, x_test, y_train, y_test = train_test_split(
        x, bunch.target, test_size=TEST_FRACTION, random_state=SPLIT_SEED, stratify=bunch.target)
    ds = load_dataset("digits")
    assert sklearn.__version__
    np.testing.assert_array_equal(ds.x_train, x_train)
    np.testing.assert_array_equal(ds.x_test, x_test)
    np.testing.assert_array_equal(ds.y_train, y_train)
    np.testing.assert_array_equal(ds.y_test, y_test)


# -- first use: download when the data root holds none of the files ------------------------


def _serve(monkeypatch, files: dict[str, bytes], calls: list[str]):
    def transport(url, dest, progress=False):
        calls.append(url)
        if "a.example" in url:
            raise OSError("connection refused")
        Path(dest).write_bytes(files[url.rsplit("/", 1)[1]])

    monkeypatch.setattr(dl, "_urllib_transport", transport)


def test_first_use_downloads_into_the_data_root(tmp_path, monkeypatch, caplog):
    files, arrays = fake_mnist_source(monkeypatch)
    calls: list[str] = []
    _serve(monkeypatch, files, calls)
    monkeypatch.delenv("DEEPFAULT_NO_DOWNLOAD")
    with caplog.at_level("WARNING"):
        ds = load_dataset("mnist", data_dir=tmp_path)
    np.testing.assert_array_equal(ds.y_test, arrays["y_test"])
    assert all(s.verified for s in dl.dataset_status("mnist", tmp_path))
    assert "downloading it (4 files" in caplog.text
    assert str(tmp_path / "MNIST" / "raw") in caplog.text
    assert len(calls) == 8  # each file: the first mirror fails, the second serves it
    calls.clear()
    load_dataset("mnist", data_dir=tmp_path)
    assert calls == []  # once


def test_first_use_offline_is_one_line_naming_the_ways_out(tmp_path, monkeypatch):
    fake_mnist_source(monkeypatch)

    def offline(url, dest, progress=False):
        raise OSError("[Errno -2] Name or service not known")

    monkeypatch.setattr(dl, "_urllib_transport", offline)
    monkeypatch.delenv("DEEPFAULT_NO_DOWNLOAD")
    with pytest.raises(DeepFaultError) as err:
        load_dataset("mnist", data_dir=tmp_path)
    msg = str(err.value)
    assert "\n" not in msg
    for part in ("could not be downloaded", "Name or service not known", "DEEPFAULT_DATA", "--data-dir",
                 "deepfault data download mnist", str(tmp_path / "MNIST" / "raw")):
        assert part in msg, part
    assert list(tmp_path.iterdir()) == []  # nothing half-written


def test_a_folder_holding_some_files_is_never_downloaded_into(tmp_path, monkeypatch):
    files, _ = fake_mnist_source(monkeypatch)
    calls: list[str] = []
    _serve(monkeypatch, files, calls)
    monkeypatch.delenv("DEEPFAULT_NO_DOWNLOAD")
    write_mnist(tmp_path)
    (tmp_path / "MNIST" / "raw" / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DeepFaultError, match="file not found.*DEEPFAULT_DATA"):
        load_dataset("mnist", data_dir=tmp_path)
    assert calls == []


def test_the_data_root_is_recorded_where_it_is_not_the_default(tmp_path, monkeypatch):
    from deepfault.data._api import data_dir_to_record, usable_recorded_dir

    write_mnist(tmp_path / "mine")
    ds = load_dataset("mnist", data_dir=tmp_path / "mine")
    assert data_dir_to_record(ds) == str((tmp_path / "mine").resolve())
    monkeypatch.setenv("DEEPFAULT_CACHE", str(tmp_path))
    write_mnist(tmp_path / "data")
    assert data_dir_to_record(load_dataset("mnist", data_dir=tmp_path / "data")) is None  # the default
    assert data_dir_to_record(load_dataset("digits")) is None  # embedded
    # precedence: --data-dir, then $DEEPFAULT_DATA, then the recorded folder (while it exists)
    recorded = str(tmp_path / "mine")
    assert usable_recorded_dir("given", recorded) == "given"
    monkeypatch.setenv("DEEPFAULT_DATA", str(tmp_path))
    assert usable_recorded_dir(None, recorded) is None
    monkeypatch.delenv("DEEPFAULT_DATA")
    assert usable_recorded_dir(None, recorded) == recorded
    assert usable_recorded_dir(None, str(tmp_path / "gone")) is None
