"""Was the run long enough? The verdict on a campaign's discovery curve.

The discovery curve is the number of unique regression faults (#URF, distinct
``(seed, M1 label, M2 label)`` among the generated faults) against the budget's own axis:
fuzzing seconds for a time budget, iterations for an iteration budget. Each unique fault
counts once, at its first discovery (``FaultTable.elapsed`` or ``.iteration`` of its
earliest row). The span is what the campaign ran (``result.seconds`` or
``result.iterations``); for a campaign stopped at its budget that is the budget.

The rule (:data:`LEVELLED_FRACTION`): the count has **levelled off** when the last fifth of
the span found at most a tenth as many new unique faults as the first fifth (zero in the
last fifth always counts as levelled), provided the first fifth found at least
:data:`MIN_FIRST_FIFTH` (fewer: **too few** to judge, ``few``). Otherwise it was **still
climbing**, and a longer budget would likely find more. A campaign that found none has no curve to judge
(``none``); one whose queue ran dry stopped early (``exhausted``): a longer budget with the
same seed finds nothing more.

Examples:
    >>> from deepfault.fuzz.campaign.metrics import FaultTable
    >>> rows = [dict(kind="rf", root=r, y1=0, y2=1, iteration=i) for r, i in enumerate([1, 2, 3, 95])]
    >>> v = discovery_verdict(FaultTable.from_rows(rows), axis="iterations", span=100)
    >>> (v.urf, v.first, v.last, v.status)
    (4, 3, 1, 'climbing')
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ...errors import DeepFaultError
from .metrics import FAULT_KINDS, FaultTable

__all__ = ["LEVELLED_FRACTION", "MIN_FIRST_FIFTH", "VERDICTS", "DiscoveryVerdict", "discovery_verdict",
           "first_discoveries"]

#: The count has levelled off when last-fifth new #URF <= this fraction of the first fifth's.
LEVELLED_FRACTION = 0.1
#: "Levelled off" needs at least this many new #URF in the first fifth: at a constant rate, the
#: last fifth finds none of ``n`` faults split between the two fifths with probability 2**-n, so
#: with 5 a steady run is called levelled at most about 3% of the time (docs/decisions.md).
MIN_FIRST_FIFTH = 5
#: ``levelled`` (off), ``climbing`` (still), ``few`` (too few faults in the first fifth to call it
#: levelled), ``none`` (no fault found), ``exhausted`` (queue ran dry).
VERDICTS = ("levelled", "climbing", "few", "none", "exhausted")


@dataclass(frozen=True)
class DiscoveryVerdict:
    """The verdict on one campaign's discovery curve (module docstring).

    Attributes:
        urf: Unique regression faults found (generated ones only).
        initial: Test inputs M2 already got wrong (initial faults; not in ``urf``).
        axis: ``seconds`` or ``iterations``: the budget's kind.
        span: Seconds or iterations the campaign ran.
        first, last: New unique faults in the first and in the last fifth of ``span``.
        first_rate, last_rate: The same per minute (``seconds``) or per 1,000 iterations.
        status: One of :data:`VERDICTS`.
    """

    urf: int
    initial: int
    axis: str
    span: float
    first: int
    last: int
    first_rate: float
    last_rate: float
    status: str

    @property
    def unit(self) -> str:
        """What the rates count per: ``min`` or ``1,000 it``."""
        return "min" if self.axis == "seconds" else "1,000 it"

    def to_dict(self) -> dict:
        return {**asdict(self), "unit": self.unit, "rule": RULE, "line": self.line()}

    def line(self) -> str:
        """The verdict as one line (what ``deepfault regress`` prints last)."""
        span = f"{self.span:.1f} s" if self.axis == "seconds" else f"{int(self.span):,} iterations"
        found = f"{self.urf:,} unique regression faults (#URF) in {span}"
        if self.initial:
            found += f" (and {self.initial:,} test inputs M2 already got wrong, not counted)"
        rates = (f"new #URF per {self.unit}: {_rate(self.last_rate)} in the last fifth against "
                 f"{_rate(self.first_rate)} in the first")
        tail = {
            "levelled": "levelled off: a longer budget would likely find few more",
            "climbing": "still climbing: a longer budget would likely find more",
            "few": f"too few new #URF in the first fifth to judge the trend (the verdict needs "
                   f"{MIN_FIRST_FIFTH}): a longer budget would tell whether it levels off",
            "none": "none found, so no trend: a longer budget, another --fidelity or more seeds may find "
                    "some",
            "exhausted": "stopped early, every queued input used or banned: a longer budget finds no more "
                         "with this seed (try another --seed)",
        }[self.status]
        return f"verdict: {found}; {rates}; {tail}"


#: The rule in words, for results and docs.
RULE = (f"levelled off when the last fifth of the budget found at most {LEVELLED_FRACTION:.0%} as many new "
        "unique faults as the first fifth (none in the last fifth always counts) and the first fifth found "
        f"at least {MIN_FIRST_FIFTH} (fewer: too few to judge); else still climbing")


def _rate(value: float) -> str:
    return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"


def first_discoveries(faults: FaultTable, axis: str) -> np.ndarray:
    """When each unique regression fault was first found, on ``axis`` (``seconds`` or
    ``iterations``), sorted: one value per distinct ``(root, y1, y2)`` among the generated
    regression faults.
    """
    if axis not in ("seconds", "iterations"):
        raise DeepFaultError(f"axis must be 'seconds' or 'iterations'; got {axis!r}")
    grf = (faults.kind == FAULT_KINDS.index("rf")) & ~faults.initial
    at = (faults.elapsed if axis == "seconds" else faults.iteration)[grf]
    first: dict[tuple[int, int, int], float] = {}
    for key, t in zip(zip(faults.root[grf].tolist(), faults.y1[grf].tolist(), faults.y2[grf].tolist(),
                          strict=True), at.tolist(), strict=True):
        if key not in first or t < first[key]:
            first[key] = t
    return np.sort(np.asarray(list(first.values()), dtype=np.float64))


def discovery_verdict(faults: FaultTable, *, axis: str, span: float,
                      stop_reason: str = "budget") -> DiscoveryVerdict:
    """The verdict on a campaign's discovery curve (module docstring).

    Args:
        faults: Every fault of the campaign (initial ones flagged).
        axis: ``seconds`` (a time budget) or ``iterations``.
        span: Seconds or iterations the campaign ran.
        stop_reason: Why it stopped (``exhausted``: its queue ran dry).

    Returns:
        A :class:`DiscoveryVerdict`.
    """
    times = first_discoveries(faults, axis)
    span = float(span)
    fifth = span / 5
    if fifth > 0:
        first = int(np.count_nonzero(times <= fifth))
        last = int(np.count_nonzero(times > span - fifth))
        per = (60.0 if axis == "seconds" else 1000.0) / fifth
    else:
        first = last = 0
        per = 0.0
    initial = int(np.count_nonzero((faults.kind == FAULT_KINDS.index("rf")) & faults.initial))
    if stop_reason == "exhausted":
        status = "exhausted"
    elif len(times) == 0:
        status = "none"
    elif last == 0 or last <= LEVELLED_FRACTION * first:
        status = "levelled" if first >= MIN_FIRST_FIFTH else "few"
    else:
        status = "climbing"
    return DiscoveryVerdict(urf=len(times), initial=initial, axis=axis, span=span, first=first, last=last,
                   first_rate=first * per, last_rate=last * per, status=status)
