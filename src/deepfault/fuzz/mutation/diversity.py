"""DRFuzz's diversity criterion ("change") and the unique-failure set (spec section 7).

For root ``s``, M1 label ``y1`` and class ``k``, ``T[s, y1, k]`` is the largest failure
tendency ``p2[k] - p1[k]`` seen so far, initialised from the seeds. Every input that can
join the queue or is a regression fault has M1 right, so ``y1`` is the root's label and
the table is stored as ``T[s, k]`` (``k = y1`` is never read or written).

- A candidate mutant (both models right) is **kept** when some ``k != y2`` has
  ``p2[k] - p1[k] > T[s, k]`` (:func:`raises_tendency`).
- The kept candidates and the regression faults of an iteration then raise ``T`` to their
  values (:meth:`DiversityTable.update`), for every ``k != y1``.
- A regression fault adds ``(s, y1, y2)`` to the unique-failure set; a root with
  :data:`ROOT_FAILURE_LIMIT` unique failures is banned.

Examples:
    >>> import numpy as np
    >>> table = DiversityTable(np.array([0]), np.array([[0.9, 0.05, 0.05]]), np.array([[0.8, 0.1, 0.1]]))
    >>> [round(float(v), 2) for v in table.table[0]]
    [-inf, 0.05, 0.05]
    >>> tendency = np.array([[-0.2, 0.04, 0.06], [-0.1, 0.05, 0.05]])
    >>> raises_tendency(table.table[[0, 0]], tendency, np.array([0, 0]))
    array([ True, False])
"""

from __future__ import annotations

import numpy as np

from ...errors import DeepFaultError

__all__ = ["DiversityTable", "FailureSet", "ROOT_FAILURE_LIMIT", "raises_tendency", "tendency_of"]

#: A root with this many unique failures is banned.
ROOT_FAILURE_LIMIT = 9


def raises_tendency(rows: np.ndarray, tendency: np.ndarray, y2: np.ndarray) -> np.ndarray:
    """``(B,)`` bool: whether each mutant's ``p2[k] - p1[k]`` exceeds ``rows[k]`` for a ``k != y2``.

    Args:
        rows: ``(B, C)`` the table rows of the mutants' roots.
        tendency: ``(B, C)`` the mutants' ``p2 - p1``.
        y2: ``(B,)`` M2's predictions.
    """
    above = (tendency > rows) & np.isfinite(rows)  # the label's column (-inf) is never compared
    above[np.arange(len(y2)), y2] = False
    return above.any(axis=1)


def tendency_of(p1: np.ndarray, p2: np.ndarray, y1: np.ndarray) -> np.ndarray:
    """``(B,)`` the class ``k != y1`` with the largest ``p2[k] - p1[k]`` (DRFuzz's failure direction)."""
    t = (np.asarray(p2) - np.asarray(p1)).astype(np.float64)
    t[np.arange(len(t)), y1] = -np.inf
    return t.argmax(axis=1)


class DiversityTable:
    """``T[s, k]``, initialised from the seeds.

    Args:
        labels: ``(S,)`` each root's label (M1 is right on every seed, so also its ``y1``).
        p1, p2: ``(S, C)`` the two models' probability vectors on the seeds.
    """

    def __init__(self, labels: np.ndarray, p1: np.ndarray, p2: np.ndarray):
        labels = np.asarray(labels, dtype=np.int64)
        if np.asarray(p1).shape != np.asarray(p2).shape or len(p1) != len(labels):
            raise DeepFaultError("labels, p1 and p2 must describe the same seeds")
        self.labels = labels
        self.table = (np.asarray(p2, dtype=np.float32) - np.asarray(p1, dtype=np.float32)).copy()
        self.table[np.arange(len(labels)), labels] = -np.inf

    def keep(self, roots: np.ndarray, tendency: np.ndarray, y2: np.ndarray) -> np.ndarray:
        """``(B,)`` bool: :func:`raises_tendency` against the current table (no side effect)."""
        return raises_tendency(self.table[roots], tendency, y2)

    def update(self, roots: np.ndarray, tendency: np.ndarray) -> None:
        """Raise ``T[s, k]`` to every row's ``p2[k] - p1[k]`` (``k != y1`` stays ``-inf``)."""
        if len(roots) == 0:
            return
        values = np.asarray(tendency, dtype=np.float32).copy()
        values[np.arange(len(roots)), self.labels[roots]] = -np.inf
        np.maximum.at(self.table, np.asarray(roots), values)

    def merge(self, table: np.ndarray) -> None:
        """Raise ``T`` to another worker's table of the same roots (:mod:`~..campaign.workers`):
        ``T`` is a running maximum, so the elementwise maximum is what one table seeing both
        workers' inputs would hold.
        """
        table = np.asarray(table, dtype=np.float32)
        if table.shape != self.table.shape:
            raise DeepFaultError(f"diversity table of shape {table.shape}; expected {self.table.shape}")
        np.maximum(self.table, table, out=self.table)

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"table": self.table.copy()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        table = np.asarray(state["table"], dtype=np.float32)
        if table.shape != self.table.shape:
            raise DeepFaultError(f"diversity table of shape {table.shape}; expected {self.table.shape}")
        self.table = table.copy()


class FailureSet:
    """The unique regression failures ``(root, y1, y2)`` and how many each root has.

    Args:
        num_roots: Number of roots.
    """

    def __init__(self, num_roots: int):
        self.keys: set[tuple[int, int, int]] = set()
        self.per_root = np.zeros(int(num_roots), dtype=np.int32)

    def __len__(self) -> int:
        return len(self.keys)

    def add(self, roots: np.ndarray, y1: np.ndarray, y2: np.ndarray) -> np.ndarray:
        """Add keys in order; ``(B,)`` bool: which were new."""
        new = np.zeros(len(roots), dtype=bool)
        for i, key in enumerate(zip(np.asarray(roots).tolist(), np.asarray(y1).tolist(),
                                    np.asarray(y2).tolist(), strict=True)):
            if key not in self.keys:
                self.keys.add(key)
                self.per_root[key[0]] += 1
                new[i] = True
        return new

    def merge(self, keys: np.ndarray) -> int:
        """Add another worker's keys ``(K, 3)`` (:mod:`~..campaign.workers`): afterwards a failure
        it found is no new failure here, and its roots count toward the ban; returns how many
        were new.
        """
        keys = np.asarray(keys, dtype=np.int64).reshape(-1, 3)
        return int(self.add(keys[:, 0], keys[:, 1], keys[:, 2]).sum())

    def state_dict(self) -> dict[str, np.ndarray]:
        keys = np.array(sorted(self.keys), dtype=np.int64).reshape(-1, 3)
        return {"keys": keys}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.keys = {(int(a), int(b), int(c)) for a, b, c in np.asarray(state["keys"]).reshape(-1, 3)}
        self.per_root[:] = 0
        for root, _, _ in self.keys:
            self.per_root[root] += 1
