"""SVHN (Netzer et al., 2011), cropped digits: ``train_32x32.mat`` and ``test_32x32.mat``.

Each MATLAB file holds ``X`` (``32 x 32 x 3 x N`` ``uint8``) and ``y`` (``N x 1``, with
label 10 standing for the digit 0). The files are looked for in ``ROOT/svhn/`` and then
in ``ROOT`` itself (torchvision's layout).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import DeepFaultError
from ._api import register_dataset
from .dataset import Dataset, pixel_dataset
from .download import SOURCES, fetch_hint

__all__ = ["load_svhn"]

_FILES = {"train": "train_32x32.mat", "test": "test_32x32.mat"}


def _find(root: Path, file: str) -> Path:
    for candidate in (root / "svhn" / file, root / file):
        if candidate.is_file():
            return candidate
    raise DeepFaultError(f"SVHN file {file} not found in {root / 'svhn'} or {root}; run {fetch_hint('svhn')}")


def _read(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One split as ``uint8`` images ``(N, 3, 32, 32)`` and ``int64`` labels 0-9."""
    from scipy.io import loadmat

    md5 = next(r.md5 for r in SOURCES["svhn"].remote if r.name == path.name)
    fix = f"the official file has md5 {md5}; delete it and run {fetch_hint('svhn')}"
    try:
        mat = loadmat(path, variable_names=["X", "y"])
    except Exception as err:  # scipy raises ValueError, OSError, MatReadError, ...
        raise DeepFaultError(f"corrupt SVHN file {path}: {type(err).__name__}: {err}; {fix}") from err
    if "X" not in mat or "y" not in mat:
        raise DeepFaultError(f"corrupt SVHN file {path}: it lacks 'X' or 'y'; {fix}")
    x, y = mat["X"], mat["y"]
    if x.dtype != np.uint8 or x.ndim != 4 or x.shape[:3] != (32, 32, 3):
        raise DeepFaultError(
            f"corrupt SVHN file {path}: 'X' is {x.dtype} {x.shape}, not uint8 32x32x3xN; {fix}"
        )
    y = _labels(path, y, fix)
    if len(y) != x.shape[3]:
        raise DeepFaultError(f"corrupt SVHN file {path}: {len(y):,} labels for {x.shape[3]:,} images; {fix}")
    y[y == 10] = 0
    if len(y) and (y.min() < 0 or y.max() > 9):
        raise DeepFaultError(
            f"corrupt SVHN file {path}: labels range over {y.min()}..{y.max()}, not 1..10; {fix}"
        )
    # (H, W, C, N) -> (N, C, H, W)
    return x.transpose(3, 2, 0, 1), y


def _labels(path: Path, y: np.ndarray, fix: str) -> np.ndarray:
    """``y`` as ``(N,)`` ``int64``: whole numbers (MATLAB stores them as doubles), never text,
    NaN or fractions, which a cast would turn into a traceback or into other labels.
    """
    if y.dtype.kind not in "iuf":
        raise DeepFaultError(f"corrupt SVHN file {path}: 'y' holds {y.dtype} values, not numbers 1..10; "
                             f"{fix}")
    y = y.reshape(-1)
    if y.dtype.kind == "f" and not (np.isfinite(y) & (y == np.round(y))).all():
        raise DeepFaultError(f"corrupt SVHN file {path}: 'y' holds NaN, infinite or fractional labels, not "
                             f"whole numbers 1..10; {fix}")
    if y.dtype.kind == "f" and len(y) and np.abs(y).max() >= 2**62:
        return np.clip(y, -(2**62), 2**62).astype(np.int64)  # out of range: refused by the range check
    return y.astype(np.int64)


@register_dataset("svhn", description="SVHN house-number digits, 3x32x32, [0, 255]")
def load_svhn(data_dir: Path, *, scale01: bool = False) -> Dataset:
    """SVHN cropped digits: 73,257 + 26,032 colour images, ``(N, 3, 32, 32)`` ``float32``.

    Args:
        data_dir: The data root holding ``svhn/`` (or the two ``.mat`` files directly).
        scale01: Divide the pixels by 255 so they lie in [0, 1] (bounds ``(0, 1)``);
            by default they stay in [0, 255] (bounds ``(0, 255)``), as for CIFAR-10.

    Returns:
        The data set, with label 10 mapped to the digit 0.

    Raises:
        DeepFaultError: A file is missing or corrupt; the message names it, its official
            md5 and ``deepfault data download svhn``.
    """
    root = Path(data_dir)
    splits = {split: _read(_find(root, file)) for split, file in _FILES.items()}

    digits = (str(d) for d in range(10))
    return pixel_dataset("svhn", splits["train"], splits["test"], digits, scale01=scale01,
                         meta=None)
