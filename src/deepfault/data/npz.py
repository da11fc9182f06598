"""A user's own data set given as one ``.npz`` file.

Arrays, by name:

* ``x``, ``y``: the test split (the inputs analysed and perturbed), ``x`` shaped
  ``(N, *input_shape)`` in the layout the model takes, ``y`` ``N`` integer labels;
* ``x_train``, ``y_train`` (optional): a training split of the same input shape;
  without them the training split is empty;
* ``bounds`` (optional): ``[lo, hi]``, the valid input range; without it, inferred from the
  inputs (:func:`~deepfault.data.bounds.infer_bounds`, said in one log line); or one
  range per feature, ``(2, *shape)`` with ``shape`` broadcastable to one input's (``(2, F)``
  for vectors, ``(2, C, 1)`` per channel of a sequence): ``Dataset.feature_bounds``, and
  ``Dataset.bounds`` their envelope;
* ``class_names`` (optional): one string per class; else ``0 .. max(y)``.

Examples:
    >>> import numpy as np
    >>> np.savez("mine.npz", x=np.random.rand(5, 1, 8, 8), y=[0, 1, 2, 1, 0])  # doctest: +SKIP
    >>> load_npz("mine.npz").input_shape  # doctest: +SKIP
    (1, 8, 8)
"""

from __future__ import annotations

import os
import struct
import zipfile
from pathlib import Path

import numpy as np

from ..checks import MAX_CLASSES
from ..core.mapped import register, release
from ..errors import DeepFaultError
from .bounds import data_range, infer_bounds
from .dataset import Dataset

__all__ = ["load_npz"]


#: Rows of inputs validated or converted at a time: about this many bytes of float32 (the
#: per-feature bounds check makes three boolean arrays of a chunk's elements, a quarter as big).
_CHUNK_BYTES = 16 << 20


def _chunks(x: np.ndarray):
    """``(start, rows)`` of ``x`` in blocks of about :data:`_CHUNK_BYTES` (as float32)."""
    row = max(1, int(np.prod(x.shape[1:], dtype=np.int64)) * 4)
    step = max(1, _CHUNK_BYTES // row)
    for start in range(0, len(x), step):
        yield start, x[start:start + step]
        release()  # a mapped file's pages, once checked, go back (core/mapped.py)


def _header(fp) -> tuple[tuple[int, ...], bool, np.dtype]:
    """``(shape, fortran_order, dtype)`` of the ``.npy`` stream ``fp`` (left at its data)."""
    version = np.lib.format.read_magic(fp)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(fp)
    if version == (2, 0):
        return np.lib.format.read_array_header_2_0(fp)
    raise _Unsupported(f"unsupported .npy format version {version}")


class _Unsupported(Exception):
    """A member this module does not parse itself (``numpy.load`` reads it)."""


def _mapped(path: Path, zf: zipfile.ZipFile, member: str) -> np.ndarray | None:
    """The member's array memory-mapped copy-on-write (writes stay in this process, never in
    the file), when it is stored uncompressed, C-order, native float32 and not empty; ``None``
    otherwise (the caller reads it another way).

    The data's place is worked out from the member's local header in the zip and the
    ``.npy`` header after it; a member whose data would run past its stored size (a
    truncated or inconsistent file) raises ``ValueError``.
    """
    info = zf.getinfo(member)
    if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:  # compressed or encrypted
        return None
    with open(path, "rb") as fp:
        fp.seek(info.header_offset)
        local = fp.read(30)
        if len(local) != 30 or local[:4] != b"PK\x03\x04":
            raise ValueError(f"bad local header of member {member}")
        name_len, extra_len = struct.unpack("<HH", local[26:30])
        start = info.header_offset + 30 + name_len + extra_len
        fp.seek(start)
        shape, fortran, dtype = _header(fp)
        offset = fp.tell()
        size = os.fstat(fp.fileno()).st_size
    if fortran or dtype != np.dtype(np.float32) or dtype.hasobject:
        return None
    count = int(np.prod(shape, dtype=np.int64))
    nbytes = count * dtype.itemsize
    if offset + nbytes > start + info.file_size or offset + nbytes > size:
        raise ValueError(f"member {member} is shorter than its array {shape}: the file is truncated")
    if count == 0:
        return None
    mapped = np.memmap(path, dtype=dtype, mode="c", offset=offset, shape=tuple(shape), order="C")
    register(mapped)  # the batch loops hand its pages back as they go (core/mapped.py)
    return mapped.view(np.ndarray)  # a plain array; its base keeps the map open


def _streamed(zf: zipfile.ZipFile, member: str) -> np.ndarray | None:
    """The member's numeric C-order array read from its (possibly compressed) stream into a
    new float32 array a chunk at a time, so that no copy in its own dtype exists at once;
    ``None`` for a Fortran-order, object or non-numeric array (read the ordinary way).
    """
    with zf.open(member) as fp:
        shape, fortran, dtype = _header(fp)
        if fortran or dtype.hasobject or dtype.kind not in "biuf" or len(shape) < 1:
            return None
        out = np.empty(shape, dtype=np.float32)
        flat = out.reshape(-1)
        step = max(1, _CHUNK_BYTES // max(1, dtype.itemsize))
        for start in range(0, flat.size, step):
            want = min(step, flat.size - start)
            raw = fp.read(want * dtype.itemsize)
            if len(raw) != want * dtype.itemsize:
                raise EOFError(f"member {member} ends early: the file is truncated")
            flat[start:start + want] = np.frombuffer(raw, dtype=dtype)
    return out


def _read_inputs(path: Path, zf: zipfile.ZipFile, npz, key: str) -> np.ndarray:
    """Array ``key`` as float32 with as few copies as its storage allows: memory-mapped
    (uncompressed float32), converted chunk by chunk from its stream (other numeric dtypes,
    compressed), or read whole (anything else, which :func:`_inputs` then checks).
    """
    member = f"{key}.npy"
    if member in zf.namelist():
        try:
            x = _mapped(path, zf, member)
            if x is None:
                x = _streamed(zf, member)
        except _Unsupported:
            x = None
        if x is not None:
            return x
    return npz[key]


def _inputs(path: Path, key: str, x: np.ndarray) -> np.ndarray:
    if x.dtype.kind not in "biuf":
        raise DeepFaultError(f"{path}: array {key!r} has dtype {x.dtype}; save numbers")
    if x.ndim < 2:
        raise DeepFaultError(f"{path}: array {key!r} has shape {x.shape}; expected (N, *input_shape)")
    if x.dtype != np.float32:
        x = x.astype(np.float32)
    if x.size and not all(np.isfinite(_range(x))):
        raise DeepFaultError(f"{path}: array {key!r} holds NaN or infinite values; remove them")
    return x


def _range(x: np.ndarray) -> tuple[float, float]:
    """``(min, max)`` of a non-empty ``x``, a chunk at a time, with no temporary array (a NaN
    anywhere makes both NaN, an infinity makes one infinite).
    """
    lo, hi = np.inf, -np.inf
    for _, chunk in _chunks(x):
        a, b = float(chunk.min()), float(chunk.max())
        lo = a if np.isnan(a) or a < lo else lo
        hi = b if np.isnan(b) or b > hi else hi
        if np.isnan(lo):
            return lo, lo
    return lo, hi


def _labels(path: Path, key: str, y: np.ndarray, n: int) -> np.ndarray:
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1 or len(y) != n:
        raise DeepFaultError(
            f"{path}: array {key!r} has shape {y.shape}; expected ({n},), one label per input"
        )
    if y.dtype.kind == "f":
        if not np.isfinite(y).all() or (y != np.round(y)).any():
            raise DeepFaultError(f"{path}: array {key!r} holds non-integer labels")
    elif y.dtype.kind not in "biu":
        raise DeepFaultError(f"{path}: array {key!r} has dtype {y.dtype}; save integer labels")
    if y.dtype.kind == "f" and len(y) and np.abs(y).max() > MAX_CLASSES:
        raise DeepFaultError(f"{path}: array {key!r} holds label {np.abs(y).max():g}; labels must be "
                             f"below {MAX_CLASSES:,} (the most classes deepfault takes)")
    y = y.astype(np.int64)
    if len(y) and y.min() < 0:
        raise DeepFaultError(f"{path}: array {key!r} holds the negative label {y.min()}")
    if len(y) and y.max() >= MAX_CLASSES:  # class names 0..max(y) would be allocated
        raise DeepFaultError(f"{path}: array {key!r} holds label {y.max()}; labels must be below "
                             f"{MAX_CLASSES:,} (the most classes deepfault takes); relabel them 0..C-1")
    return y


def _class_names(path: Path, arrays: dict, y_test: np.ndarray, y_train: np.ndarray) -> tuple[str, ...]:
    """The file's ``class_names`` (default ``"0"`` to the largest label), checked against the labels."""
    if "class_names" in arrays:
        names = arrays["class_names"]
        if names.ndim != 1 or names.dtype.kind not in "US" or not 0 < len(names) <= MAX_CLASSES:
            raise DeepFaultError(f"{path}: class_names must be a 1-D array of strings")
        class_names = tuple(str(n) for n in names.tolist())
    else:
        top = max([int(y.max()) for y in (y_test, y_train) if len(y)], default=0)
        class_names = tuple(str(c) for c in range(top + 1))
    for key, y in (("y", y_test), ("y_train", y_train)):
        if len(y) and y.max() >= len(class_names):
            raise DeepFaultError(
                f"{path}: array {key!r} holds label {y.max()} but there are only "
                f"{len(class_names)} class names"
            )
    return class_names


def _feature_bounds(path: Path, b: np.ndarray, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """A ``(2, ...)`` ``bounds`` array as per-feature ``(lo, hi)`` of one input's ``shape``."""
    if b.dtype.kind not in "biuf" or len(b) != 2:
        raise DeepFaultError(f"{path}: per-feature bounds must be a numeric array (2, ...): lo then hi; got "
                             f"shape {b.shape}, dtype {b.dtype}")
    try:
        lo, hi = (np.ascontiguousarray(np.broadcast_to(v.astype(np.float64), shape)) for v in b)
    except ValueError:
        raise DeepFaultError(f"{path}: bounds of shape {b.shape} do not fit inputs of shape {shape}; save "
                             f"bounds as (2, {', '.join(map(str, shape))}) or [lo, hi]") from None
    if not (np.isfinite(lo).all() and np.isfinite(hi).all()) or (lo > hi).any():
        raise DeepFaultError(f"{path}: per-feature bounds must be finite with lo <= hi for every feature")
    return lo, hi


def _checked_bounds(path: Path, arrays: dict, ranges: dict) -> tuple[float, float]:
    """The file's ``bounds``; an error naming the first split (``ranges``: key -> min, max) outside them."""
    bounds = _bounds(path, arrays)
    for key, (lo, hi) in ranges.items():
        if lo < bounds[0] or hi > bounds[1]:
            raise DeepFaultError(f"{path}: array {key!r} ranges over [{lo:g}, {hi:g}], outside the "
                                 f"bounds {bounds}; fix the inputs or the bounds array")
    return bounds


def _bounds(path: Path, arrays: dict) -> tuple[float, float]:
    """The file's own ``[lo, hi]`` ``bounds`` array, checked."""
    b = arrays["bounds"]
    if b.shape != (2,) or b.dtype.kind not in "biuf" or not np.isfinite(b).all() or (b[0] >= b[1]):
        raise DeepFaultError(
            f"{path}: bounds must be two finite numbers [lo, hi] with lo < hi; got {b!r}"
        )
    return (float(b[0]), float(b[1]))


def _read(path: Path) -> dict[str, np.ndarray]:
    """Every array of the file, ``x`` and ``x_train`` through :func:`_read_inputs`."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            names = list(npz.files)
            arrays = {key: npz[key] for key in names if key not in ("x", "x_train")}
            with zipfile.ZipFile(path) as zf:
                for key in ("x", "x_train"):
                    if key in names:
                        arrays[key] = _read_inputs(path, zf, npz, key)
    except Exception as err:  # BadZipFile, ValueError (object arrays), OSError, EOFError (truncated)
        raise DeepFaultError(
            f"cannot read {path} as .npz ({type(err).__name__}: {err}); save it with "
            "numpy.savez and numeric arrays"
        ) from err
    return arrays


def _splits(path: Path, arrays: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(x_test, y_test, x_train, y_train)`` checked (an empty training split when the file has none)."""
    for key in ("x", "y"):
        if key not in arrays:
            raise DeepFaultError(
                f"{path} lacks array {key!r} (it has {', '.join(sorted(arrays)) or 'none'}); "
                "save the test inputs as x and their labels as y"
            )
    if ("x_train" in arrays) != ("y_train" in arrays):
        raise DeepFaultError(f"{path}: give both x_train and y_train, or neither")

    x_test = _inputs(path, "x", arrays["x"])
    if len(x_test) == 0:
        raise DeepFaultError(f"{path}: array 'x' holds no inputs; save at least one test input")
    y_test = _labels(path, "y", arrays["y"], len(x_test))
    if "x_train" not in arrays:
        return x_test, y_test, np.empty((0, *x_test.shape[1:]), dtype=np.float32), np.empty(0, dtype=np.int64)
    x_train = _inputs(path, "x_train", arrays["x_train"])
    if x_train.shape[1:] != x_test.shape[1:]:
        raise DeepFaultError(
            f"{path}: x_train inputs are {x_train.shape[1:]} but x inputs are "
            f"{x_test.shape[1:]}; both splits need the same input shape"
        )
    return x_test, y_test, x_train, _labels(path, "y_train", arrays["y_train"], len(x_train))


def _check_feature_bounds(path: Path, key: str, x: np.ndarray,
                          per_feature: tuple[np.ndarray, np.ndarray]) -> None:
    """Refuse the first input of ``x`` with a feature outside its per-feature bounds."""
    for start, chunk in _chunks(x):
        out = (chunk < per_feature[0]) | (chunk > per_feature[1])
        if not out.any():
            continue
        first = np.argwhere(out)[0]
        first[0] += start
        at = tuple(int(i) for i in first)
        raise DeepFaultError(f"{path}: array {key!r} input {at[0]} has {x[at]:g} at feature "
                             f"{at[1] if len(at) == 2 else at[1:]}, outside its bounds "
                             f"[{per_feature[0][at[1:]]:g}, {per_feature[1][at[1:]]:g}]; fix the "
                             "inputs or the bounds array")


def load_npz(path: str | os.PathLike, *, name: str | None = None) -> Dataset:
    """Load a data set from an ``.npz`` file (see the module docstring for its arrays).

    The file is read with ``allow_pickle=False``, so it can hold numbers and strings only.

    Args:
        path: The ``.npz`` file.
        name: The data set's name; the file's stem by default.

    Inputs ``x`` and ``x_train`` stored as ``numpy.savez`` stores float32 arrays
    (uncompressed, C order) are memory-mapped, not read: loading them costs no memory, and
    the checks read them a chunk at a time. Other storage (compressed, another dtype) is
    converted into one float32 array a chunk at a time.

    Returns:
        A :class:`Dataset` with ``float32`` inputs and ``int64`` labels.

    Raises:
        DeepFaultError: The file is missing or unreadable, lacks ``x``/``y``, or holds
            arrays of the wrong shape, NaNs, negative or non-integer labels, labels
            beyond ``class_names``, bad ``bounds``, or inputs outside the ``bounds``
            the file declares (without ``bounds`` they are inferred, and checked against
            the model's range where the model meets the data).
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise DeepFaultError(f"data set file {path} not found; give the path of an .npz file")
    arrays = _read(path)
    x_test, y_test, x_train, y_train = _splits(path, arrays)
    class_names = _class_names(path, arrays, y_test, y_train)
    per_feature = None
    if "bounds" in arrays and arrays["bounds"].ndim >= 2:
        per_feature = _feature_bounds(path, arrays["bounds"], x_test.shape[1:])
        for key, x in (("x", x_test), ("x_train", x_train)):
            _check_feature_bounds(path, key, x, per_feature)
        lo, hi = float(per_feature[0].min()), float(per_feature[1].max())
        arrays = {**arrays, "bounds": np.array([lo, hi if hi > lo else lo + 1.0])}
    ranges = {key: _range(x) for key, x in (("x", x_test), ("x_train", x_train)) if x.size}
    if "bounds" in arrays:
        bounds = _checked_bounds(path, arrays, ranges)
    else:
        bounds = infer_bounds(ranges.values(), name or path.stem)

    release()  # the checks read every page; none is needed until a pass reads it
    return Dataset(
        name=name or path.stem,
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        bounds=bounds,
        class_names=class_names,
        meta={"path": str(path), "class_names_given": "class_names" in arrays,
              **({} if "bounds" in arrays else
                 {"bounds_inferred": True, "data_range": data_range(ranges.values())})},
        feature_bounds=per_feature,
    )
