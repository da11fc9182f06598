"""The embedded default: the 8x8 handwritten digits (1,797 images) that ship with deepfault.

The images are scikit-learn's bundled copy of the UCI "Optical Recognition of Handwritten
Digits" test set (pixels 0..16), stored in ``embedded/digits.npz`` (48 KB) with the fixed
stratified 70/30 split that scikit-learn's ``train_test_split(test_size=0.3,
random_state=0, stratify=y)`` gives, so the default needs neither scikit-learn nor a
download. A test checks the file against scikit-learn where it is installed.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import numpy as np

from ._api import register_dataset
from .dataset import Dataset

#: Share of the 1,797 images held out for testing, stratified by class.
TEST_FRACTION = 0.3
#: Seed of the fixed train/test split; changing it changes the embedded default.
SPLIT_SEED = 0


@register_dataset("digits", description="the embedded 8x8 handwritten digits, 1x8x8, [0, 1]")
def load_digits(data_dir: Path | None = None) -> Dataset:
    """The embedded 8x8 handwritten digits as 1x8x8 images in [0, 1].

    The split is fixed (stratified, ``SPLIT_SEED``) so every run sees the same test set.
    ``data_dir`` is ignored: the data ship with deepfault.

    Examples:
        >>> ds = load_digits()
        >>> ds.x_train.shape, ds.x_test.shape, ds.bounds
        ((1257, 1, 8, 8), (540, 1, 8, 8), (0.0, 1.0))
    """
    with resources.files(__package__).joinpath("embedded/digits.npz").open("rb") as f, \
            np.load(f, allow_pickle=False) as z:
        pixels, labels = z["pixels"], z["labels"]
        train, test = z["train_index"].astype(np.int64), z["test_index"].astype(np.int64)
    x = (pixels.astype(np.float32) / 16.0).reshape(-1, 1, 8, 8)
    y = labels.astype(np.int64)
    return Dataset(
        name="digits",
        x_train=x[train],
        y_train=y[train],
        x_test=x[test],
        y_test=y[test],
        bounds=(0.0, 1.0),
        class_names=tuple(str(d) for d in range(10)),
    )
