"""A user's own data set given as one ``.npz`` file.

Arrays, by name:

* ``x``, ``y``: the test split (the inputs analysed and perturbed), ``x`` shaped
  ``(N, *input_shape)`` in the layout the model takes, ``y`` ``N`` integer labels;
* ``x_train``, ``y_train`` (optional): a training split of the same input shape;
  without them the training split is empty;
* ``bounds`` (optional): ``[lo, hi]``, the valid input range; ``(0, 1)`` by default; or one
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
from pathlib import Path

import numpy as np

from ..checks import MAX_CLASSES
from ..errors import DeepFaultError
from .dataset import Dataset

__all__ = ["load_npz"]


def _inputs(path: Path, key: str, x: np.ndarray) -> np.ndarray:
    if x.dtype.kind not in "biuf":
        raise DeepFaultError(f"{path}: array {key!r} has dtype {x.dtype}; save numbers")
    if x.ndim < 2:
        raise DeepFaultError(f"{path}: array {key!r} has shape {x.shape}; expected (N, *input_shape)")
    x = x.astype(np.float32)
    if not np.isfinite(x).all():
        raise DeepFaultError(f"{path}: array {key!r} holds NaN or infinite values; remove them")
    return x


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


def _bounds(path: Path, arrays: dict) -> tuple[tuple[float, float], str]:
    """The file's ``bounds`` (default ``(0, 1)``) and the fix to suggest for inputs outside them."""
    if "bounds" not in arrays:
        return (0.0, 1.0), "add a bounds array, e.g. numpy.savez(..., bounds=[0, 255])"
    b = arrays["bounds"]
    if b.shape != (2,) or b.dtype.kind not in "biuf" or not np.isfinite(b).all() or (b[0] >= b[1]):
        raise DeepFaultError(
            f"{path}: bounds must be two finite numbers [lo, hi] with lo < hi; got {b!r}"
        )
    return (float(b[0]), float(b[1])), "fix the inputs or the bounds array"


def load_npz(path: str | os.PathLike, *, name: str | None = None) -> Dataset:
    """Load a data set from an ``.npz`` file (see the module docstring for its arrays).

    The file is read with ``allow_pickle=False``, so it can hold numbers and strings only.

    Args:
        path: The ``.npz`` file.
        name: The data set's name; the file's stem by default.

    Returns:
        A :class:`Dataset` with ``float32`` inputs and ``int64`` labels.

    Raises:
        DeepFaultError: The file is missing or unreadable, lacks ``x``/``y``, or holds
            arrays of the wrong shape, NaNs, negative or non-integer labels, labels
            beyond ``class_names``, bad ``bounds``, or inputs outside ``bounds``
            (without ``bounds``, outside ``(0, 1)``: the message asks for a ``bounds``
            array).
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise DeepFaultError(f"data set file {path} not found; give the path of an .npz file")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {key: npz[key] for key in npz.files}
    except Exception as err:  # BadZipFile, ValueError (object arrays), OSError
        raise DeepFaultError(
            f"cannot read {path} as .npz ({type(err).__name__}: {err}); save it with "
            "numpy.savez and numeric arrays"
        ) from err

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
    if "x_train" in arrays:
        x_train = _inputs(path, "x_train", arrays["x_train"])
        if x_train.shape[1:] != x_test.shape[1:]:
            raise DeepFaultError(
                f"{path}: x_train inputs are {x_train.shape[1:]} but x inputs are "
                f"{x_test.shape[1:]}; both splits need the same input shape"
            )
        y_train = _labels(path, "y_train", arrays["y_train"], len(x_train))
    else:
        x_train = np.empty((0, *x_test.shape[1:]), dtype=np.float32)
        y_train = np.empty(0, dtype=np.int64)

    class_names = _class_names(path, arrays, y_test, y_train)
    per_feature = None
    if "bounds" in arrays and arrays["bounds"].ndim >= 2:
        per_feature = _feature_bounds(path, arrays["bounds"], x_test.shape[1:])
        for key, x in (("x", x_test), ("x_train", x_train)):
            out = (x < per_feature[0]) | (x > per_feature[1])
            if out.any():
                at = tuple(int(i) for i in np.argwhere(out)[0])
                raise DeepFaultError(f"{path}: array {key!r} input {at[0]} has {x[at]:g} at feature "
                                     f"{at[1] if len(at) == 2 else at[1:]}, outside its bounds "
                                     f"[{per_feature[0][at[1:]]:g}, {per_feature[1][at[1:]]:g}]; fix the "
                                     "inputs or the bounds array")
        lo, hi = float(per_feature[0].min()), float(per_feature[1].max())
        arrays = {**arrays, "bounds": np.array([lo, hi if hi > lo else lo + 1.0])}
    bounds, fix = _bounds(path, arrays)
    for key, x in (("x", x_test), ("x_train", x_train)):
        if x.size and (x.min() < bounds[0] or x.max() > bounds[1]):
            raise DeepFaultError(
                f"{path}: array {key!r} ranges over [{x.min():g}, {x.max():g}], outside the "
                f"bounds {bounds}; {fix}"
            )

    return Dataset(
        name=name or path.stem,
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        bounds=bounds,
        class_names=class_names,
        meta={"path": str(path), "class_names_given": "class_names" in arrays},
        feature_bounds=per_feature,
    )
