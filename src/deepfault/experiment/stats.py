"""Statistics of the paper's comparison: Mann-Whitney U and Vargha-Delaney A12.

Both tests are one-sided: the question is directional ("do inputs synthesized from this
measure's neurons make the model worse than inputs synthesized from random neurons?"),
so the alternative is that the first sample's loss is stochastically *greater*, or its
correctness *less*, than the second's. A two-sided test would also count "significantly
better for the model" as a finding, which is not what the paper claims.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Comparison", "a12", "compare"]


def a12(x, y) -> float:
    """Vargha-Delaney A12: probability that a value drawn from ``x`` exceeds one from ``y``
    (ties count one half). 0.5 means no effect; 0.56, 0.64 and 0.71 are the usual
    small, medium and large thresholds.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if len(x) == 0 or len(y) == 0:
        return float("nan")
    greater = (x[:, None] > y[None, :]).sum()
    ties = (x[:, None] == y[None, :]).sum()
    return float((greater + 0.5 * ties) / (len(x) * len(y)))


@dataclass(frozen=True)
class Comparison:
    """One-sided Mann-Whitney U test of sample ``a`` against sample ``b``."""

    metric: str
    alternative: str
    statistic: float
    p_value: float
    a12: float
    n_a: int
    n_b: int

    def significant(self, alpha: float = 0.05) -> bool:
        return bool(self.p_value < alpha)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def compare(a, b, *, metric: str) -> Comparison:
    """Is ``a`` worse for the model than ``b`` on ``metric``?

    ``metric="loss"`` tests whether ``a``'s losses are greater; ``metric="correct"`` tests
    whether ``a``'s correctness (0/1 per input) is less. The p-value is exact-or-asymptotic
    as scipy chooses; when both samples are constant and equal, the p-value is 1.
    """
    from scipy.stats import mannwhitneyu

    if metric not in ("loss", "correct"):
        raise ValueError(f"metric must be 'loss' or 'correct'; got {metric!r}")
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    alternative = "greater" if metric == "loss" else "less"
    if len(x) == 0 or len(y) == 0:
        return Comparison(metric, alternative, float("nan"), float("nan"), float("nan"), len(x), len(y))
    if np.ptp(np.concatenate([x, y])) == 0:
        return Comparison(metric, alternative, float(len(x) * len(y) / 2), 1.0, 0.5, len(x), len(y))
    result = mannwhitneyu(x, y, alternative=alternative)
    return Comparison(metric, alternative, float(result.statistic), float(result.pvalue),
                      a12(x, y), len(x), len(y))
