"""Surprise coverage (Kim et al., ICSE 2019): coverage criteria that read one score per input.

A neuron criterion (:mod:`.criteria`) is fed each batch's ``(B, M)`` neuron values; a scored
criterion is fed the batch's ``(B,)`` surprise adequacies (LSA, DSA or MDSA of a fitted
:class:`~deepfault.coverage.surprise.Surprise`), and otherwise has the same verbs (``update``,
``covered_count``, ``compute``). Both say what they read with ``reads``: ``"neurons"`` for a
neuron criterion, the score's name (``"lsa"``, ``"dsa"``, ``"mdsa"``) for a scored one, so
:func:`~deepfault.coverage.measure.measure_coverage` feeds them from one loop.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..checks import MAX_SECTIONS, check_int
from ..core.registry import Registry
from ..errors import DeepFaultError
from .results import CoverageResult
from .text import CRITERION_NAMES

__all__ = ["SA_SECTIONS", "SCORE_CRITERIA", "ScoreCriterion", "SurpriseCoverage", "surprise_coverage"]

#: Buckets of a surprise coverage by default (Kim et al. use 1,000 for LSC and DSC).
SA_SECTIONS = 1000


# --------------------------------------------------------------------------- surprise coverage


def surprise_coverage(scores: np.ndarray, *, upper: float, sections: int = 10) -> np.ndarray:
    """Surprise coverage (Kim et al.): which of ``sections`` equal buckets of ``[0, upper)``
    the ``scores`` fall in; a score ``>= upper``, negative or not finite covers none
    (dnn-tip's ``SurpriseCoverageMapper`` without its overflow bucket).

    Returns:
        ``(sections,)`` bool: the covered buckets. Coverage is their mean.
    """
    if not (isinstance(upper, int | float) and math.isfinite(upper) and upper > 0):
        raise DeepFaultError(f"the surprise coverage upper bound must be a finite number > 0; got {upper!r}")
    if isinstance(sections, bool) or not isinstance(sections, int) or sections < 1:
        raise DeepFaultError(f"sections must be an int >= 1; got {sections!r}")
    s = np.asarray(scores, dtype=np.float64)
    edges = np.linspace(0.0, float(upper), sections + 1)
    ok = np.isfinite(s) & (s >= 0) & (s < upper)
    bucket = np.clip(np.searchsorted(edges, s[ok], side="right") - 1, 0, sections - 1)
    covered = np.zeros(sections, dtype=bool)
    covered[bucket] = True
    return covered



@dataclass(frozen=True)
class ScoreCriterion:
    """A coverage criterion over one score per input.

    Attributes:
        name: Registry name (``--criteria NAME``).
        score: The surprise adequacy it buckets (``lsa``, ``dsa``, ``mdsa``).
        title: One line for tables and reports.
    """

    name: str
    score: str
    title: str


#: The surprise coverages, by name: criteria over one score per input, beside the neuron
#: criteria of :data:`~deepfault.coverage.criteria.CRITERIA` (``"all"`` means those only).
SCORE_CRITERIA: Registry[ScoreCriterion] = Registry("surprise coverage criterion")
for _name, _score in (("lsc", "lsa"), ("dsc", "dsa"), ("mdsc", "mdsa")):
    SCORE_CRITERIA.register(_name, ScoreCriterion(_name, _score, CRITERION_NAMES[_name]))


def _sa_upper(upper) -> float | None:
    if upper is None:
        return None
    if isinstance(upper, bool) or not isinstance(upper, (int, float)) or not math.isfinite(upper) \
            or upper <= 0:
        raise DeepFaultError(f"sa_upper must be a finite number > 0 or None; got {upper!r}")
    return float(upper)


class SurpriseCoverage:
    """Kim et al.'s surprise coverage of one score: which of ``sections`` equal buckets of
    ``[0, U)`` the inputs' scores fall in (:func:`~deepfault.coverage.surprise.surprise_coverage`).

    It keeps the scores, one float per input: without ``upper``, ``U`` is the largest finite
    score of the inputs measured (its next float up, so that score falls in the last bucket),
    known only at the end; coverage with such a ``U`` says how the set spreads over its own
    range and is not comparable between sets. A given ``upper`` makes it comparable.

    Args:
        name: ``lsc``, ``dsc`` or ``mdsc``.
        sections: Buckets (Kim et al. use 1,000).
        upper: ``U`` (``None``: from the inputs, as above).

    Examples:
        >>> sc = SurpriseCoverage("dsc", sections=4, upper=2.0)
        >>> sc.update([0.1, 0.2, 1.9, 5.0])
        >>> r = sc.compute()
        >>> r.label, r.covered, r.total
        ('dsc(sections=4, upper=2)', 2, 4)
    """

    def __init__(self, name: str, *, sections: int = SA_SECTIONS, upper: float | None = None):
        self.entry = SCORE_CRITERIA.get(name)
        self.sections = check_int("sa_sections", sections, maximum=MAX_SECTIONS)
        self.upper = _sa_upper(upper)
        self._parts: list[np.ndarray] = []

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def score(self) -> str:
        return self.entry.score

    @property
    def reads(self) -> str:
        """What the loop feeds it: the score it buckets."""
        return self.entry.score

    def update(self, scores) -> None:
        """Fold in ``(B,)`` scores."""
        self._parts.append(np.asarray(scores, dtype=np.float64).reshape(-1))

    def merge(self, other: SurpriseCoverage) -> SurpriseCoverage:
        """Append ``other``'s scores (the inputs after this one's, as a later shard's) in place."""
        if other.name != self.name or other.sections != self.sections or other.upper != self.upper:
            raise DeepFaultError(f"cannot merge {other.name} scores into {self.name} of other parameters")
        self._parts += other._parts
        return self

    def scores(self) -> np.ndarray:
        """``(N,)`` every score folded in so far."""
        if len(self._parts) > 1:
            self._parts = [np.concatenate(self._parts)]
        return self._parts[0] if self._parts else np.zeros(0)

    def bound(self) -> float | None:
        """``U``: the one given, or the next float above the largest finite score (``None``
        when no score is finite and > 0: then nothing is covered).
        """
        if self.upper is not None:
            return self.upper
        s = self.scores()
        s = s[np.isfinite(s)]
        top = float(s.max()) if len(s) else 0.0
        return float(np.nextafter(top, math.inf)) if top > 0 else None

    def _covered(self, scores: np.ndarray, upper: float | None) -> int:
        if upper is None:
            return 0
        return int(surprise_coverage(scores, upper=upper, sections=self.sections).sum())

    def covered_count(self) -> int:
        """Buckets covered so far (with the bound of the scores so far when ``upper`` is not given)."""
        return self._covered(self.scores(), self.bound())

    def curve(self, recorded: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
        """The growth curve at the recorded marks, redrawn with the final ``U`` (without a given
        ``upper``, the counts recorded during the loop used the bound of the scores seen so far).
        """
        return self.growth([m for m, _ in recorded])

    def growth(self, marks: Sequence[int]) -> tuple[tuple[int, int], ...]:
        """``((n, buckets covered by the first n inputs), ...)`` for each ``n`` of ``marks``,
        with the final ``U``.
        """
        s, upper = self.scores(), self.bound()
        return tuple((m, self._covered(s[:m], upper)) for m in marks if m <= len(s))

    def compute(self) -> CoverageResult:
        upper = self.bound()
        covered = self._covered(self.scores(), upper)
        return CoverageResult(self.name, covered, self.sections, covered / self.sections,
                              params={"sections": self.sections, "upper": upper})

    def summary(self) -> dict:
        """``U``, where it came from, and the scores' spread (for reports and result files)."""
        s = self.scores()
        fin = s[np.isfinite(s)]
        upper = self.bound()
        return {
            "score": self.score, "upper": upper,
            "upper_from": "given" if self.upper is not None else "inputs",
            "sections": self.sections, "count": len(s), "not_finite": int(len(s) - len(fin)),
            "negative": int((fin < 0).sum()),
            "at_or_above_upper": 0 if upper is None else int((fin >= upper).sum()),
            "min": float(fin.min()) if len(fin) else None,
            "median": float(np.median(fin)) if len(fin) else None,
            "max": float(fin.max()) if len(fin) else None,
        }
