"""MNIST and Fashion-MNIST from the four standard IDX files, in torchvision's layout.

The files live in ``ROOT/MNIST/raw/`` or ``ROOT/FashionMNIST/raw/``, gzipped (as
published) or not (as torchvision unpacks them). The IDX format (LeCun et al.) is a
big-endian header -- two zero bytes, a type code (``0x08``: unsigned byte), the number
of dimensions, then one ``int32`` per dimension -- followed by the raw values.

The first load decodes the files and caches the ``uint8`` arrays as ``.npy`` files in
``processed/`` next to ``raw/`` (or in the user cache directory when that is not
writable); later loads read the cache while the raw files keep their size and mtime.

A data root without any of the four files gets them downloaded on first use
(:func:`deepfault.data.download.download`: checked md5s, progress, nothing half-written;
``$DEEPFAULT_NO_DOWNLOAD`` turns this off); offline, the error says where to put them.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import logging
import os
import zlib
from pathlib import Path

import numpy as np

from ..errors import DeepFaultError
from ._api import register_dataset
from .dataset import Dataset
from .download import SOURCES, fetch_hint

__all__ = ["load_mnist", "load_fashion_mnist", "read_idx", "FASHION_CLASSES"]

log = logging.getLogger(__name__)

FASHION_CLASSES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)  # fmt: skip

#: The four files, keyed by the role they play, without the ``.gz``.
_FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}
_IMAGE_SHAPE = (28, 28)
_CACHE_VERSION = 1
_MANIFEST = "deepfault-cache.json"


def _official(name: str, stem: str) -> str:
    """``the official X.gz is N bytes with md5 M``, for error messages."""
    for remote in SOURCES[name].remote:
        if remote.name == f"{stem}.gz":
            return f"the official {remote.name} is {remote.size:,} bytes with md5 {remote.md5}"
    return "no official checksum is known"  # pragma: no cover - table covers all files


def _corrupt(name: str, path: Path, stem: str, problem: str) -> DeepFaultError:
    return DeepFaultError(
        f"corrupt {name} file {path}: {problem}; {_official(name, stem)}; "
        f"delete it and run {fetch_hint(name)}"
    )


class _IdxError(DeepFaultError):
    """A problem with an IDX file; the loader rewraps it with the file and the fix."""


def read_idx(path: str | os.PathLike, *, ndim: int) -> np.ndarray:
    """Decode one IDX file of unsigned bytes, gzipped or not, checking header and size.

    Args:
        path: The file; gzip is recognised by its magic bytes, not by the name.
        ndim: The number of dimensions the header must declare (3 for images,
            1 for labels).

    Returns:
        A ``uint8`` array of the shape the header declares.

    Raises:
        DeepFaultError: The file cannot be decompressed, has a wrong magic number or
            number of dimensions, or its length disagrees with its header. The message
            says what is wrong; the loaders add the file, its official md5 and the fix.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise _IdxError(f"cannot read it ({err.strerror or err})") from err
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as err:
            raise _IdxError(f"cannot decompress its {len(data):,} bytes ({err})") from err
    if len(data) < 4:
        raise _IdxError(f"it has only {len(data)} bytes, too few for an IDX header")
    zero, dtype, got_ndim = data[:2], data[2], data[3]
    if zero != b"\x00\x00" or dtype != 0x08 or got_ndim != ndim:
        raise _IdxError(
            f"bad IDX magic number 0x{data[:4].hex()} (expected 0x0000080{ndim}, "
            f"unsigned bytes in {ndim} dimension{'s' if ndim > 1 else ''})"
        )
    header = 4 + 4 * ndim
    if len(data) < header:
        raise _IdxError(f"the header is cut short after {len(data)} bytes")
    shape = tuple(int(d) for d in np.frombuffer(data, dtype=">i4", count=ndim, offset=4))
    if any(d < 0 for d in shape):
        raise _IdxError(f"its header declares negative dimensions {shape}")
    expected = header + int(np.prod(shape, dtype=np.int64))
    if len(data) != expected:
        what = "ends after" if len(data) < expected else "has"
        raise _IdxError(f"it {what} {len(data):,} bytes but its header {shape} needs {expected:,}")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(shape)


#: Set (to anything but ``0`` or empty) to never download on first use.
NO_DOWNLOAD_ENV = "DEEPFAULT_NO_DOWNLOAD"


def _download_allowed() -> bool:
    return os.environ.get(NO_DOWNLOAD_ENV, "") in ("", "0")


def _download_first_use(name: str, raw_dir: Path) -> None:
    """Fetch data set ``name`` into the data root above ``raw_dir`` (first use), through
    :func:`~deepfault.data.download.download`: every file's size and md5 checked, a
    progress bar (or a logged line every 30 s), nothing left behind when it fails.
    """
    from .download import download

    source = SOURCES[name]
    size = sum(r.size or 0 for r in source.remote) / 1e6
    root = raw_dir.parent.parent
    log.warning("%s is not in %s; downloading it (%d files, %.0f MB, once) from %s", name, raw_dir,
                   len(source.remote), size, source.remote[0].urls[0].rsplit("/", 1)[0])
    try:
        download(name, root, progress=True)
    except DeepFaultError as err:
        reason = str(err).split(" (", 1)[-1].split(";", 1)[0].rstrip(")")
        raise DeepFaultError(
            f"{name} is not in {raw_dir} and could not be downloaded ({reason}); connect and retry, "
            f"or set DEEPFAULT_DATA (or --data-dir) to a folder holding {raw_dir.parent.name}/raw/ "
            f"(fetch it elsewhere with {fetch_hint(name)})"
        ) from None


def _raw_files(name: str, raw_dir: Path) -> dict[str, Path]:
    """The file to read for each role, preferring the uncompressed one torchvision unpacks.

    When none of the four files is there (in either form), the data set is downloaded
    first (:func:`_download_first_use`) unless ``$DEEPFAULT_NO_DOWNLOAD`` is set; a folder
    holding some of them is never written to.
    """
    stems = _FILES.values()
    if _download_allowed() and not any(
        (raw_dir / s).is_file() or (raw_dir / f"{s}.gz").is_file() for s in stems
    ):
        _download_first_use(name, raw_dir)
    out = {}
    for role, stem in _FILES.items():
        for candidate in (raw_dir / stem, raw_dir / f"{stem}.gz"):
            if candidate.is_file():
                out[role] = candidate
                break
        else:
            raise DeepFaultError(
                f"{name} file not found: {raw_dir / stem}.gz (or uncompressed); "
                f"run {fetch_hint(name)} or set DEEPFAULT_DATA (or --data-dir) to the folder that "
                f"holds {raw_dir.parent.name}/raw/"
            )
    return out


def _decode(name: str, files: dict[str, Path]) -> dict[str, np.ndarray]:
    arrays = {}
    for role, path in files.items():
        ndim = 3 if role.startswith("x") else 1
        try:
            arrays[role] = read_idx(path, ndim=ndim)
        except _IdxError as err:
            raise _corrupt(name, path, _FILES[role], str(err)) from None
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if x.shape[1:] != _IMAGE_SHAPE:
            raise _corrupt(
                name,
                files[f"x_{split}"],
                _FILES[f"x_{split}"],
                f"images are {x.shape[1:]}, not {_IMAGE_SHAPE}",
            )
        if len(x) != len(y):
            raise _corrupt(
                name,
                files[f"y_{split}"],
                _FILES[f"y_{split}"],
                f"{len(y):,} labels for {len(x):,} images",
            )
        if len(y) and int(y.max()) >= 10:
            raise _corrupt(
                name,
                files[f"y_{split}"],
                _FILES[f"y_{split}"],
                f"label {int(y.max())} is outside 0-9",
            )
    return arrays


# -- the processed cache -------------------------------------------------------------


def _user_cache_root() -> Path:
    from .._io import user_cache_dir

    return user_cache_dir() / "processed"


def _cache_dirs(name: str, raw_dir: Path, cache_dir: Path | None) -> list[Path]:
    if cache_dir is not None:
        return [Path(cache_dir).expanduser()]
    key = hashlib.sha1(str(raw_dir.resolve()).encode(), usedforsecurity=False).hexdigest()[:16]
    # Never beside the raw files: a data root may be shared or read-only.
    return [_user_cache_root() / f"{name}-{key}"]


def _fingerprint(files: dict[str, Path]) -> dict:
    out = {}
    for role, path in files.items():
        st = path.stat()
        out[role] = {"file": path.name, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    return {"version": _CACHE_VERSION, "sources": out}


def _cache_file(folder: Path, name: str, role: str) -> Path:
    return folder / f"deepfault-{name}-{role}.npy"


def _read_cache(folder: Path, name: str, fingerprint: dict) -> dict[str, np.ndarray] | None:
    manifest = folder / f"deepfault-{name}-{_MANIFEST}"
    try:
        if json.loads(manifest.read_text(encoding="utf-8")) != fingerprint:
            return None
        arrays = {role: np.load(_cache_file(folder, name, role), allow_pickle=False) for role in _FILES}
    except (OSError, ValueError):
        return None
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if x.dtype != np.uint8 or y.dtype != np.uint8 or x.shape[1:] != _IMAGE_SHAPE or y.shape != (len(x),):
            return None
    return arrays


def _writable(folder: Path) -> bool:
    """Whether ``folder`` (or its nearest existing parent) may be written.

    Mode bits are checked as well as :func:`os.access` because root may write anywhere:
    a folder without any write bit (a shared read-only data set) is never written to.
    """
    probe = folder
    while not probe.exists():
        if probe.parent == probe:
            return False
        probe = probe.parent
    return probe.is_dir() and os.access(probe, os.W_OK) and bool(probe.stat().st_mode & 0o222)


def _write_cache(folder: Path, name: str, fingerprint: dict, arrays: dict) -> bool:
    from .._io import atomic_path

    if not _writable(folder):
        log.debug("not writing the %s cache in read-only %s", name, folder)
        return False
    manifest = folder / f"deepfault-{name}-{_MANIFEST}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # The manifest goes last and first goes away, so a half-written cache never matches.
        with contextlib.suppress(FileNotFoundError):
            manifest.unlink()
        for role, array in arrays.items():
            with atomic_path(_cache_file(folder, name, role)) as tmp, open(tmp, "wb") as fh:
                np.save(fh, array, allow_pickle=False)
        with atomic_path(manifest) as tmp:
            tmp.write_text(json.dumps(fingerprint), encoding="utf-8")
    except OSError as err:
        log.debug("cannot write the %s cache in %s: %s", name, folder, err)
        return False
    return True


def _load_arrays(
    name: str, raw_dir: Path, *, cache: bool, cache_dir: Path | None
) -> tuple[dict[str, np.ndarray], dict]:
    files = _raw_files(name, raw_dir)
    if not cache:
        return _decode(name, files), {"cache": None}
    fingerprint = _fingerprint(files)
    folders = _cache_dirs(name, raw_dir, cache_dir)
    for folder in folders:
        arrays = _read_cache(folder, name, fingerprint)
        if arrays is not None:
            return arrays, {"cache": str(folder), "cache_hit": True}
    arrays = _decode(name, files)
    for folder in folders:
        if _write_cache(folder, name, fingerprint, arrays):
            return arrays, {"cache": str(folder), "cache_hit": False}
    log.warning(
        "no writable cache folder for %s (tried %s); it will be decoded again",
        name,
        ", ".join(map(str, folders)),
    )
    return arrays, {"cache": None, "cache_hit": False}


def _to_dataset(name: str, arrays: dict, class_names, meta: dict) -> Dataset:
    def images(x: np.ndarray) -> np.ndarray:
        out = x.reshape(len(x), 1, *_IMAGE_SHAPE).astype(np.float32)
        out /= 255.0
        return out

    return Dataset(
        name=name,
        x_train=images(arrays["x_train"]),
        y_train=arrays["y_train"].astype(np.int64),
        x_test=images(arrays["x_test"]),
        y_test=arrays["y_test"].astype(np.int64),
        bounds=(0.0, 1.0),
        class_names=tuple(class_names),
        meta=meta,
    )


def _load(name, folder, class_names, data_dir, cache, cache_dir) -> Dataset:
    raw_dir = Path(data_dir) / folder / "raw"
    arrays, meta = _load_arrays(name, raw_dir, cache=cache, cache_dir=cache_dir)
    return _to_dataset(name, arrays, class_names, {"raw_dir": str(raw_dir), **meta})


@register_dataset("mnist", description="MNIST handwritten digits, 1x28x28, [0, 1]")
def load_mnist(data_dir: Path, *, cache: bool = True, cache_dir: str | os.PathLike | None = None) -> Dataset:
    """MNIST (LeCun et al.): 60,000 + 10,000 greyscale digits, ``(N, 1, 28, 28)`` in [0, 1].

    Args:
        data_dir: The data root holding ``MNIST/raw/`` with the four IDX files.
        cache: Keep the decoded arrays as ``.npy`` files so later loads are fast.
        cache_dir: Where to keep them; by default a folder of the user cache directory
            (``$DEEPFAULT_CACHE``) keyed by the raw folder's path.

    Returns:
        The data set; ``meta`` says which cache was used.

    Raises:
        DeepFaultError: A file is missing, truncated or corrupt; the message names it,
            its official md5 and size, and ``deepfault data download mnist``.
    """
    return _load("mnist", "MNIST", (str(d) for d in range(10)), data_dir, cache, cache_dir)


@register_dataset("fashion-mnist", description="Fashion-MNIST clothing, 1x28x28, [0, 1]")
def load_fashion_mnist(
    data_dir: Path, *, cache: bool = True, cache_dir: str | os.PathLike | None = None
) -> Dataset:
    """Fashion-MNIST (Xiao et al., 2017): 60,000 + 10,000 greyscale clothing images.

    Same format, layout (``FashionMNIST/raw/``), arguments and errors as
    :func:`load_mnist`; the classes are :data:`FASHION_CLASSES`.
    """
    return _load("fashion-mnist", "FashionMNIST", FASHION_CLASSES, data_dir, cache, cache_dir)
