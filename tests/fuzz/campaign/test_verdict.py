"""The verdict on a campaign's discovery curve: planted curves on both axes, the rule's edges,
and the one line."""

from __future__ import annotations

import numpy as np
import pytest

from deepfault.errors import DeepFaultError
from deepfault.fuzz.campaign.metrics import FaultTable
from deepfault.fuzz.campaign.verdict import (
    LEVELLED_FRACTION,
    MIN_FIRST_FIFTH,
    discovery_verdict,
    first_discoveries,
)


def _faults(times, *, axis="iterations", repeats=1, initial=0):
    """One unique fault (its own root) first found at each of ``times``, each found again
    ``repeats - 1`` times later, and ``initial`` initial faults."""
    rows = []
    key = "iteration" if axis == "iterations" else "elapsed"
    for r in range(initial):
        rows.append(dict(kind="rf", root=1000 + r, y1=0, y2=1, initial=True))
    for root, t in enumerate(times):
        for k in range(repeats):
            rows.append(dict(kind="rf", root=root, y1=0, y2=1, **{key: t + k}))
    rows.append(dict(kind="both_fail", root=0, y1=0, y2=0, **{key: 999}))  # never counted
    return FaultTable.from_rows(rows)


def _naive(times, span):
    """The counts straight from the definition."""
    first = sum(1 for t in times if t <= span / 5)
    last = sum(1 for t in times if t > span - span / 5)
    return first, last


def test_a_planted_concave_curve_levels_off_on_iterations():
    # 50 unique faults in the first fifth of 1,000 iterations, 20 in the middle, 4 in the last fifth
    rng = np.random.default_rng(0)
    times = [*rng.integers(1, 201, 50), *rng.integers(201, 801, 20), *rng.integers(801, 1001, 4)]
    v = discovery_verdict(_faults(times, repeats=3, initial=7), axis="iterations", span=1000)
    assert (v.urf, v.initial) == (74, 7)
    assert (v.first, v.last) == _naive(times, 1000) == (50, 4)
    assert v.first_rate == pytest.approx(50 / 200 * 1000)  # per 1,000 iterations
    assert v.last_rate == pytest.approx(4 / 200 * 1000)
    assert v.status == "levelled"  # 4 <= 0.1 * 50
    line = v.line()
    assert line.startswith("verdict: 74 unique regression faults (#URF) in 1,000 iterations")
    assert "7 test inputs M2 already got wrong, not counted" in line
    assert "20.0 in the last fifth against 250 in the first" in line
    assert "levelled off" in line


def test_a_planted_straight_curve_is_still_climbing_on_seconds():
    times = np.linspace(0.5, 59.5, 60)  # one new unique fault a second for a minute
    v = discovery_verdict(_faults(times, axis="seconds"), axis="seconds", span=60.0)
    assert (v.first, v.last) == _naive(times, 60.0) == (12, 12)
    assert v.first_rate == pytest.approx(60.0)
    assert v.last_rate == pytest.approx(60.0)
    assert v.status == "climbing"
    assert "per min: 60.0 in the last fifth against 60.0 in the first; still climbing: a longer budget " \
           "would likely find more" in v.line()


@pytest.mark.parametrize(("last", "status"), [(0, "levelled"), (3, "levelled"), (4, "climbing")])
def test_the_threshold_is_a_tenth_of_the_first_fifth(last, status):
    assert LEVELLED_FRACTION == 0.1
    times = [10] * 30 + [95] * last  # 30 in the first fifth of 100, `last` in the last fifth
    times = [t + i * 1e-3 for i, t in enumerate(times)]
    v = discovery_verdict(_faults(times, axis="seconds"), axis="seconds", span=100.0)
    assert (v.first, v.last, v.status) == (30, last, status)


def test_a_fault_found_again_counts_at_its_first_discovery_only():
    rows = [dict(kind="rf", root=1, y1=0, y2=2, iteration=90),
            dict(kind="rf", root=1, y1=0, y2=2, iteration=5),
            dict(kind="rf", root=1, y1=0, y2=3, iteration=99)]
    np.testing.assert_array_equal(first_discoveries(FaultTable.from_rows(rows), "iterations"), [5, 99])


def test_no_fault_and_an_exhausted_queue_have_their_own_verdicts():
    none = discovery_verdict(_faults([], initial=3), axis="iterations", span=100)
    assert (none.urf, none.status) == (0, "none")
    assert "none found" in none.line()
    dry = discovery_verdict(_faults([1, 2]), axis="iterations", span=100, stop_reason="exhausted")
    assert dry.status == "exhausted"
    assert "stopped early" in dry.line()
    with pytest.raises(DeepFaultError, match="axis must be 'seconds' or 'iterations'"):
        first_discoveries(_faults([1]), "steps")


@pytest.mark.parametrize(("first", "status"),
                         [(0, "few"), (MIN_FIRST_FIFTH - 1, "few"), (MIN_FIRST_FIFTH, "levelled")])
def test_too_few_faults_in_the_first_fifth_are_not_called_levelled(first, status):
    """A 5-second run with no new #URF in either fifth (all found in the middle) is too little to
    judge; levelling off needs MIN_FIRST_FIFTH new #URF in the first fifth."""
    assert MIN_FIRST_FIFTH == 5
    times = [0.5 + i * 1e-3 for i in range(first)] + [2.5, 2.6]  # the first fifth of 5 s, the middle
    v = discovery_verdict(_faults(times, axis="seconds"), axis="seconds", span=5.0)
    assert (v.first, v.last, v.status) == (first, 0, status)
    if status == "few":
        assert "levelled off" not in v.line()
        assert "too few new #URF in the first fifth to judge the trend (the verdict needs 5)" in v.line()
    climbing = discovery_verdict(_faults([*times, 4.5], axis="seconds"), axis="seconds", span=5.0)
    assert climbing.status == "climbing"  # a fault in the last fifth: still climbing, as before
