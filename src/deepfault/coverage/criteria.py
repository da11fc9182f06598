"""Coverage criteria as mergeable accumulators (coverage spec sections 2 and 3).

A criterion owns a set of *coverage items*: one per neuron (NC, NAC, TKNC), ``k`` per
neuron (KMNC's sections), two per neuron (NBC's corners), or an open set of patterns
(TKNP). Every criterion has the same four verbs on ``(B, M)`` neuron values in the
layout it was made for:

- ``covered_by(values) -> (B, S)`` bool: the items each input covers (pure);
- ``would_increase(values) -> (B,)`` bool: whether each input would cover an item not
  yet covered (pure: the fuzzers call it on every candidate batch);
- ``update(values)``: fold a batch in;
- ``compute() -> CoverageResult``: covered items, total, ratio, and per layer.

New criteria are registered with ``CRITERIA.register(name)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..core.accumulator import Accumulator
from ..core.capture import NeuronLayout
from ..core.registry import Registry
from ..errors import DeepFaultError

__all__ = ["CRITERIA", "Criterion", "CoverageResult", "NeuronCoverage", "make_criterion", "list_criteria"]

#: Every coverage criterion, by name (``--criteria nc,kmnc,...``).
CRITERIA: Registry[type[Criterion]] = Registry("coverage criterion")


@dataclass(frozen=True)
class CoverageResult:
    """Coverage of everything folded into a criterion so far.

    Attributes:
        criterion: Registry name.
        covered: Items covered.
        total: Items in all (``None`` for TKNP, which counts patterns).
        ratio: ``covered / total`` (``None`` for TKNP).
        per_layer: ``{layer: (covered, total)}``.
        params: The criterion's parameters (threshold, sections, ...).
    """

    criterion: str
    covered: int
    total: int | None
    ratio: float | None
    per_layer: dict[str, tuple[int, int]] = field(default_factory=dict)
    params: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "criterion": self.criterion,
            "covered": self.covered,
            "total": self.total,
            "ratio": self.ratio,
            "per_layer": {k: {"covered": c, "total": t} for k, (c, t) in self.per_layer.items()},
            "params": self.params,
        }


class Criterion(Accumulator):
    """Base of the bit-set criteria: ``items_per_neuron`` items per neuron, neuron-major.

    Subclasses set ``name`` and ``items_per_neuron`` and implement :meth:`covered_by`.
    """

    name: str = ""
    items_per_neuron: int = 1

    def __init__(self, layout: NeuronLayout):
        super().__init__()
        if not isinstance(layout, NeuronLayout):
            raise DeepFaultError(f"layout must be a NeuronLayout; got {type(layout).__name__}")
        self.layout = layout
        self.add_state("covered", torch.zeros(self.num_items, dtype=torch.bool), "or")

    @property
    def num_items(self) -> int:
        return self.layout.num_neurons * self.items_per_neuron

    def params(self) -> dict:
        """The parameters that define this criterion (recorded in results)."""
        return {}

    def _check(self, values: torch.Tensor) -> torch.Tensor:
        if values.ndim != 2 or values.shape[1] != self.layout.num_neurons:
            raise DeepFaultError(
                f"{self.name} expects neuron values of shape (N, {self.layout.num_neurons}); "
                f"got {tuple(values.shape)}: was it made for another model or other layers?"
            )
        return values

    def covered_by(self, values: torch.Tensor) -> torch.Tensor:
        """``(B, S)`` bool: the items each input covers. Does not change the state."""
        raise NotImplementedError

    def would_increase(self, values: torch.Tensor) -> torch.Tensor:
        """``(B,)`` bool: whether each input alone would cover an item not covered yet."""
        items = self.covered_by(values)
        return (items & ~self.covered.to(items.device)).any(dim=1).cpu()

    def update(self, values: torch.Tensor) -> None:
        items = self.covered_by(values)
        if len(items):
            self.covered |= items.any(dim=0).cpu()

    def compute(self) -> CoverageResult:
        covered = self.covered.view(self.layout.num_neurons, self.items_per_neuron)
        per_layer = {}
        for layer in self.layout.layers:
            part = covered[layer.offset : layer.offset + layer.size]
            per_layer[layer.name] = (int(part.sum()), part.numel())
        total = self.num_items
        n = int(self.covered.sum())
        return CoverageResult(self.name, n, total, n / total if total else 0.0, per_layer, self.params())

    def _check_compatible(self, other: Accumulator) -> None:
        super()._check_compatible(other)
        if other.layout != self.layout or other.params() != self.params():
            raise DeepFaultError(
                f"cannot merge {self.name} states made for different layers or parameters"
            )


def _threshold(t) -> float:
    try:
        value = float(t)
    except (TypeError, ValueError):
        raise DeepFaultError(f"threshold must be a number; got {t!r}") from None
    if not np.isfinite(value):
        raise DeepFaultError(f"threshold must be a finite number; got {t!r}")
    return value


@CRITERIA.register("nc")
class NeuronCoverage(Criterion):
    """Neuron coverage (DeepXplore): neuron ``n`` is covered when ``v(x, n) > t``.

    Use it on ``layer-minmax`` values for DeepXplore's definition; on ``raw`` values it is
    DeepGauge's NAC (registered as ``nac``).

    Args:
        layout: The neurons' layout.
        threshold: ``t``.
    """

    name = "nc"

    def __init__(self, layout: NeuronLayout, *, threshold: float = 0.0):
        self.threshold = _threshold(threshold)
        super().__init__(layout)

    def params(self) -> dict:
        return {"threshold": self.threshold}

    def covered_by(self, values: torch.Tensor) -> torch.Tensor:
        return self._check(values) > self.threshold


@CRITERIA.register("nac")
class NeuronActivationCoverage(NeuronCoverage):
    """DeepGauge's NAC: NC on raw values (the transform is chosen by the caller)."""

    name = "nac"


def list_criteria() -> list[str]:
    return CRITERIA.names()


def make_criterion(name: str, layout: NeuronLayout, **params) -> Criterion:
    """A fresh criterion ``name`` for ``layout`` with its parameters (validated)."""
    cls = CRITERIA.get(name)
    try:
        return cls(layout, **params)
    except TypeError as err:
        raise DeepFaultError(f"bad parameters for coverage criterion {name!r}: {err}") from None
