"""The coverage criteria as naive loops over inputs and neurons, straight from the spec.

Deliberately slow and literal (Python floats, one input and one neuron at a time), so the
vectorised criteria, the streaming profile and the greedy ranking can be checked against them
(tests) and timed against them (``benchmarks/bench_coverage.py``). Not for real use.

Each ``*_sets`` function takes ``values``, a list of per-input lists of neuron values in layout
order, and returns, per input, the set of items it covers (the item numbering of
:mod:`deepfault.coverage.criteria`: ``n * items_per_neuron + j``; TKNP: the pattern tuple).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = [
    "nc_sets",
    "kmnc_sets",
    "nbc_sets",
    "snac_sets",
    "tknc_sets",
    "tknp_sets",
    "profile_reference",
    "greedy_reference",
    "apfd_reference",
    "coverage_reference",
]

Rows = Sequence[Sequence[float]]
Layers = Sequence[tuple[int, int]]  # (offset, size) per layer


def nc_sets(values: Rows, threshold: float) -> list[set]:
    """NC / NAC: ``x`` covers ``n`` when ``v(x, n) > t``."""
    out = []
    for row in values:
        covered = set()
        for n, v in enumerate(row):
            if float(v) > threshold:
                covered.add(n)
        out.append(covered)
    return out


def kmnc_sets(values: Rows, low, high, k: int) -> list[set]:
    """KMNC: section ``i`` of ``n`` when ``low + i*w <= v < low + (i+1)*w``, the last section
    closed at ``high``; nothing outside ``[low, high]``.
    """
    out = []
    for row in values:
        covered = set()
        for n, v in enumerate(row):
            v, lo, hi = float(v), float(low[n]), float(high[n])
            if v < lo or v > hi:
                continue
            w = (hi - lo) / k
            for i in range(k):
                start, stop = lo + i * w, lo + (i + 1) * w
                last = i == k - 1
                if (start <= v < stop) or (last and start <= v <= hi):
                    covered.add(n * k + i)
                    break
        out.append(covered)
    return out


def nbc_sets(values: Rows, low, high, std, scale: float) -> list[set]:
    """NBC: lower corner (``2n``) when ``v < low - s*std``, upper (``2n+1``) when ``v > high + s*std``."""
    out = []
    for row in values:
        covered = set()
        for n, v in enumerate(row):
            if float(v) < float(low[n]) - scale * float(std[n]):
                covered.add(2 * n)
            if float(v) > float(high[n]) + scale * float(std[n]):
                covered.add(2 * n + 1)
        out.append(covered)
    return out


def snac_sets(values: Rows, high, std, scale: float) -> list[set]:
    """SNAC: ``n`` when ``v > high + s*std``."""
    out = []
    for row in values:
        covered = set()
        for n, v in enumerate(row):
            if float(v) > float(high[n]) + scale * float(std[n]):
                covered.add(n)
        out.append(covered)
    return out


def _top(row, offset: int, size: int, k: int) -> list[int]:
    """The ``k`` units with the largest values, ties to the lower unit."""
    chosen: list[int] = []
    for _ in range(min(k, size)):
        best: int | None = None
        for u in range(size):
            if u in chosen:
                continue
            if best is None or float(row[offset + u]) > float(row[offset + best]):
                best = u
        assert best is not None  # fewer than size units are chosen so far
        chosen.append(best)
    return chosen


def tknc_sets(values: Rows, layers: Layers, k: int) -> list[set]:
    """TKNC: the ``k`` largest neurons of each layer."""
    return [{off + u for off, size in layers for u in _top(row, off, size, k)} for row in values]


def tknp_sets(values: Rows, layers: Layers, k: int) -> list[tuple]:
    """TKNP: each input's pattern, the tuple of its per-layer top-``k`` sets."""
    return [tuple(frozenset(_top(row, off, size, k)) for off, size in layers) for row in values]


def coverage_reference(sets: list[set], num_items: int | None) -> tuple[int, float | None]:
    """Covered items of the union (distinct patterns for TKNP) and the ratio."""
    if num_items is None:
        return len(set(sets)), None
    union = set()
    for s in sets:
        union |= s
    return len(union), len(union) / num_items


def profile_reference(values: Rows) -> dict[str, list[float]]:
    """Per neuron min, max, mean and population standard deviation, two passes."""
    n = len(values)
    m = len(values[0])
    out: dict[str, list[float]] = {"low": [], "high": [], "mean": [], "std": []}
    for j in range(m):
        col = [float(row[j]) for row in values]
        mean = sum(col) / n
        out["low"].append(min(col))
        out["high"].append(max(col))
        out["mean"].append(mean)
        out["std"].append(math.sqrt(sum((c - mean) ** 2 for c in col) / n))
    return out


def greedy_reference(sets: list[set]) -> tuple[list[int], int]:
    """Additional-coverage order: the input adding most new items (lowest index on ties) until
    none adds any, then the rest by their number of items, largest first, lowest index on ties.
    """
    covered: set = set()
    remaining = list(range(len(sets)))
    order = []
    while remaining:
        best, gain = None, 0
        for i in remaining:
            g = len(sets[i] - covered)
            if g > gain:
                best, gain = i, g
        if best is None:
            break
        order.append(best)
        covered |= sets[best]
        remaining.remove(best)
    greedy = len(order)
    order += sorted(remaining, key=lambda i: (-len(sets[i]), i))
    return order, greedy


def apfd_reference(order: Sequence[int], failing: Sequence[bool]) -> float | None:
    """``1 - sum(positions of failing) / (k n) + 1 / (2n)``."""
    n = len(order)
    k = sum(1 for f in failing if f)
    if k == 0:
        return None
    total = 0
    for position, i in enumerate(order, start=1):
        if failing[i]:
            total += position
    return 1 - total / (k * n) + 1 / (2 * n)
