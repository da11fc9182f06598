"""Coverage criteria as mergeable accumulators (coverage spec sections 2 and 3).

``v(x, n)`` is the (transformed) value of neuron ``n`` for input ``x`` and ``M`` the number of
neurons. A criterion owns a set of *coverage items*:

| name | items | an input ``x`` covers |
| --- | --- | --- |
| ``nc``, ``nac`` | one per neuron | ``n`` when ``v(x, n) > t`` |
| ``kmnc`` | ``k`` sections per neuron | section ``i`` when ``low_n + i*w_n <= v < low_n + (i+1)*w_n``, \
``w_n = (high_n - low_n)/k``; the last section is ``[low_n + (k-1)*w_n, high_n]`` |
| ``nbc`` | two corners per neuron | lower when ``v < low_n - s*std_n``, upper when ``v > high_n + s*std_n`` |
| ``snac`` | one upper corner per neuron | upper as in ``nbc`` |
| ``tknc`` | one per neuron | the ``k`` largest values of each layer (ties to the lower unit) |
| ``tknp`` | an open set of patterns | its tuple of per-layer top-``k`` sets |

Coverage of a set ``T`` is the number of items some ``x`` in ``T`` covers over the number of
items (``k*M`` for KMNC, ``2M`` for NBC, ``M`` otherwise); for TKNP the number of distinct
patterns.

Every criterion has the same verbs on ``(B, M)`` neuron values (a tensor or an array) in the
layout it was made for:

- ``would_increase(values) -> (B,)`` bool: whether each input alone would cover an item not
  covered yet. Pure: the fuzzers ask it of every candidate batch;
- ``update(values)``: fold a batch in;
- ``compute() -> CoverageResult``: covered items, total, ratio and per layer;
- ``merge(other)``: the state of the union of two streams (bit sets OR-ed, pattern sets united).

The bit-set criteria (all but ``tknp``) keep their state in ``.covered``, an ``(S,)`` bool
tensor (item ``n * items_per_neuron + j``), and also answer ``covered_items(values)``, the
``(B, L)`` item indices each input covers (``-1`` pads), and ``covered_by(values)``, the same
as a dense ``(B, S)`` bool matrix. Subclasses implement ``covered_items`` only.

Comparisons are made in float64, so ``v > t`` means what it says for a float32 ``v`` and any
``t``. New criteria are registered with ``CRITERIA.register(name)``.

Examples:
    >>> import torch
    >>> from deepfault.core.capture import NeuronLayout
    >>> layout = NeuronLayout.from_sizes(["fc1", "fc2"], [3, 2])
    >>> nc = make_criterion("nc", layout, threshold=0.5)
    >>> values = torch.tensor([[0.9, 0.1, 0.0, 0.7, 0.2], [0.0, 0.6, 0.0, 0.1, 0.3]])
    >>> nc.would_increase(values).tolist()
    [True, True]
    >>> nc.update(values[:1])
    >>> nc.would_increase(values).tolist()
    [False, True]
    >>> nc.compute().ratio
    0.4
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
from numpy.typing import ArrayLike

from ..checks import check_int
from ..core.accumulator import Accumulator
from ..core.capture import NeuronLayout
from ..core.registry import Registry, suggestion
from ..errors import DeepFaultError
from .results import CoverageResult, _label

if TYPE_CHECKING:
    from .profile import Profile

__all__ = [
    "CRITERIA",
    "BitSetCriterion",
    "Criterion",
    "CoverageResult",
    "KMultisectionCoverage",
    "NeuronActivationCoverage",
    "NeuronBoundaryCoverage",
    "NeuronCoverage",
    "StrongNeuronActivationCoverage",
    "TopKNeuronCoverage",
    "TopKPatternCoverage",
    "criterion_params",
    "list_criteria",
    "make_criterion",
]

#: Every coverage criterion, by name (``--criteria nc,kmnc,...``).
CRITERIA: Registry[type[Criterion]] = Registry("coverage criterion")


# --------------------------------------------------------------------------- validation


def _real(value, name: str, what: str = "number", *, minimum: float | None = None) -> float:
    """``value`` as a finite float (at least ``minimum``); otherwise ``name must be a WHAT`` (a
    bool, or no number) or ``name must be a finite WHAT``.
    """
    number = None
    if not isinstance(value, bool):
        with contextlib.suppress(TypeError, ValueError):
            number = float(value)
    if number is None:
        raise DeepFaultError(f"{name} must be a {what}; got {value!r}")
    if not np.isfinite(number) or (minimum is not None and number < minimum):
        raise DeepFaultError(f"{name} must be a finite {what}; got {value!r}")
    return number


def _threshold(t) -> float:
    return _real(t, "threshold")


def _scale(value) -> float:
    return _real(value, "scale", "number >= 0", minimum=0.0)


def _check_profile(profile: Profile | None, layout: NeuronLayout, name: str) -> Profile:
    from .profile import Profile

    if profile is None:
        raise DeepFaultError(
            f"{name} needs a profile (each neuron's range on the training data): compute one with "
            "deepfault.coverage.compute_profile or 'deepfault coverage profile', and pass it "
            "(profile=..., --profile FILE)"
        )
    if not isinstance(profile, Profile):
        raise DeepFaultError(f"profile must be a Profile; got {type(profile).__name__}")
    profile.check_layout(layout)
    return profile


# --------------------------------------------------------------------------- bases


class Criterion(Accumulator):
    """Base of every coverage criterion: a mergeable state over the neurons of ``layout``.

    Subclasses set ``name``, declare their state with ``add_state`` and implement
    :meth:`would_increase`, :meth:`update`, :meth:`compute` and :meth:`input_items`.
    """

    name: str = ""
    #: What the batch loop feeds it: each batch's ``(B, M)`` neuron values (a scored criterion,
    #: :class:`~deepfault.coverage.scored.SurpriseCoverage`, reads one score per input instead).
    reads: str = "neurons"

    def __init__(self, layout: NeuronLayout):
        super().__init__()
        if not isinstance(layout, NeuronLayout):
            raise DeepFaultError(f"layout must be a NeuronLayout; got {type(layout).__name__}")
        self.layout = layout

    def params(self) -> dict:
        """The parameters that define this criterion (recorded in results)."""
        return {}

    @property
    def label(self) -> str:
        return _label(self.name, self.params())

    def _check(self, values) -> torch.Tensor:
        v = values if isinstance(values, torch.Tensor) else torch.as_tensor(np.asarray(values))
        if v.ndim != 2 or v.shape[1] != self.layout.num_neurons:
            raise DeepFaultError(
                f"{self.name} expects neuron values of shape (N, {self.layout.num_neurons}); "
                f"got {tuple(v.shape)}: was it made for another model or other layers?"
            )
        return v

    def would_increase(self, values) -> torch.Tensor:
        """``(B,)`` bool on the CPU: whether each input alone would cover an item not covered
        yet. Does not change the state.
        """
        raise NotImplementedError

    def input_items(self, values) -> tuple[torch.Tensor, int]:
        """Each input's covered items as ``(B, L)`` int64 indices (``-1`` pads) into a set of
        ``S`` items, and ``S``: the per-input covered sets that rank a test suite.
        """
        raise NotImplementedError

    def covered_count(self) -> int:
        """Items (patterns) covered so far: ``compute().covered`` without the per-layer work."""
        raise NotImplementedError

    def curve(self, recorded: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
        """The growth curve from the ``(n, covered_count())`` pairs recorded during the loop
        (final as recorded: a neuron criterion's items do not change with later inputs).
        """
        return tuple(recorded)

    def _check_compatible(self, other: Accumulator) -> None:
        super()._check_compatible(other)
        assert isinstance(other, Criterion)  # super() refused any other type
        if other.layout != self.layout or other.params() != self.params():
            raise DeepFaultError(
                f"cannot merge {self.name} states made for different layers or parameters"
            )


class BitSetCriterion(Criterion):
    """A criterion with a fixed set of ``items_per_neuron * M`` items, neuron-major.

    State: ``covered``, an ``(S,)`` bool tensor on the CPU, merged by OR. Subclasses implement
    one of :meth:`covered_by` (dense, when most items are decided for every input) or
    :meth:`covered_items` (sparse, when an input covers few of many items, as KMNC's
    sections); the other is derived, and ``update``/``would_increase`` use the one implemented.
    """

    items_per_neuron: int = 1
    _dense: bool = True
    covered: torch.Tensor  # state (add_state)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        dense = any("covered_by" in k.__dict__ for k in cls.__mro__ if k is not BitSetCriterion
                    and issubclass(k, BitSetCriterion))
        sparse = any("covered_items" in k.__dict__ for k in cls.__mro__ if k is not BitSetCriterion
                     and issubclass(k, BitSetCriterion))
        if dense or sparse:
            cls._dense = dense

    def __init__(self, layout: NeuronLayout):
        super().__init__(layout)
        self.add_state("covered", torch.zeros(self.num_items, dtype=torch.bool), "or")
        self._arange: dict[tuple[torch.device, int], torch.Tensor] = {}

    @property
    def num_items(self) -> int:
        return self.layout.num_neurons * self.items_per_neuron

    def _units(self, device: torch.device, count: int | None = None) -> torch.Tensor:
        """``arange(count or M)`` on ``device`` (cached)."""
        count = self.layout.num_neurons if count is None else count
        units = self._arange.get((device, count))
        if units is None:
            units = self._arange[(device, count)] = torch.arange(count, device=device)
        return units

    def covered_by(self, values) -> torch.Tensor:
        """``(B, S)`` bool on the values' device: the items each input covers. Pure."""
        items = self.covered_items(values)
        dense = torch.zeros(len(items), self.num_items + 1, dtype=torch.bool, device=items.device)
        dense.scatter_(1, self._sink(items), True)
        return dense[:, :-1]

    def covered_items(self, values) -> torch.Tensor:
        """``(B, L)`` int64 on the values' device: the indices of the items each input covers,
        ``-1`` where a slot holds none. Pure.
        """
        dense = self.covered_by(values)
        return torch.where(dense, self._units(dense.device, self.num_items), -1)

    def _sink(self, items: torch.Tensor) -> torch.Tensor:
        # -1 ("no item") goes to one extra slot past the end, so no boolean indexing is needed.
        return items.masked_fill(items < 0, self.num_items)

    def would_increase(self, values) -> torch.Tensor:
        if self._dense:
            dense = self.covered_by(values)
            return (dense & ~self.covered.to(dense.device)).any(dim=1).cpu()
        items = self.covered_items(values)
        known = torch.cat([self.covered.to(items.device), items.new_ones(1, dtype=torch.bool)])
        return (~known[self._sink(items)]).any(dim=1).cpu()

    def update(self, values) -> None:
        # A new tensor rather than an in-place OR: a state made inside torch.inference_mode()
        # (as in a batch loop) can then still be updated outside it.
        if self._dense:
            self.covered = self.covered | self.covered_by(values).any(dim=0).cpu()
            return
        items = self.covered_items(values)
        hit = torch.zeros(self.num_items + 1, dtype=torch.bool, device=items.device)
        hit[self._sink(items).flatten()] = True
        self.covered = self.covered | hit[:-1].cpu()

    def input_items(self, values) -> tuple[torch.Tensor, int]:
        return self.covered_items(values), self.num_items

    def covered_count(self) -> int:
        """Items covered so far (cheaper than :meth:`compute`)."""
        return int(self.covered.sum())

    def compute(self) -> CoverageResult:
        covered = self.covered.view(self.layout.num_neurons, self.items_per_neuron)
        per_layer: dict[str, tuple[int, int | None]] = {}
        for layer in self.layout.layers:
            part = covered[layer.offset : layer.offset + layer.size]
            per_layer[layer.name] = (int(part.sum()), part.numel())
        total = self.num_items
        n = int(self.covered.sum())
        return CoverageResult(self.name, n, total, n / total if total else 0.0, per_layer, self.params())


def _below32(a: ArrayLike) -> np.ndarray:
    """The largest float32 ``<= a`` (elementwise): for a float32 ``v``, ``v > a`` exactly when
    ``v > _below32(a)`` and ``v <= a`` exactly when ``v <= _below32(a)``.
    """
    a64 = np.asarray(a, dtype=np.float64)
    f = a64.astype(np.float32)
    return np.where(f.astype(np.float64) > a64, np.nextafter(f, np.float32(-np.inf)), f).astype(np.float32)


def _above32(a: ArrayLike) -> np.ndarray:
    """The smallest float32 ``>= a``: for a float32 ``v``, ``v < a`` exactly when
    ``v < _above32(a)`` and ``v >= a`` exactly when ``v >= _above32(a)``.
    """
    a64 = np.asarray(a, dtype=np.float64)
    f = a64.astype(np.float32)
    return np.where(f.astype(np.float64) < a64, np.nextafter(f, np.float32(np.inf)), f).astype(np.float32)


def _exact(values: torch.Tensor) -> torch.Tensor:
    """float32 and float64 values as they are (compared against bounds rounded the safe way);
    anything else in float64.
    """
    return values if values.dtype in (torch.float32, torch.float64) else values.double()


# --------------------------------------------------------------------------- criteria


@CRITERIA.register("nc")
class NeuronCoverage(BitSetCriterion):
    """Neuron coverage (DeepXplore, Pei et al. 2017): ``x`` covers ``n`` when ``v(x, n) > t``.

    ``NC(T) = |{n : exists x in T, v(x, n) > t}| / M``. Use it on ``layer-minmax`` values
    (each input's layer output scaled to [0, 1]) for DeepXplore's definition; on ``raw``
    values it is DeepGauge's NAC (also registered as ``nac``).

    Args:
        layout: The neurons' layout.
        threshold: ``t`` (DeepXplore uses 0, 0.25, 0.5 and 0.75).
    """

    name = "nc"

    def __init__(self, layout: NeuronLayout, *, threshold: float = 0.0):
        self.threshold = _threshold(threshold)
        self._threshold32 = float(_below32(self.threshold))
        super().__init__(layout)

    def params(self) -> dict:
        return {"threshold": self.threshold}

    def covered_by(self, values) -> torch.Tensor:
        v = _exact(self._check(values))
        return v > (self._threshold32 if v.dtype == torch.float32 else self.threshold)


@CRITERIA.register("nac")
class NeuronActivationCoverage(NeuronCoverage):
    """DeepGauge's neuron activation coverage: NC on ``raw`` values (the caller picks the
    transform). ``NAC(T) = |{n : exists x in T, v(x, n) > t}| / M``.
    """

    name = "nac"


class _ProfiledCriterion(BitSetCriterion):
    """A criterion on the profile's per-neuron ``low``, ``high`` (and ``std``), kept in float64
    on each device the values come from.
    """

    def __init__(self, layout: NeuronLayout, profile: Profile | None):
        self.profile = _check_profile(profile, layout, self.name)
        super().__init__(layout)
        self._bounds: dict[tuple, tuple[torch.Tensor, ...]] = {}

    def _on(self, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The bounds of :meth:`_arrays` on ``v``'s device: float64, or for float32 values
        rounded to float32 on the side that keeps each comparison exact.
        """
        key = (v.device, v.dtype)
        bounds = self._bounds.get(key)
        if bounds is None:
            rounding = {"below": _below32, "above": _above32}
            if v.dtype == torch.float32:
                arrays = [rounding[r](a) for a, r in self._arrays()]
            else:
                arrays = [np.asarray(a, dtype=np.float64) for a, _ in self._arrays()]
            bounds = self._bounds[key] = tuple(torch.from_numpy(a).to(v.device) for a in arrays)
        return bounds

    def _arrays(self) -> tuple[tuple[np.ndarray, str], ...]:
        """``(array, "below"|"above")`` pairs: the bounds, and how a float32 copy is rounded
        (``"below"`` for ``v > a``, ``"above"`` for ``v < a``).
        """
        raise NotImplementedError

    def _check_compatible(self, other: Accumulator) -> None:
        super()._check_compatible(other)
        assert isinstance(other, _ProfiledCriterion)  # super() refused any other type
        if not self.profile.same_as(other.profile):
            raise DeepFaultError(f"cannot merge {self.name} states made with different profiles")


@CRITERIA.register("kmnc")
class KMultisectionCoverage(_ProfiledCriterion):
    """K-multisection neuron coverage (DeepGauge, Ma et al. 2018).

    Each neuron's profiled range ``[low_n, high_n]`` is cut into ``k`` sections of width
    ``w_n = (high_n - low_n) / k``; ``x`` covers section ``i`` of ``n`` when
    ``low_n + i*w_n <= v(x, n) < low_n + (i+1)*w_n``, and the last section is closed:
    ``low_n + (k-1)*w_n <= v <= high_n``. Values outside ``[low_n, high_n]`` cover no
    section (NBC counts them). ``KMNC(T) = |{(n, i) covered}| / (k*M)``. A neuron constant on
    the training data (``w_n = 0``) has one reachable section, the last, at ``v = high_n``.

    Args:
        layout: The neurons' layout.
        profile: The model's :class:`~deepfault.coverage.profile.Profile` for these layers.
        sections: ``k`` (DeepGauge and DeepHunter use 1000).
    """

    name = "kmnc"

    def __init__(self, layout: NeuronLayout, *, profile: Profile | None = None, sections: int = 10):
        self.sections = check_int("sections", sections)
        self.items_per_neuron = self.sections
        super().__init__(layout, profile)

    def params(self) -> dict:
        return {"sections": self.sections}

    def _on64(self, device: torch.device) -> tuple[torch.Tensor, ...]:
        key = (device, "kmnc")
        bounds = self._bounds.get(key)
        if bounds is None:
            k = self.sections
            low, high = self.profile.low, self.profile.high
            width = (high - low) / k
            flat = width == 0
            # guess = floor(v * scale - shift): (v - low) / w, or k - 1 for a constant neuron.
            scale = np.where(flat, 0.0, 1.0 / np.where(flat, 1.0, width))
            shift = np.where(flat, -(k - 1.0), low * scale)
            bounds = self._bounds[key] = tuple(
                torch.from_numpy(np.asarray(a, dtype=np.float64)).to(device)
                for a in (low, high, width, scale, shift)
            )
        return bounds

    def covered_items(self, values) -> torch.Tensor:
        v = self._check(values)
        low, high, width, scale, shift = self._on64(v.device)
        v = v.double()
        k = self.sections
        guess = (v * scale).sub_(shift).floor_().clamp_(0, k - 1)
        # The guess can be one off at a section edge; the spec's own comparisons against
        # low + i*w (computed the same way as in the formula) decide.
        down = v < (guess * width).add_(low)
        up = (v >= ((guess + 1) * width).add_(low)) & (guess < k - 1)
        section = guess.sub_(down.double()).add_(up.double()).long()
        inside = (v >= low) & (v <= high)
        return torch.where(inside, self._units(v.device) * k + section, -1)


class _CornerCriterion(_ProfiledCriterion):
    """A profiled criterion of corners ``s`` training standard deviations beyond each neuron's
    profiled range (NBC, SNAC): the one parameter ``scale``.
    """

    def __init__(self, layout: NeuronLayout, *, profile: Profile | None = None, scale: float = 0.0):
        self.scale = _scale(scale)
        super().__init__(layout, profile)

    def params(self) -> dict:
        return {"scale": self.scale}


@CRITERIA.register("nbc")
class NeuronBoundaryCoverage(_CornerCriterion):
    """Neuron boundary coverage (DeepGauge): the corner cases beyond the profiled range.

    ``x`` covers the lower corner of ``n`` (item ``2n``) when ``v(x, n) < low_n - s*std_n`` and
    the upper corner (item ``2n + 1``) when ``v(x, n) > high_n + s*std_n``.
    ``NBC(T) = (|upper| + |lower|) / (2M)``.

    Args:
        layout: The neurons' layout.
        profile: The model's profile for these layers.
        scale: ``s >= 0``, in units of each neuron's standard deviation on the training data.
    """

    name = "nbc"
    items_per_neuron = 2

    def _arrays(self):
        p = self.profile
        return (p.low - self.scale * p.std, "above"), (p.high + self.scale * p.std, "below")

    def covered_by(self, values) -> torch.Tensor:
        v = _exact(self._check(values))
        lower, upper = self._on(v)
        return torch.stack([v < lower, v > upper], dim=2).view(len(v), self.num_items)


@CRITERIA.register("snac")
class StrongNeuronActivationCoverage(_CornerCriterion):
    """Strong neuron activation coverage (DeepGauge): NBC's upper corners only.

    ``x`` covers ``n`` when ``v(x, n) > high_n + s*std_n``. ``SNAC(T) = |upper| / M``.

    Args:
        layout: The neurons' layout.
        profile: The model's profile for these layers.
        scale: ``s >= 0``.
    """

    name = "snac"

    def _arrays(self):
        p = self.profile
        return ((p.high + self.scale * p.std, "below"),)

    def covered_by(self, values) -> torch.Tensor:
        v = _exact(self._check(values))
        (upper,) = self._on(v)
        return v > upper


def _top_masks(values: torch.Tensor, layout: NeuronLayout, k: int) -> list[torch.Tensor]:
    """Per layer, ``(B, size)`` bool: the ``min(k, size)`` units with the largest values; among
    units tied at the ``k``-th largest value the lower units are taken first.

    ``topk`` gives each row's ``k``-th largest value ``c``; every unit above ``c`` is in, and
    the ties at ``c`` fill the remaining places in unit order (a running count of the ties).
    """
    masks = []
    for layer in layout.layers:
        block = values[:, layer.offset : layer.offset + layer.size]
        kk = min(k, layer.size)
        if kk == layer.size:
            masks.append(torch.ones_like(block, dtype=torch.bool))
            continue
        cut = torch.topk(block, kk, dim=1).values[:, -1:]
        above = block > cut
        tied = block == cut
        room = kk - above.sum(dim=1, keepdim=True)
        masks.append(above | (tied & (tied.cumsum(dim=1) <= room)))
    return masks


@CRITERIA.register("tknc")
class TopKNeuronCoverage(BitSetCriterion):
    """Top-k neuron coverage (DeepGauge): ``x`` covers the ``k`` neurons with the largest values
    in each layer (ties to the lower unit). ``TKNC(T) = |union over x of top_k(x)| / M``.

    Args:
        layout: The neurons' layout.
        top_k: ``k`` per layer (a layer with fewer units has all of them on top).
    """

    name = "tknc"

    def __init__(self, layout: NeuronLayout, *, top_k: int = 1):
        self.top_k = check_int("top_k", top_k)
        super().__init__(layout)

    def params(self) -> dict:
        return {"top_k": self.top_k}

    def covered_by(self, values) -> torch.Tensor:
        v = self._check(values)
        return torch.cat(_top_masks(v, self.layout, self.top_k), dim=1)


@CRITERIA.register("tknp")
class TopKPatternCoverage(Criterion):
    """Top-k neuron patterns (DeepGauge): the number of distinct tuples
    ``(top_k(x, layer_1), ..., top_k(x, layer_L))`` over the inputs, each ``top_k`` a set.

    State: ``patterns``, a set of ``bytes`` (each layer's top-``k`` units in increasing order
    as little-endian int32), merged by union. There is no fixed item set, so
    :class:`CoverageResult` has ``total`` and ``ratio`` ``None``; per layer it counts the
    distinct top-``k`` sets of that layer.

    Args:
        layout: The neurons' layout.
        top_k: ``k`` per layer.
    """

    name = "tknp"
    patterns: set[bytes]  # state (add_state)

    def __init__(self, layout: NeuronLayout, *, top_k: int = 1):
        self.top_k = check_int("top_k", top_k)
        super().__init__(layout)
        self.add_state("patterns", set(), "union")

    def params(self) -> dict:
        return {"top_k": self.top_k}

    def pattern_keys(self, values) -> np.ndarray:
        """``(B,)`` array of fixed-width ``bytes`` keys (numpy void): each input's pattern."""
        v = self._check(values)
        mask = torch.cat(_top_masks(v, self.layout, self.top_k), dim=1)
        # nonzero() lists each row's units in increasing order, and every row has the same count.
        width = sum(min(self.top_k, la.size) for la in self.layout.layers)
        units = mask.nonzero()[:, 1].view(len(v), width).cpu().numpy().astype("<i4")
        return np.ascontiguousarray(units).view(np.dtype((np.void, width * 4))).reshape(len(v))

    def covered_by(self, values) -> torch.Tensor:
        raise DeepFaultError(
            "tknp covers patterns, an open set rather than a fixed set of items; use "
            "pattern_keys(values) for each input's pattern or input_items(values) for pattern indices"
        )

    def would_increase(self, values) -> torch.Tensor:
        keys = self.pattern_keys(values).tolist()
        seen = np.fromiter(map(self.patterns.__contains__, keys), dtype=np.bool_, count=len(keys))
        return torch.from_numpy(~seen)

    def update(self, values) -> None:
        self.patterns.update(self.pattern_keys(values).tolist())

    def covered_count(self) -> int:
        return len(self.patterns)

    def input_items(self, values) -> tuple[torch.Tensor, int]:
        keys = self.pattern_keys(values)
        unique, inverse = np.unique(keys, return_inverse=True)
        return torch.from_numpy(inverse.reshape(-1, 1).astype(np.int64)), len(unique)

    def compute(self) -> CoverageResult:
        per_layer: dict[str, tuple[int, int | None]] = {}
        start = 0
        for layer in self.layout.layers:
            stop = start + 4 * min(self.top_k, layer.size)
            per_layer[layer.name] = (len({p[start:stop] for p in self.patterns}), None)
            start = stop
        return CoverageResult(self.name, len(self.patterns), None, None, per_layer, self.params())


# --------------------------------------------------------------------------- lookup


def list_criteria() -> list[str]:
    """The registered criterion names, sorted."""
    return CRITERIA.names()


def criterion_params(name: str) -> tuple[str, ...]:
    """The keyword parameters criterion ``name`` takes (``threshold``, ``profile``, ...)."""
    sig = inspect.signature(CRITERIA.get(name).__init__)
    return tuple(p.name for p in sig.parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY)


def make_criterion(name: str, layout: NeuronLayout, **params) -> Criterion:
    """A fresh criterion ``name`` for ``layout`` with its parameters (validated).

    Raises:
        DeepFaultError: An unknown name (the message lists the known ones), a parameter the
            criterion does not take, or a bad value.
    """
    cls = CRITERIA.get(name)
    unknown = sorted(set(params) - set(criterion_params(name)))
    if unknown:
        raise DeepFaultError(
            f"coverage criterion {name!r} takes no parameter {', '.join(map(repr, unknown))}"
            f"{suggestion(unknown[0], criterion_params(name))}; "
            f"it takes: {', '.join(criterion_params(name)) or 'none'}"
        )
    return cls(layout, **params)
