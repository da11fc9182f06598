"""Entry ids: the content hash that deduplicates a corpus."""

from __future__ import annotations

import hashlib

import numpy as np

__all__ = ["entry_ids", "ID_LENGTH"]

#: Hex digits of an entry id (SHA-256, whole).
ID_LENGTH = 64


def entry_ids(inputs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The id of each entry: SHA-256 of its label (int64, little-endian) then its input's bytes
    (float32, little-endian, C order).

    Two entries with the same input and the same expected label are one entry; the same input
    with another label is another entry (a corpus keeps both and the replay reports both).

    Args:
        inputs: ``(N, *input_shape)`` float32 array.
        labels: ``(N,)`` integer labels.

    Returns:
        ``(N,)`` array of 64-character hex strings (numpy ``<U64``).
    """
    x = np.ascontiguousarray(inputs, dtype="<f4").reshape(len(inputs), -1)
    y = np.ascontiguousarray(labels, dtype="<i8")
    out = np.empty(len(x), dtype=f"<U{ID_LENGTH}")
    for i in range(len(x)):
        h = hashlib.sha256(y[i].tobytes())
        h.update(x[i].tobytes())
        out[i] = h.hexdigest()
    return out
