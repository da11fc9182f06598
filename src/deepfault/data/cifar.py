"""CIFAR-10 (Krizhevsky, 2009) from the python pickle batches or from two ``.npz`` files.

Accepted layouts under the data root, tried in this order:

* ``cifar-10-batches-py/`` with ``data_batch_1`` ... ``data_batch_5`` and ``test_batch``,
  as extracted from the official ``cifar-10-python.tar.gz``;
* ``cifar10/cifar10_train.npz`` and ``cifar10/cifar10_test.npz``, each holding ``x``
  (``uint8``, ``N x 32 x 32 x 3``) and ``y`` (``N`` labels).

Pixels stay in [0, 255] by default, the range the DeepFault paper synthesises in.
"""

from __future__ import annotations

import importlib
import io
import pickle
from pathlib import Path

import numpy as np

from ..errors import DeepFaultError
from ._api import register_dataset
from .dataset import Dataset, pixel_dataset
from .download import SOURCES, fetch_hint

__all__ = ["load_cifar10", "CIFAR10_CLASSES"]

CIFAR10_CLASSES = (
    "airplane", "automobile", "bird", "cat", "deer",
    "dog", "frog", "horse", "ship", "truck",
)  # fmt: skip

_BATCH_DIR = "cifar-10-batches-py"
_TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
_TEST_BATCH = "test_batch"
_NPZ_DIR = "cifar10"


def _allowed_globals() -> dict[tuple[str, str], object]:
    """The only globals a CIFAR batch may name: what rebuilds a numpy array.

    The batches are dicts of bytes/str keys, lists of ints and one ``uint8`` array;
    dicts, lists, bytes, str and ints need no globals at all. Rebuilding an array needs
    ``_reconstruct``/``_frombuffer``, ``ndarray`` and ``dtype`` (under the module names
    of numpy 1 and 2), ``scalar`` for numpy integers and ``_codecs.encode``, which
    Python 3 uses to pickle ``bytes`` with protocol 2. None of them runs code named
    by the file, so a hostile batch can at worst fail to load.
    """
    import codecs

    try:  # numpy >= 2
        multiarray = importlib.import_module("numpy._core.multiarray")
        numeric = importlib.import_module("numpy._core.numeric")
    except ImportError:  # pragma: no cover - numpy 1
        multiarray = importlib.import_module("numpy.core.multiarray")
        numeric = importlib.import_module("numpy.core.numeric")
    allowed: dict[tuple[str, str], object] = {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("_codecs", "encode"): codecs.encode,
    }
    for package in ("numpy.core", "numpy._core"):
        allowed[(f"{package}.multiarray", "_reconstruct")] = multiarray._reconstruct
        allowed[(f"{package}.multiarray", "scalar")] = multiarray.scalar
        allowed[(f"{package}.numeric", "_frombuffer")] = numeric._frombuffer
    return allowed


class _RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that refuses every global outside :func:`_allowed_globals`."""

    _allowed: dict[tuple[str, str], object] | None = None

    def find_class(self, module: str, name: str):
        allowed = _RestrictedUnpickler._allowed
        if allowed is None:
            allowed = _RestrictedUnpickler._allowed = _allowed_globals()
        try:
            return allowed[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"global '{module}.{name}' is not allowed in a CIFAR batch"
            ) from None


def _expected_md5(file: str) -> str:
    for local in SOURCES["cifar10"].local:
        if local.name == f"{_BATCH_DIR}/{file}":
            return local.md5
    return "unknown"  # pragma: no cover - every batch is in the table


def _bad_batch(path: Path, problem: str) -> DeepFaultError:
    return DeepFaultError(
        f"corrupt CIFAR-10 batch {path}: {problem}; the official file has md5 "
        f"{_expected_md5(path.name)}; delete {path.parent} and run {fetch_hint('cifar10')}"
    )


def _read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One pickle batch as ``uint8`` images ``(N, 3, 32, 32)`` and ``int64`` labels."""
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise _bad_batch(path, f"cannot read it ({err.strerror or err})") from err
    try:
        # latin1 turns the Python 2 byte strings of the official batches into str keys
        # and lets numpy rebuild the array data from them, as torchvision does.
        batch = _RestrictedUnpickler(io.BytesIO(raw), encoding="latin1").load()
    except pickle.UnpicklingError as err:
        raise _bad_batch(path, f"not a CIFAR pickle ({err})") from err
    except Exception as err:  # truncated pickles raise EOFError, ValueError, ...
        raise _bad_batch(path, f"cannot unpickle it ({type(err).__name__}: {err})") from err
    if not isinstance(batch, dict):
        raise _bad_batch(path, f"it holds a {type(batch).__name__}, not a dict")
    batch = {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in batch.items()}
    if "data" not in batch or "labels" not in batch:
        raise _bad_batch(path, f"it lacks 'data' or 'labels' (keys: {sorted(map(str, batch))})")
    data = batch["data"]
    if (
        not isinstance(data, np.ndarray)
        or data.dtype != np.uint8
        or data.ndim != 2
        or (data.shape[1] != 3 * 32 * 32)
    ):
        got = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise _bad_batch(path, f"'data' should be uint8 N x 3072, got {got}")
    try:
        labels = np.asarray(batch["labels"], dtype=np.int64).reshape(-1)
    except (TypeError, ValueError) as err:
        raise _bad_batch(path, f"'labels' are not integers ({err})") from err
    if len(labels) != len(data):
        raise _bad_batch(path, f"{len(labels):,} labels for {len(data):,} images")
    return data.reshape(-1, 3, 32, 32), labels


def _read_npz(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One ``.npz`` split as ``uint8`` images ``(N, 3, 32, 32)`` and ``int64`` labels."""
    fix = "save x as uint8 N x 32 x 32 x 3 and y as N integer labels"
    try:
        with np.load(path, allow_pickle=False) as npz:
            if "x" not in npz.files or "y" not in npz.files:
                raise DeepFaultError(
                    f"{path} lacks array 'x' or 'y' (it has {', '.join(npz.files) or 'none'}); {fix}"
                )
            x, y = npz["x"], npz["y"]
    except DeepFaultError:
        raise
    except Exception as err:  # zipfile.BadZipFile, ValueError for object arrays, OSError
        raise DeepFaultError(f"cannot read CIFAR-10 file {path}: {type(err).__name__}: {err}; {fix}") from err
    if x.dtype != np.uint8 or x.ndim != 4 or x.shape[1:] != (32, 32, 3):
        raise DeepFaultError(f"{path}: 'x' is {x.dtype} {x.shape}; {fix}")
    if y.ndim == 2 and y.shape[1] == 1:  # Keras style (N, 1)
        y = y[:, 0]
    if y.ndim != 1 or len(y) != len(x) or not np.issubdtype(y.dtype, np.integer):
        raise DeepFaultError(f"{path}: 'y' is {y.dtype} {y.shape} for {len(x):,} images; {fix}")
    return x.transpose(0, 3, 1, 2), y.astype(np.int64)


def _check_labels(path: Path, y: np.ndarray) -> None:
    if len(y) and (y.min() < 0 or y.max() >= len(CIFAR10_CLASSES)):
        raise DeepFaultError(
            f"{path}: labels range over {y.min()}..{y.max()}, not 0..9; "
            f"delete it and run {fetch_hint('cifar10')}"
        )


def _read_batches(batch_dir: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{"train": (x, y), "test": (x, y)}`` from the official Python batches."""
    splits = {}
    for split, names in (("train", _TRAIN_BATCHES), ("test", (_TEST_BATCH,))):
        missing = [n for n in names if not (batch_dir / n).is_file()]
        if missing:
            raise DeepFaultError(
                f"CIFAR-10 batch {batch_dir / missing[0]} is missing; run {fetch_hint('cifar10')}"
            )
        parts = [_read_batch(batch_dir / n) for n in names]
        for n, (_, y) in zip(names, parts, strict=True):
            _check_labels(batch_dir / n, y)
        splits[split] = (
            np.concatenate([p[0] for p in parts]),
            np.concatenate([p[1] for p in parts]),
        )
    return splits


def _read_npz_splits(npz_dir: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{"train": (x, y), "test": (x, y)}`` from ``cifar10_{train,test}.npz``."""
    splits = {}
    for split in ("train", "test"):
        path = npz_dir / f"cifar10_{split}.npz"
        if not path.is_file():
            raise DeepFaultError(
                f"CIFAR-10 file {path} is missing; write it beside the other split, "
                f"or run {fetch_hint('cifar10')} for the official batches"
            )
        splits[split] = _read_npz(path)
        _check_labels(path, splits[split][1])
    return splits


@register_dataset("cifar10", description="CIFAR-10 colour images, 3x32x32, [0, 255]")
def load_cifar10(data_dir: Path, *, scale01: bool = False) -> Dataset:
    """CIFAR-10: 50,000 + 10,000 colour images, ``(N, 3, 32, 32)`` ``float32``.

    Args:
        data_dir: The data root holding ``cifar-10-batches-py/`` or ``cifar10/*.npz``.
        scale01: Divide the pixels by 255 so they lie in [0, 1] (bounds ``(0, 1)``);
            by default they stay in [0, 255] (bounds ``(0, 255)``) as in the paper.

    Returns:
        The data set; ``meta["source"]`` says which layout was read.

    Raises:
        DeepFaultError: Neither layout is present, a file is missing or corrupt (the
            message names it and ``deepfault data download cifar10``), or a pickle
            names anything but the numpy array machinery.

    Examples:
        >>> from deepfault.data import load_dataset
        >>> ds = load_dataset("cifar10", scale01=True)  # doctest: +SKIP
        >>> ds.x_test.shape, ds.bounds  # doctest: +SKIP
        ((10000, 3, 32, 32), (0.0, 1.0))
    """
    root = Path(data_dir)
    batch_dir, npz_dir = root / _BATCH_DIR, root / _NPZ_DIR
    if batch_dir.is_dir():
        splits, source = _read_batches(batch_dir), str(batch_dir)
    elif (npz_dir / "cifar10_train.npz").is_file() or (npz_dir / "cifar10_test.npz").is_file():
        splits, source = _read_npz_splits(npz_dir), str(npz_dir)
    else:
        raise DeepFaultError(
            f"CIFAR-10 not found in {root}: expected {_BATCH_DIR}/ (data_batch_1..5, "
            f"test_batch) or {_NPZ_DIR}/cifar10_{{train,test}}.npz; run {fetch_hint('cifar10')}"
        )

    return pixel_dataset("cifar10", splits["train"], splits["test"], CIFAR10_CLASSES,
                         scale01=scale01,
                         meta={"source": source})
