"""Coverage's results: one criterion's :class:`CoverageResult`, a pass's :class:`CoverageReport`,
and the prioritisations :class:`Ranking` and :class:`RankReport`; frozen, with ``to_dict``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..core.capture import NeuronLayout
from ..errors import DeepFaultError

__all__ = ["CoverageResult", "CoverageReport", "Ranking", "RankReport"]


def _label(name: str, params: dict) -> str:
    if not params:
        return name
    parts = (f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())
    return f"{name}({', '.join(parts)})"


@dataclass(frozen=True)
class CoverageResult:
    """Coverage of everything folded into a criterion so far.

    Attributes:
        criterion: Registry name.
        covered: Items covered (patterns seen, for TKNP).
        total: Items in all (``None`` for TKNP, which counts patterns).
        ratio: ``covered / total`` (``None`` for TKNP).
        per_layer: ``{layer: (covered, total)}`` (for TKNP: distinct top-k sets of the layer,
            total ``None``).
        params: The criterion's parameters (threshold, sections, ...).
    """

    criterion: str
    covered: int
    total: int | None
    ratio: float | None
    per_layer: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    params: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        """``name`` and its parameters, for example ``nc(threshold=0.25)``."""
        return _label(self.criterion, self.params)

    def to_dict(self) -> dict:
        return {
            "criterion": self.criterion,
            "label": self.label,
            "covered": self.covered,
            "total": self.total,
            "ratio": self.ratio,
            "per_layer": {k: {"covered": c, "total": t} for k, (c, t) in self.per_layer.items()},
            "params": self.params,
        }


@dataclass(frozen=True)
class CoverageReport:
    """Coverage of a set of inputs under several criteria.

    Attributes:
        results: One :class:`~deepfault.coverage.criteria.CoverageResult` per criterion and
            parameter setting, in the order asked.
        layout: The neurons.
        transform: ``"raw"`` or ``"layer-minmax"``.
        num_inputs: ``N``.
        growth: ``{label: ((n, covered), ...)}``: covered items (patterns for TKNP) after the
            first ``n`` inputs, at ``n = 1, 2, 5, 10, ..., N``.
        profile: The profile's summary (``Profile.to_dict()``), or ``None``.
        seconds: Wall time of the pass.
    """

    results: tuple[CoverageResult, ...]
    layout: NeuronLayout
    transform: str
    num_inputs: int
    growth: dict[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    profile: dict | None = None
    seconds: float = 0.0

    def result(self, label: str) -> CoverageResult:
        """The result with this label (``"nc(threshold=0.5)"``) or criterion name (the first)."""
        for r in self.results:
            if label in (r.label, r.criterion):
                return r
        raise DeepFaultError(f"no result {label!r}; have: {', '.join(r.label for r in self.results)}")

    def to_dict(self) -> dict:
        return {
            "transform": self.transform,
            "layers": self.layout.to_dict(),
            "num_neurons": self.layout.num_neurons,
            "num_inputs": self.num_inputs,
            "profile": self.profile,
            "results": [r.to_dict() for r in self.results],
            "growth": {k: [list(p) for p in v] for k, v in self.growth.items()},
            "seconds": self.seconds,
        }


@dataclass(frozen=True)
class Ranking:
    """One criterion's prioritisation of the inputs.

    Attributes:
        criterion: The criterion's label (``"kmnc(sections=10)"``).
        order: ``(N,)`` input indices, first to run first (CAM).
        greedy: How many leading inputs were picked for new coverage.
        covered: Items the whole set covers (patterns for TKNP).
        total: Items in all (``None`` for TKNP).
        apfd: APFD of ``order`` for the failing inputs (``None`` when none fails).
        apfd_total: APFD of the coverage-total order (most covered items first).
    """

    criterion: str
    order: np.ndarray
    greedy: int
    covered: int
    total: int | None
    apfd: float | None
    apfd_total: float | None

    def to_dict(self, *, with_order: bool = True) -> dict:
        out = {"criterion": self.criterion, "greedy": self.greedy, "covered": self.covered,
               "total": self.total, "apfd": self.apfd, "apfd_total": self.apfd_total}
        if with_order:
            out["order"] = self.order.tolist()
        return out


@dataclass(frozen=True)
class RankReport:
    """Prioritisations of one set of inputs under several criteria.

    Attributes:
        rankings: One :class:`Ranking` per criterion and parameter setting.
        failing: ``(N,)`` bool: the inputs the model misclassifies.
        layout: The neurons.
        transform: The value transform.
        profile: The profile's summary, or ``None``.
        seconds: Wall time.
    """

    rankings: tuple[Ranking, ...]
    failing: np.ndarray
    layout: NeuronLayout
    transform: str
    profile: dict | None = None
    seconds: float = 0.0

    @property
    def num_inputs(self) -> int:
        return len(self.failing)

    def to_dict(self, *, with_order: bool = True) -> dict:
        return {
            "transform": self.transform,
            "layers": self.layout.to_dict(),
            "num_inputs": self.num_inputs,
            "num_failing": int(self.failing.sum()),
            "failing": np.flatnonzero(self.failing).tolist(),
            "profile": self.profile,
            "rankings": [r.to_dict(with_order=with_order) for r in self.rankings],
            "seconds": self.seconds,
        }
