"""The held-out part of every input file, split by seed.

Inputs made from one test input (its *seed*) are near-copies of each other, so a random
split of the inputs would evaluate the repair on copies of what it was trained on. The
split is by seed instead: every test index gets one uniform random key (from ``seed``) and
a seed is held out when its key is below ``holdout``, so about that share of every file's
seeds is held out, and files made from the same test inputs hold out the same seeds (a
cross table that trains on one file and tests on another's held-out part never tests on a
seed it trained on). A file with two or more seeds keeps at least one on each side.
"""

from __future__ import annotations

import numpy as np

from ..errors import DeepFaultError

__all__ = ["seed_keys", "split_by_seed"]


def seed_keys(num_test: int, seed: int) -> np.ndarray:
    """``(num_test,)`` one uniform random key per test index, from ``seed``."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(21,))).random(num_test)


def split_by_seed(
    seed_index: np.ndarray, *, holdout: float, keys: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
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
        raise DeepFaultError(
            f"the inputs name seed {int(seed_index.max())} but the test split has {len(keys)} "
            "inputs; give the data set the inputs were made from"
        )
    groups = np.unique(seed_index)
    held_groups = groups[keys[groups] < holdout]
    if holdout > 0 and len(groups) >= 2:
        order = groups[np.argsort(keys[groups], kind="stable")]
        if len(held_groups) == 0:
            held_groups = order[:1]
        elif len(held_groups) == len(groups):
            held_groups = order[:-1]
    held = np.isin(seed_index, held_groups)
    return np.flatnonzero(~held), np.flatnonzero(held)
