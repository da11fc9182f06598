"""The embedded default: scikit-learn's bundled 8x8 handwritten digits (1,797 images)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from . import Dataset, register_dataset

#: Share of the 1,797 images held out for testing, stratified by class.
TEST_FRACTION = 0.3
#: Seed of the fixed train/test split; changing it changes the embedded default.
SPLIT_SEED = 0


@register_dataset("digits", description="scikit-learn's bundled 8x8 digits, 1x8x8, [0, 1]")
def load_digits(data_dir: Path | None = None) -> Dataset:
    """scikit-learn's bundled 8x8 handwritten digits as 1x8x8 images in [0, 1].

    The split is fixed (stratified, ``SPLIT_SEED``) so every run sees the same test set.
    ``data_dir`` is ignored: the data ship with scikit-learn.
    """
    from sklearn.datasets import load_digits as _load
    from sklearn.model_selection import train_test_split

    bunch = _load()
    x = (bunch.data.astype(np.float32) / 16.0).reshape(-1, 1, 8, 8)
    y = bunch.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=TEST_FRACTION, random_state=SPLIT_SEED, stratify=y
    )
    return Dataset(
        name="digits",
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        bounds=(0.0, 1.0),
        class_names=tuple(str(d) for d in range(10)),
    )
