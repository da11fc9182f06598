"""The held-out part of every input file, split by seed.

Inputs made from one test input (its *seed*) are near-copies of each other, so a random
split of the inputs would evaluate the repair on copies of what it was trained on. The
split is by seed instead: every test index gets one random key (from ``seed``), and each
file holds out the ``round(holdout * G)`` of its ``G`` seeds with the smallest keys (at
least one and at most ``G - 1`` when ``0 < holdout`` and ``G >= 2``). Because the keys are
shared, files made from the same test inputs tend to hold out the same seeds.
"""

from __future__ import annotations

import numpy as np

from ..errors import DeepFaultError

__all__ = ["seed_keys", "split_by_seed"]


def seed_keys(num_test: int, seed: int) -> np.ndarray:
    """``(num_test,)`` one uniform random key per test index, from ``seed``."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(21,))).random(num_test)


def split_by_seed(seed_index: np.ndarray, *, holdout: float, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Split the rows of one file into training rows and held-out rows by their seeds.

    Args:
        seed_index: ``(F,)`` each row's seed (an index into ``keys``).
        holdout: Share of the seeds held out, in ``[0, 1)``.
        keys: :func:`seed_keys`.

    Returns:
        ``(train_rows, held_rows)``, disjoint, sorted, together every row.

    Raises:
        DeepFaultError: A seed index outside the test split.
    """
    seed_index = np.asarray(seed_index, dtype=np.int64)
    if len(seed_index) and (seed_index.min() < 0 or seed_index.max() >= len(keys)):
        raise DeepFaultError(f"the inputs name seed {int(seed_index.max())} but the test split has {len(keys)} "
                             "inputs; give the data set the inputs were made from")
    groups = np.unique(seed_index)
    n_held = int(round(holdout * len(groups)))
    if holdout > 0 and len(groups) >= 2:
        n_held = min(max(n_held, 1), len(groups) - 1)
    held_groups = groups[np.argsort(keys[groups], kind="stable")[:n_held]]
    held = np.isin(seed_index, held_groups)
    return np.flatnonzero(~held), np.flatnonzero(held)
