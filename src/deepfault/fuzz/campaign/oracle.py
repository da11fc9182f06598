"""The regression oracle: which bucket each executed mutant falls in (spec section 1).

``M1`` is the original model, ``M2`` its new version. A generated input inherits its seed's
label ``y``; ``y1`` and ``y2`` are the two models' predictions and ``d = p1[y1] - p2[y1]``
(``p`` the probability vectors). The buckets:

| condition | bucket | becomes |
| --- | --- | --- |
| M1 right, M2 wrong | ``RF`` | recorded; never mutated further |
| M1 wrong, M2 wrong | ``BOTH_FAIL`` | recorded |
| M1 wrong, M2 right | ``FIX`` | dropped |
| both right, ``d > 0.3`` | ``WEAKEN`` | candidate seed |
| both right, ``0.15 < d <= 0.3`` | ``HALF_WEAKEN`` | candidate seed |
| both right, otherwise | ``REST`` | candidate seed |
| both right, ``d < 0`` and ``d_parent - d > 0.15`` | ``REST_DROPPED`` | dropped (DRFuzz) |

The last row is DRFuzz's "M2 has become more confident than M1 by more than 0.15
relative to the seed" (``d_parent`` is the selected input's own ``d``; the published code
also requires ``d_parent != 0``, kept here).

Examples:
    >>> import numpy as np
    >>> p1 = np.array([[0.9, 0.1], [0.9, 0.1], [0.2, 0.8]])
    >>> p2 = np.array([[0.2, 0.8], [0.5, 0.5], [0.3, 0.7]])
    >>> classify(p1, p2, np.array([0, 0, 0])).buckets.tolist()
    [0, 3, 1]
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import torch

from ...core.kinds import OUTPUT_KINDS
from ...errors import DeepFaultError

__all__ = [
    "Bucket",
    "Classification",
    "CANDIDATE_BUCKETS",
    "HALF_WEAKEN_THRESHOLD",
    "WEAKEN_THRESHOLD",
    "DROP_MARGIN",
    "classify",
    "to_probabilities",
]

#: ``d`` above this: weaken.
WEAKEN_THRESHOLD = 0.3
#: ``d`` above this (and at most :data:`WEAKEN_THRESHOLD`): half-weaken.
HALF_WEAKEN_THRESHOLD = 0.15
#: A "rest" mutant is dropped when ``d < 0`` and ``d_parent - d`` exceeds this.
DROP_MARGIN = 0.15


class Bucket(IntEnum):
    """The oracle's verdict on one executed mutant."""

    RF = 0
    BOTH_FAIL = 1
    FIX = 2
    WEAKEN = 3
    HALF_WEAKEN = 4
    REST = 5
    REST_DROPPED = 6


#: Buckets whose mutants may join the queue (subject to the strategy's keep rule).
CANDIDATE_BUCKETS = (Bucket.WEAKEN, Bucket.HALF_WEAKEN, Bucket.REST)


@dataclass(frozen=True)
class Classification:
    """The oracle on a batch of ``B`` mutants.

    Attributes:
        buckets: ``(B,)`` int8 :class:`Bucket` codes.
        y1, y2: ``(B,)`` int64 predictions of M1 and M2.
        d: ``(B,)`` float ``p1[y1] - p2[y1]``.
    """

    buckets: np.ndarray
    y1: np.ndarray
    y2: np.ndarray
    d: np.ndarray

    def to_dict(self) -> dict:
        return {"buckets": self.buckets.tolist(), "y1": self.y1.tolist(), "y2": self.y2.tolist(),
                "d": self.d.tolist()}


def to_probabilities(outputs: torch.Tensor, kind: str = "logits") -> torch.Tensor:
    """``(B, C)`` probability vectors from a model's outputs (softmax of logits)."""
    if kind not in OUTPUT_KINDS:
        raise DeepFaultError(f"output kind must be one of {', '.join(OUTPUT_KINDS)}; got {kind!r}")
    outputs = outputs.float()
    return torch.softmax(outputs, dim=1) if kind == "logits" else outputs


def classify(
    p1: np.ndarray, p2: np.ndarray, labels: np.ndarray, parent_d: np.ndarray | None = None
) -> Classification:
    """Bucket every mutant (see the module docstring).

    Args:
        p1: ``(B, C)`` probability vectors of M1.
        p2: ``(B, C)`` probability vectors of M2.
        labels: ``(B,)`` the labels the mutants inherit from their seeds.
        parent_d: ``(B,)`` the selected input's ``d`` for each mutant; without it no mutant
            is dropped as ``REST_DROPPED``.

    Returns:
        A :class:`Classification`.
    """
    p1 = np.asarray(p1)
    p2 = np.asarray(p2)
    labels = np.asarray(labels)
    if p1.shape != p2.shape or p1.ndim != 2 or labels.shape != (len(p1),):
        raise DeepFaultError(
            f"p1, p2 must be (B, C) and labels (B,); got {p1.shape}, {p2.shape} and {labels.shape}"
        )
    y1 = p1.argmax(axis=1)
    y2 = p2.argmax(axis=1)
    rows = np.arange(len(p1))
    d = p1[rows, y1] - p2[rows, y1]
    right1 = y1 == labels
    right2 = y2 == labels
    buckets = np.full(len(p1), Bucket.REST, dtype=np.int8)
    both = right1 & right2
    buckets[right1 & ~right2] = Bucket.RF
    buckets[~right1 & ~right2] = Bucket.BOTH_FAIL
    buckets[~right1 & right2] = Bucket.FIX
    buckets[both & (d > WEAKEN_THRESHOLD)] = Bucket.WEAKEN
    buckets[both & (d > HALF_WEAKEN_THRESHOLD) & (d <= WEAKEN_THRESHOLD)] = Bucket.HALF_WEAKEN
    if parent_d is not None:
        parent_d = np.asarray(parent_d)
        dropped = both & (d < 0) & (parent_d != 0) & (parent_d - d > DROP_MARGIN)
        buckets[dropped] = Bucket.REST_DROPPED
    return Classification(buckets, y1.astype(np.int64), y2.astype(np.int64), d)
