"""Measuring coverage of a set of inputs: one batch loop, every criterion updated from it.

:func:`measure_coverage` runs the inputs through the model once (the engine's
:func:`~deepfault.core.batches.iterate_batches`), folds each batch's neuron values into
every requested criterion, and records how coverage grew with the number of inputs at
checkpoints ``1, 2, 5, 10, 20, 50, ..., N`` (the batches are split at the checkpoints, so
the curve is exact and costs no memory per input).

Beside the neuron criteria of :data:`~deepfault.coverage.criteria.CRITERIA` it measures the
surprise coverages of Kim et al. (ICSE 2019), registered in :data:`SCORE_CRITERIA`: ``lsc``,
``dsc`` and ``mdsc`` bucket one score per input (LSA, DSA, MDSA of a fitted
:class:`~deepfault.coverage.surprise.Surprise`) into ``sections`` equal buckets of ``[0, U)``.
Their activation traces come from a second capture of the surprise state's own layers (and
transform) in the same forward pass, so the data still goes through the model once.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from torch import nn

if TYPE_CHECKING:
    from ..core.inputs import InputData
    from ..models.prepare import PreparedModel

from ..checks import MAX_SECTIONS, check_int
from ..core.batches import Batch, iterate_batches
from ..core.capture import NeuronLayout, capture, check_transform
from ..core.entry import applies_threads
from ..core.registry import Registry
from ..errors import DeepFaultError
from .criteria import (
    CRITERIA,
    Criterion,
    _scale,
    _threshold,
    criterion_params,
    make_criterion,
)
from .profile import Profile, _module
from .results import CoverageReport, CoverageResult
from .surprise import Surprise, load_surprise, surprise_coverage

__all__ = [
    "PROFILED",
    "SA_SECTIONS",
    "SCORE_CRITERIA",
    "CoverageReport",
    "ScoreCriterion",
    "SurpriseCoverage",
    "build_criteria",
    "check_params",
    "checkpoints",
    "measure_coverage",
    "parse_criteria",
    "resolve_setup",
    "resolve_surprise",
    "surprise_scorer",
]

#: Criteria that need a profile.
PROFILED = tuple(name for name, _ in CRITERIA.items() if "profile" in criterion_params(name))

#: Buckets of a surprise coverage by default (Kim et al. use 1,000 for LSC and DSC).
SA_SECTIONS = 1000


# --------------------------------------------------------------------------- surprise coverage


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
for _name, _score, _title in (("lsc", "lsa", "likelihood-based surprise coverage (LSA buckets)"),
                              ("dsc", "dsa", "distance-based surprise coverage (DSA buckets)"),
                              ("mdsc", "mdsa", "Mahalanobis-distance surprise coverage (MDSA buckets)")):
    SCORE_CRITERIA.register(_name, ScoreCriterion(_name, _score, _title))


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

    def update(self, scores) -> None:
        """Fold in ``(B,)`` scores."""
        self._parts.append(np.asarray(scores, dtype=np.float64).reshape(-1))

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


def resolve_surprise(surprise) -> Surprise:
    """A :class:`~deepfault.coverage.surprise.Surprise`, or one read from a path.

    Raises:
        DeepFaultError: ``None`` (with how to fit one), or neither a state nor a path.
    """
    if surprise is None:
        raise DeepFaultError(
            "surprise adequacy needs a state fitted on the training data: fit one with fit_surprise or "
            "'deepfault coverage surprise' and pass it (surprise=..., --surprise FILE)")
    if isinstance(surprise, Surprise):
        return surprise
    if isinstance(surprise, (str, bytes)) or hasattr(surprise, "__fspath__"):
        return load_surprise(surprise)
    raise DeepFaultError(f"surprise must be a Surprise or the path of one; got {type(surprise).__name__}")


def parse_criteria(criteria: str | Iterable[str]) -> tuple[str, ...]:
    """Criterion names from ``"nc,kmnc"``, a list, or ``"all"`` (every registered neuron
    criterion, in registration order), in the order given, without repeats. The surprise
    coverages of :data:`SCORE_CRITERIA` are taken by name.

    Raises:
        DeepFaultError: An unknown name (the message lists the known ones) or none at all.
    """
    parts = criteria.split(",") if isinstance(criteria, str) else list(criteria)
    names: list[str] = []
    for part in parts:
        name = str(part).strip().lower()
        if not name:
            continue
        for n in [k for k, _ in CRITERIA.items()] if name == "all" else [name]:
            if n not in SCORE_CRITERIA:
                try:
                    CRITERIA.get(n)
                except DeepFaultError as err:
                    known = ", ".join(k for k, _ in SCORE_CRITERIA.items())
                    raise DeepFaultError(f"{err}; surprise coverage: {known} (with a surprise "
                                         "state)") from None
            if n not in names:
                names.append(n)
    if not names:
        raise DeepFaultError(f"no coverage criterion given; known: {', '.join(CRITERIA.names())}")
    return tuple(names)


def _thresholds(threshold) -> tuple[float, ...]:
    values = threshold if isinstance(threshold, (list, tuple)) else [threshold]
    out = tuple(dict.fromkeys(_threshold(t) for t in values))
    if not out:
        raise DeepFaultError("threshold needs at least one number")
    return out


def check_params(names, *, threshold=0.0, sections=10, top_k=1, scale=0.0, profile=None,
                 sa_sections=SA_SECTIONS, sa_upper=None) -> tuple[float, ...]:
    """Validate every parameter before any work; returns the thresholds.

    Raises:
        DeepFaultError: A bad threshold, ``sections`` or ``top_k`` < 1, a bad scale, a
            profiled criterion without a profile, or a bad ``sa_sections``/``sa_upper``.
    """
    thresholds = _thresholds(threshold)
    check_int("sections", sections)
    check_int("top_k", top_k)
    _scale(scale)
    if any(n in SCORE_CRITERIA for n in names):
        check_int("sa_sections", sa_sections, maximum=MAX_SECTIONS)
        _sa_upper(sa_upper)
    need = [n for n in names if n in PROFILED]
    if need and profile is None:
        raise DeepFaultError(
            f"{', '.join(need)} need a profile (each neuron's range on the training data): compute "
            "one with compute_profile or 'deepfault coverage profile' and pass it "
            "(profile=..., --profile FILE)"
        )
    if profile is not None and not isinstance(profile, Profile):
        raise DeepFaultError(f"profile must be a Profile; got {type(profile).__name__}")
    return thresholds


def build_criteria(
    criteria: str | Iterable[str],
    layout: NeuronLayout,
    *,
    threshold: float | Sequence[float] = 0.0,
    sections: int = 10,
    top_k: int = 1,
    scale: float = 0.0,
    profile: Profile | None = None,
) -> list[Criterion]:
    """Fresh criteria for ``layout``: one per name, and one per threshold for the criteria that
    take a threshold (``nc``, ``nac``), each given the parameters it takes.

    Raises:
        DeepFaultError: An unknown criterion, a bad parameter, or a missing profile.
    """
    names = parse_criteria(criteria)
    scored = [n for n in names if n in SCORE_CRITERIA]
    if scored:
        raise DeepFaultError(f"{', '.join(scored)} cover one score per input, not neurons: measure them with "
                             "measure_coverage(..., surprise=...)")
    thresholds = check_params(names, threshold=threshold, sections=sections, top_k=top_k, scale=scale,
                               profile=profile)
    common = {"sections": sections, "top_k": top_k, "scale": scale, "profile": profile}
    out = []
    for name in names:
        takes = criterion_params(name)
        params = {k: v for k, v in common.items() if k in takes}
        for t in thresholds if "threshold" in takes else [None]:
            extra = {} if t is None else {"threshold": t}
            out.append(make_criterion(name, layout, **params, **extra))
    return out


def checkpoints(n: int) -> list[int]:
    """``1, 2, 5, 10, 20, 50, ...`` below ``n``, and ``n``."""
    out, base = [], 1
    while base < n:
        out += [c for c in (base, 2 * base, 5 * base) if c < n]
        base *= 10
    return out + [n] if n else out


def resolve_setup(model: nn.Module, profile: Profile | None, layers, transform: str | None):
    """The layers and transform to measure with, checked against the profile (its model, its
    transform); a profile supplies both when they are not given.
    """
    if profile is not None:
        if not isinstance(profile, Profile):
            raise DeepFaultError(f"profile must be a Profile; got {type(profile).__name__}")
        transform = profile.transform if transform is None else transform
        profile.check_transform(check_transform(transform))
        profile.check_model(model)
        if layers is None:
            layers = list(profile.layers)
    transform = check_transform("raw" if transform is None else transform)
    return layers, transform


@applies_threads
def measure_coverage(
    model: nn.Module | PreparedModel,
    inputs: InputData,
    *,
    criteria: str | Iterable[str] = ("nc",),
    threshold: float | Sequence[float] = 0.0,
    sections: int = 10,
    top_k: int = 1,
    scale: float = 0.0,
    profile: Profile | None = None,
    surprise: Surprise | str | None = None,
    sa_upper: float | None = None,
    sa_sections: int = SA_SECTIONS,
    layers: Sequence[str] | str | None = None,
    transform: str | None = None,
    batch_size: int | str = "auto",
    progress: bool = False,
    growth: bool = True,
    threads: int | str | None = "auto",
) -> CoverageReport:
    """Coverage of ``inputs`` under each criterion, from one pass through the model.

    Args:
        model: The network (``eval()`` mode during the pass, restored afterwards).
        inputs: ``(N, ...)`` array or tensor in the layout the model takes.
        criteria: Names (``"nc,kmnc"``, a list, or ``"all"``: every neuron criterion); see
            :mod:`deepfault.coverage.criteria` for the formulas. ``lsc``, ``dsc`` and ``mdsc``
            are Kim et al.'s surprise coverages (:data:`SCORE_CRITERIA`).
        threshold: ``t`` of ``nc``/``nac``; a sequence gives one result per threshold
            (DeepXplore's coverage-versus-threshold curve).
        sections: ``k`` of ``kmnc``.
        top_k: ``k`` of ``tknc``/``tknp``.
        scale: ``s`` of ``nbc``/``snac``.
        profile: The model's profile (needed by ``kmnc``, ``nbc``, ``snac``); it also supplies
            ``layers`` and ``transform`` when they are ``None``.
        surprise: The fitted surprise state (or its ``.npz`` path), needed by the surprise
            coverages; its own layers and transform are captured, whatever ``layers`` says.
        sa_upper: ``U`` of the surprise coverages (``None``: the largest finite score of these
            inputs, so not comparable between input sets).
        sa_sections: Buckets of the surprise coverages.
        layers: Neuron layers (``"deepxplore"``, module names, or ``None``: the default layers).
        transform: ``"raw"`` (default) or ``"layer-minmax"``.
        batch_size: Inputs per forward pass, or ``"auto"`` (the default: sized from the memory,
            :func:`~deepfault.core.memory.choose_batch_size`); results do not depend on it.
        progress: Show a progress bar over the inputs.
        growth: Record coverage after ``1, 2, 5, 10, ...`` inputs.
        threads: PyTorch CPU threads for the call, restored afterwards: ``"auto"`` (the
            command line's rule: the free cores for a small model on the CPU; the
            ``DEEPFAULT_THREADS`` environment variable sets another default), a count, or
            ``None`` (PyTorch's setting).

    Returns:
        A :class:`CoverageReport`. With only surprise coverages its layout and transform are
        the surprise state's.

    Raises:
        DeepFaultError: An unknown criterion, a bad parameter, a missing profile or surprise
            state, one made for another model, other layers or another transform, or inputs
            the model cannot take.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 2))
        >>> report = measure_coverage(model, torch.rand(8, 2), criteria="nc,tknc", threshold=[0, 0.5])
        >>> [r.label for r in report.results]
        ['nc(threshold=0)', 'nc(threshold=0.5)', 'tknc(top_k=1)']
    """
    from ..core.inputs import check_data, num_inputs

    check_data(inputs)
    model = _module(model)
    names = parse_criteria(criteria)
    check_params(names, threshold=threshold, sections=sections, top_k=top_k, scale=scale, profile=profile,
                 sa_sections=sa_sections, sa_upper=sa_upper)
    neuron = [n for n in names if n not in SCORE_CRITERIA]
    scored = {n: SurpriseCoverage(n, sections=sa_sections, upper=sa_upper)
              for n in names if n in SCORE_CRITERIA}
    state = None
    if scored:
        state = resolve_surprise(surprise)
        state.check_model(model)
    if neuron:
        layers, transform = resolve_setup(model, profile, layers, transform)
    n = num_inputs(inputs)  # a DataLoader's inputs, not its batches
    if n == 0:
        raise DeepFaultError("no inputs: the input set is empty")
    marks = checkpoints(n) if growth and n > 0 else []
    curves: dict[str, list[tuple[int, int]]] = {}
    crits: list[Criterion] = []
    layout = None
    active = None  # (M,) whether each neuron's value was ever > 0: the never-activated neurons
    kinds = tuple(dict.fromkeys(c.score for c in scored.values()))
    t0 = time.perf_counter()
    with surprise_scorer(model, state, kinds) as score_batch:
        for batch in iterate_batches(model, inputs, neurons=bool(neuron), layers=layers,
                                     transform=transform or "raw", batch_size=batch_size,
                                     progress=progress and "coverage"):
            for kind, values in score_batch(batch).items():
                for sc in scored.values():
                    if sc.score == kind:
                        sc.update(values)
            if not neuron:
                continue
            if layout is None:
                assert batch.layout is not None  # neurons are captured
                layout = batch.layout
                if profile is not None:
                    profile.check_layout(layout)
                crits = build_criteria(neuron, layout, threshold=threshold, sections=sections, top_k=top_k,
                                       scale=scale, profile=profile)
                curves = {c.label: [] for c in crits}
            _fold(batch, crits, marks, curves)
            assert batch.values is not None  # neurons are captured
            on = (batch.values > 0).any(0)
            active = on if active is None else active | on
    seconds = time.perf_counter() - t0
    by_name: dict[str, list[CoverageResult]] = {}
    for c in crits:
        by_name.setdefault(c.name, []).append(c.compute())
    growth_of: dict[str, tuple[tuple[int, int], ...]] = {k: tuple(v) for k, v in curves.items()}
    for name, sc in scored.items():
        result = sc.compute()
        by_name[name] = [result]
        growth_of[result.label] = sc.growth(marks)
    summary = None
    if state is not None:
        summary = {"state": state.to_dict(), "criteria": {k: sc.summary() for k, sc in scored.items()}}
        if layout is None:
            layout, transform = state.layout, state.transform
    assert layout is not None  # n > 0: there was a batch, and neurons or a state
    results = tuple(r for name in names for r in by_name[name])
    return CoverageReport(
        results=results, layout=layout, transform=str(transform), num_inputs=n,
        growth={r.label: growth_of[r.label] for r in results if r.label in growth_of},
        profile=None if profile is None else profile.to_dict(), seconds=seconds, surprise=summary,
        scores={sc.score: sc.scores() for sc in scored.values()},
        active=None if active is None else active.cpu().numpy().astype(bool),
    )


def _fold(batch, crits: list[Criterion], marks: list[int], curves: dict[str, list[tuple[int, int]]]) -> None:
    """Fold one batch's neuron values into ``crits``, split at the growth checkpoints in it."""
    assert batch.values is not None  # neurons are captured
    cuts = [m for m in marks if batch.start < m <= batch.stop]
    lo = batch.start
    for hi in cuts + ([batch.stop] if not cuts or cuts[-1] != batch.stop else []):
        part = batch.values[lo - batch.start : hi - batch.start]
        for c in crits:
            c.update(part)
            if hi in cuts:
                curves[c.label].append((hi, c.covered_count()))
        lo = hi


@contextlib.contextmanager
def surprise_scorer(model: nn.Module, state: Surprise | None, kinds: Sequence[str],
                    spent: dict[str, float] | None = None
                    ) -> Iterator[Callable[[Batch], dict[str, np.ndarray]]]:
    """A second capture, of the surprise state's own layers and transform, for a ``with`` block
    around a batch loop (:func:`~deepfault.core.batches.iterate_batches`): it yields
    ``score(batch) -> {kind: (B,) scores}``, to be called once per batch right after its
    forward pass, with the batch's predicted classes. ``spent`` adds up each kind's seconds.
    Without a state, ``score`` returns ``{}`` and nothing is hooked.
    """
    if state is None:
        yield lambda batch: {}
        return
    with capture(model, list(state.layers), transform=state.transform) as rec:

        def score(batch: Batch) -> dict[str, np.ndarray]:
            ats = rec.collect()
            if batch.start == 0:
                assert rec.layout is not None  # collect() has set it
                state.check_layout(rec.layout)
            predicted = batch.outputs.argmax(dim=1)
            out = {}
            for kind in kinds:
                t = time.perf_counter()
                out[kind] = state.score(kind, ats, predicted)
                if spent is not None:
                    spent[kind] = spent.get(kind, 0.0) + time.perf_counter() - t
            return out

        yield score
