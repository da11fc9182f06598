"""Coverage's results: one criterion's :class:`CoverageResult`, a pass's :class:`CoverageReport`,
and the prioritisations :class:`Ranking` and :class:`RankReport`; frozen, with ``to_dict``.
The two reports are outcomes (:class:`~deepfault.core.outcome.Outcome`): ``summary()`` is the
text ``deepfault coverage measure|rank`` prints (:mod:`.text`), ``payload()`` their ``to_dict()``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..core.capture import NeuronLayout
from ..core.outcome import Outcome
from ..core.summary import Summarised
from ..errors import DeepFaultError

__all__ = ["About", "CoverageResult", "CoverageReport", "Ranking", "RankReport"]


@dataclass(frozen=True)
class About:
    """What an outcome's summary says about its run, beside its numbers (none of it is in
    ``to_dict()``: the result document records the model and the data on its own).

    Attributes:
        model_name: A prepared model's name (``None`` for a module).
        data_name: A deepfault data set's name (``None`` for other inputs).
        device: Where the model ran.
        neurons: The neuron line: how many neurons in how many layers, and where the layers
            came from (:func:`~deepfault.core.capture.neurons_line`); ``None`` without neurons.
        notes: Lines said first (where a surprise state came from).
        selection: The selection of the neurons read
            (:func:`~deepfault.core.capture.layer_selection`; the model's record keeps it).
        seconds: A fit's wall time.
        class_names: The data's class names (a fitted surprise state's table).
    """

    model_name: str | None = None
    data_name: str | None = None
    device: str | None = None
    neurons: str | None = None
    notes: tuple[str, ...] = ()
    selection: str | list[str] | None = None
    seconds: float = 0.0
    class_names: tuple[str, ...] = ()


def _label(name: str, params: dict) -> str:
    if not params:
        return name
    parts = (f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())
    return f"{name}({', '.join(parts)})"


@dataclass(frozen=True)
class CoverageResult:
    """Coverage of everything folded into a criterion so far.

    Attributes:
        criterion: Registry name (of :data:`~deepfault.coverage.criteria.CRITERIA`, or of
            :data:`~deepfault.coverage.measure.SCORE_CRITERIA` for surprise coverage).
        covered: Items covered (patterns seen, for TKNP; buckets for surprise coverage).
        total: Items in all (``None`` for TKNP, which counts patterns).
        ratio: ``covered / total`` (``None`` for TKNP).
        per_layer: ``{layer: (covered, total)}`` (for TKNP: distinct top-k sets of the layer,
            total ``None``; empty for surprise coverage, which buckets one score per input).
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


def _share(covered: int, total: int | None) -> str:
    return f"{covered}" if not total else f"{covered / total:.1%} ({covered}/{total})"


@dataclass(frozen=True, repr=False)
class CoverageReport(Summarised, Outcome):
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
        surprise: With surprise coverage (``lsc``, ``dsc``, ``mdsc``): the state's summary
            (``Surprise.to_dict()``) under ``"state"``, and per score its bound ``upper``, where
            the bound came from (``"given"`` or ``"inputs"``: the largest finite score of these
            inputs) and a summary of the scores; else ``None``.
        scores: ``{kind: (N,) float64}``: each surprise adequacy of every input, for the report
            (not written by :meth:`to_dict`).
        active: ``(M,)`` bool: whether some input gave the neuron a value above 0 (in
            ``transform``); ``None`` when no neuron was captured (surprise coverage alone).
            :meth:`never_activated` lists the others.
        always_active: ``(M,)`` bool: whether every input gave the neuron a value above 0 (in
            ``transform``; ``None`` as for ``active``). :meth:`saturation_note` names criteria
            that such neurons saturate.
        about: The run's model, data, device and neurons, for :meth:`summary`.
    """

    results: tuple[CoverageResult, ...]
    layout: NeuronLayout
    transform: str
    num_inputs: int
    growth: dict[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    profile: dict | None = None
    seconds: float = 0.0
    surprise: dict | None = None
    scores: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    active: np.ndarray | None = field(default=None, repr=False)
    always_active: np.ndarray | None = field(default=None, repr=False)
    about: About = field(default_factory=About, repr=False, compare=False)

    def never_activated(self) -> dict[str, list[int]] | None:
        """The never-activated ("dead") neurons: ``{layer: [unit, ...]}`` of the neurons no input
        gave a value above 0, every layer listed (an empty list when all of its neurons were
        active); ``None`` without neuron values. These are NC's uncovered neurons at t = 0.
        """
        if self.active is None:
            return None
        return {la.name: np.flatnonzero(~self.active[la.offset : la.offset + la.size]).tolist()
                for la in self.layout.layers}

    def saturation_note(self) -> str | None:
        """One line when most neurons (more than half) are above 0 on every input and NC is
        measured at a threshold of 0 or below: NC then counts them covered from the first input and
        says nothing about these inputs (channel means after a ReLU, residual block outputs).
        ``None`` otherwise.
        """
        if self.always_active is None or not len(self.always_active):
            return None
        count = int(self.always_active.sum())
        saturated = [r.label for r in self.results
                     if r.criterion == "nc" and float(r.params.get("threshold", 0.0)) <= 0.0]
        if count * 2 <= len(self.always_active) or not saturated:
            return None
        return (f"saturated: {count} of {len(self.always_active)} neurons are above 0 on every input "
                f"({self.transform} values), so {', '.join(saturated)} counts them covered from the first "
                "input and says nothing about these inputs; take a higher --threshold, --transform "
                "layer-minmax, or other --layers")

    def result(self, label: str) -> CoverageResult:
        """The result with this label (``"nc(threshold=0.5)"``) or criterion name (the first)."""
        for r in self.results:
            if label in (r.label, r.criterion):
                return r
        raise DeepFaultError(f"no result {label!r}; have: {', '.join(r.label for r in self.results)}")

    def headline(self) -> str:
        parts = [f"{r.label} {_share(r.covered, r.total)}" for r in self.results]
        return f"{self.num_inputs} inputs: " + ", ".join(parts)

    def summary(self) -> str:
        """What ``coverage measure`` prints: the run, a table per criterion (a row per layer),
        the surprise coverages, the never-activated neurons and the time.
        """
        from .text import measure_text

        return measure_text(self)

    def rows(self) -> list[dict]:
        return [{"label": r.label, "criterion": r.criterion, "covered": r.covered, "total": r.total,
                 "ratio": r.ratio} for r in self.results]

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
            "surprise": self.surprise,
            "never_activated": self._never_activated_dict(),
        }

    def _never_activated_dict(self) -> dict | None:
        dead = self.never_activated()
        if dead is None:
            return None
        return {"threshold": 0.0, "transform": self.transform, "count": sum(len(u) for u in dead.values()),
                "per_layer": {name: {"count": len(units), "size": self.layout.layer(name).size,
                                     "units": units} for name, units in dead.items()}}


def _score_list(scores: np.ndarray) -> list[float | None]:
    """Scores for JSON: 7 significant digits, ``null`` for a score that is not finite (an
    infinite surprise: a class the training data never had).
    """
    values = np.asarray(scores, dtype=np.float64).tolist()
    return [float(f"{v:.7g}") if math.isfinite(v) else None for v in values]


@dataclass(frozen=True)
class Ranking:
    """One prioritiser's order of the inputs, and how early it finds the misclassified ones.

    Attributes:
        name: How tables name it: the prioritiser (``"gini"``, ``"lsa"``), or for a coverage
            order the prioritiser and the criterion's label (``"cam:kmnc(sections=10)"``).
        prioritiser: The ``by`` name: ``gini``, ``margin``, ``entropy``, ``confidence``,
            ``lsa``, ``dsa``, ``mdsa``, ``cam`` or ``ctm``.
        order: ``(N,)`` input indices, the one to look at first first.
        apfd: APFD of ``order`` for the misclassified inputs (``None`` when none is).
        seconds: The prioritiser's own time (its scores, its order, its APFD), beyond the one
            forward pass all prioritisers share.
        scores: ``(N,)`` float64 score of each input (``ctm``: its number of covered items;
            ``None`` for ``cam``, whose order is no sort by a score).
        ascending: ``True`` when the lowest score goes first (``None`` for ``cam``).
        criterion: ``cam``/``ctm``: the coverage criterion's label (``"kmnc(sections=10)"``).
        greedy: ``cam``: how many leading inputs were picked for new coverage.
        covered: ``cam``/``ctm``: items the whole set covers (patterns for TKNP).
        total: ``cam``/``ctm``: items in all (``None`` for TKNP).
        apfd_total: ``cam``/``ctm``: APFD of the coverage-total order (most covered items first).
    """

    name: str
    prioritiser: str
    order: np.ndarray
    apfd: float | None
    seconds: float = 0.0
    scores: np.ndarray | None = None
    ascending: bool | None = None
    criterion: str | None = None
    greedy: int | None = None
    covered: int | None = None
    total: int | None = None
    apfd_total: float | None = None

    def found(self, failing: np.ndarray) -> np.ndarray:
        """``(N,)`` share of the misclassified inputs found after inspecting the first
        ``1, 2, ..., N`` inputs of the order (the ranking curve; zeros when none fails).
        """
        failing = np.asarray(failing, dtype=bool)
        k = int(failing.sum())
        hits = np.cumsum(failing[self.order])
        return hits / k if k else hits.astype(np.float64)

    def to_dict(self, *, with_order: bool = True) -> dict:
        out: dict = {"name": self.name, "prioritiser": self.prioritiser, "apfd": self.apfd,
                     "seconds": self.seconds}
        if self.ascending is not None:
            out["ascending"] = self.ascending
        if self.criterion is not None:
            out.update(criterion=self.criterion, greedy=self.greedy, covered=self.covered, total=self.total,
                       apfd_total=self.apfd_total)
        if with_order:
            out["order"] = self.order.tolist()
            if self.scores is not None:
                out["scores"] = _score_list(self.scores)
        return out


@dataclass(frozen=True, repr=False)
class RankReport(Summarised, Outcome):
    """Prioritisations of one set of inputs, one :class:`Ranking` per prioritiser (and, for
    ``cam``/``ctm``, per coverage criterion and setting).

    Attributes:
        rankings: In the order asked.
        failing: ``(N,)`` bool: the inputs the model misclassifies.
        layout: The neurons of ``cam``/``ctm`` (``None`` without them).
        transform: Their value transform (``None`` without them).
        profile: The profile's summary, or ``None``.
        seconds: Wall time of the whole ranking, the forward pass included.
        forward_seconds: The shared forward pass (with the captures) alone.
        predictions: ``(N,)`` the model's predicted class of each input.
        labels: ``(N,)`` the true labels.
        surprise: The surprise state's summary (``Surprise.to_dict()``) when a surprise
            adequacy ranked, else ``None``.
        about: The run's model, data, device and neurons, for :meth:`summary`.
    """

    rankings: tuple[Ranking, ...]
    failing: np.ndarray
    layout: NeuronLayout | None = None
    transform: str | None = None
    profile: dict | None = None
    seconds: float = 0.0
    forward_seconds: float = 0.0
    predictions: np.ndarray | None = None
    labels: np.ndarray | None = None
    surprise: dict | None = None
    about: About = field(default_factory=About, repr=False, compare=False)

    @property
    def num_inputs(self) -> int:
        return len(self.failing)

    @property
    def num_failing(self) -> int:
        return int(self.failing.sum())

    def ranking(self, name: str) -> Ranking:
        """The ranking named ``name`` (``"gini"``, ``"cam:nc(threshold=0)"``), or the first of a
        prioritiser (``"cam"``).
        """
        for r in self.rankings:
            if name in (r.name, r.prioritiser):
                return r
        raise DeepFaultError(f"no ranking {name!r}; have: {', '.join(r.name for r in self.rankings)}")

    def best(self) -> Ranking | None:
        """The ranking with the highest APFD (the first asked among equals); ``None`` when no
        input is misclassified.
        """
        scored = [r for r in self.rankings if r.apfd is not None]
        return max(scored, key=lambda r: r.apfd or 0.0) if scored else None

    def headline(self) -> str:
        best = self.best()
        answer = "" if best is None else f"; best: {best.name} (APFD {best.apfd:.3f})"
        return f"{self.num_inputs} inputs, {self.num_failing} misclassified{answer}"

    def summary(self) -> str:
        """What ``coverage rank`` prints: the run, every ranking's APFD (the higher, the sooner
        the misclassified inputs come) and the earliest, and the times.
        """
        from .text import rank_text

        return rank_text(self)

    def rows(self) -> list[dict]:
        return [r.to_dict(with_order=False) for r in self.rankings]

    def to_dict(self, *, with_order: bool = True) -> dict:
        return {
            "transform": self.transform,
            "layers": None if self.layout is None else self.layout.to_dict(),
            "num_inputs": self.num_inputs,
            "num_failing": self.num_failing,
            "failing": np.flatnonzero(self.failing).tolist(),
            "profile": self.profile,
            "surprise": self.surprise,
            "rankings": [r.to_dict(with_order=with_order) for r in self.rankings],
            "seconds": self.seconds,
            "forward_seconds": self.forward_seconds,
        }
