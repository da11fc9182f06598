"""Measuring coverage of a set of inputs: one batch loop, every criterion updated from it.

:func:`measure_coverage` runs the inputs through the model once (the engine's
:func:`~deepfault.core.batches.iterate_batches`), folds each batch's neuron values into
every requested criterion, and records how coverage grew with the number of inputs at
checkpoints ``1, 2, 5, 10, 20, 50, ..., N`` (the batches are split at the checkpoints, so
the curve is exact and costs no memory per input).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from torch import nn

if TYPE_CHECKING:
    from ..models.prepare import PreparedModel

from ..checks import check_int
from ..core.batches import iterate_batches
from ..core.capture import NeuronLayout, check_transform
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
from .results import CoverageReport

__all__ = [
    "PROFILED",
    "CoverageReport",
    "build_criteria",
    "check_params",
    "checkpoints",
    "measure_coverage",
    "parse_criteria",
    "resolve_setup",
]

#: Criteria that need a profile.
PROFILED = tuple(name for name, _ in CRITERIA.items() if "profile" in criterion_params(name))


def parse_criteria(criteria: str | Iterable[str]) -> tuple[str, ...]:
    """Criterion names from ``"nc,kmnc"``, a list, or ``"all"`` (every registered criterion, in
    registration order), in the order given, without repeats.

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
            CRITERIA.get(n)
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


def check_params(names, *, threshold=0.0, sections=10, top_k=1, scale=0.0, profile=None) -> tuple[float, ...]:
    """Validate every parameter before any work; returns the thresholds.

    Raises:
        DeepFaultError: A bad threshold, ``sections`` or ``top_k`` < 1, a bad scale, or a
            profiled criterion without a profile.
    """
    thresholds = _thresholds(threshold)
    check_int("sections", sections)
    check_int("top_k", top_k)
    _scale(scale)
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


def measure_coverage(
    model: nn.Module | PreparedModel,
    inputs,
    *,
    criteria: str | Iterable[str] = ("nc",),
    threshold: float | Sequence[float] = 0.0,
    sections: int = 10,
    top_k: int = 1,
    scale: float = 0.0,
    profile: Profile | None = None,
    layers: Sequence[str] | str | None = None,
    transform: str | None = None,
    batch_size: int = 1024,
    progress: bool = False,
    growth: bool = True,
) -> CoverageReport:
    """Coverage of ``inputs`` under each criterion, from one pass through the model.

    Args:
        model: The network (``eval()`` mode during the pass, restored afterwards).
        inputs: ``(N, ...)`` array or tensor in the layout the model takes.
        criteria: Names (``"nc,kmnc"``, a list, or ``"all"``); see
            :mod:`deepfault.coverage.criteria` for the formulas.
        threshold: ``t`` of ``nc``/``nac``; a sequence gives one result per threshold
            (DeepXplore's coverage-versus-threshold curve).
        sections: ``k`` of ``kmnc``.
        top_k: ``k`` of ``tknc``/``tknp``.
        scale: ``s`` of ``nbc``/``snac``.
        profile: The model's profile (needed by ``kmnc``, ``nbc``, ``snac``); it also supplies
            ``layers`` and ``transform`` when they are ``None``.
        layers: Neuron layers (``"deepxplore"``, module names, or ``None``: the default layers).
        transform: ``"raw"`` (default) or ``"layer-minmax"``.
        batch_size: Inputs per forward pass; results do not depend on it.
        progress: Show a progress bar over the inputs.
        growth: Record coverage after ``1, 2, 5, 10, ...`` inputs.

    Returns:
        A :class:`CoverageReport`.

    Raises:
        DeepFaultError: An unknown criterion, a bad parameter, a missing profile or one made
            for another model, other layers or another transform, or inputs the model cannot take.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 2))
        >>> report = measure_coverage(model, torch.rand(8, 2), criteria="nc,tknc", threshold=[0, 0.5])
        >>> [r.label for r in report.results]
        ['nc(threshold=0)', 'nc(threshold=0.5)', 'tknc(top_k=1)']
    """
    model = _module(model)
    names = parse_criteria(criteria)
    check_params(names, threshold=threshold, sections=sections, top_k=top_k, scale=scale, profile=profile)
    layers, transform = resolve_setup(model, profile, layers, transform)
    n = len(inputs)
    if n == 0:
        raise DeepFaultError("no inputs: the input set is empty")
    marks = checkpoints(n) if growth else []
    curves: dict[str, list[tuple[int, int]]] = {}
    crits: list[Criterion] = []
    layout = None
    t0 = time.perf_counter()
    for batch in iterate_batches(model, inputs, layers=layers, transform=transform, batch_size=batch_size,
                                 progress=progress and "coverage"):
        assert batch.values is not None  # neurons are captured
        assert batch.layout is not None
        if layout is None:
            layout = batch.layout
            if profile is not None:
                profile.check_layout(layout)
            crits = build_criteria(names, layout, threshold=threshold, sections=sections, top_k=top_k,
                                   scale=scale, profile=profile)
            curves = {c.label: [] for c in crits}
        cuts = [m for m in marks if batch.start < m <= batch.stop]
        lo = batch.start
        for hi in cuts + ([batch.stop] if not cuts or cuts[-1] != batch.stop else []):
            part = batch.values[lo - batch.start : hi - batch.start]
            for c in crits:
                c.update(part)
                if hi in cuts:
                    curves[c.label].append((hi, c.covered_count()))
            lo = hi
    seconds = time.perf_counter() - t0
    assert layout is not None  # n > 0: there was a batch
    return CoverageReport(
        results=tuple(c.compute() for c in crits),
        layout=layout,
        transform=transform,
        num_inputs=n,
        growth={k: tuple(v) for k, v in curves.items()},
        profile=None if profile is None else profile.to_dict(),
        seconds=seconds,
    )
