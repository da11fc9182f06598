"""Choosing the ``k`` most suspicious neurons, and the random baselines (spec section 3).

Ranking: score descending; among equal scores the neuron of the deeper layer first (the
paper's rule), then the lower unit index. The same scores and ``k`` always give the same
neurons.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..checks import check_int
from ..core.registry import Registry
from ..errors import DeepFaultError
from .measures import Measure, get_measure, list_measures, suspiciousness
from .measures import _listeners as _measure_listeners
from .spectrum import Spectrum

__all__ = [
    "APPROACHES",
    "Approach",
    "get_approach",
    "Neuron",
    "Selection",
    "RANDOM_BASELINES",
    "PAPER_MEASURES",
    "list_approaches",
    "approach_rows",
    "rank",
    "select_neurons",
    "localize",
    "random_baseline",
    "uniform_baseline",
    "select",
]

#: The measures whose selections the paper's random baseline avoids.
PAPER_MEASURES = ("tarantula", "ochiai", "dstar")
#: Approaches that are not measures: the paper's layer-matched random draw, and a uniform one.
RANDOM_BASELINES = ("random", "uniform")


@dataclass(frozen=True)
class Neuron:
    """A selected neuron: where it is, its score and its four counts."""

    layer: str
    unit: int
    index: int
    score: float | None
    a_s: int
    a_f: int
    n_s: int
    n_f: int

    def to_dict(self) -> dict:
        score: float | str | None = self.score
        if self.score is not None and not np.isfinite(self.score):
            score = "inf" if self.score > 0 else "-inf"
        return {
            "layer": self.layer,
            "unit": self.unit,
            "index": self.index,
            "score": score,
            "as": self.a_s,
            "af": self.a_f,
            "ns": self.n_s,
            "nf": self.n_f,
        }


@dataclass(frozen=True)
class Selection:
    """The neurons chosen by one approach for one spectrum.

    Attributes:
        neurons: The selected neurons, most suspicious first.
        approach: The measure or baseline that chose them.
        k: How many were asked for.
        no_failures: The spectrum had no failing input, so no neuron is suspicious and
            the order is the tie-breaking order alone.
        ranking: ``(M,)`` flat indices of every neuron, most suspicious first (for the
            ``k' >= k`` evaluation); ``None`` for the random baselines.
        runner_up: The score of the most suspicious neuron left out (``None``: a baseline, or
            every neuron selected): a selected neuron whose score equals it is there by the
            tie-breaking order alone (:mod:`~.diagnosis`).
    """

    neurons: tuple[Neuron, ...]
    approach: str
    k: int
    no_failures: bool
    ranking: np.ndarray | None = None
    runner_up: float | None = None

    @property
    def indices(self) -> np.ndarray:
        return np.array([n.index for n in self.neurons], dtype=np.int64)

    def layer_distribution(self) -> dict[str, int]:
        """How many selected neurons fall in each layer (the paper's Fig. 3)."""
        out: dict[str, int] = {}
        for n in self.neurons:
            out[n.layer] = out.get(n.layer, 0) + 1
        return out

    def to_dict(self) -> dict:
        return {
            "approach": self.approach,
            "k": self.k,
            "no_failures": self.no_failures,
            "neurons": [n.to_dict() for n in self.neurons],
            "layer_distribution": self.layer_distribution(),
        }


@dataclass(frozen=True)
class Approach:
    """A way to choose ``k`` neurons from a spectrum: a measure's ranking or a baseline.

    Attributes:
        name: Registry name (``--measure``).
        choose: ``choose(spectrum, k, *, star, seed) -> Selection``.
        baseline: True for the random draws (no ranking, so no ``k'`` figures).
        description: One line for listings.
    """

    name: str
    choose: Callable[..., Selection]
    baseline: bool
    description: str


#: Every approach, by name: each registered measure, and the baselines.
APPROACHES: Registry[Approach] = Registry("approach", listing=lambda: list_approaches())


def _measure_approach(measure: Measure) -> None:
    def choose(spectrum: Spectrum, k: int, *, star: float = 3.0, seed: int = 0) -> Selection:
        return localize(spectrum, measure=measure.name, k=k, star=star)

    APPROACHES.register(measure.name, Approach(measure.name, choose, False, measure.formula))


def list_approaches() -> list[str]:
    """Every name ``select`` accepts: the registered measures, then the baselines."""
    names = APPROACHES.names()
    return [n for n in names if not APPROACHES.get(n).baseline] + [
        n for n in names if APPROACHES.get(n).baseline
    ]


def approach_rows() -> list[tuple[str, str, str]]:
    """``(name, score, reference)`` of every approach, in :func:`list_approaches`' order
    (``deepfault measures``' table): a measure's formula and paper, a baseline's description.
    """
    rows = []
    for name in list_approaches():
        approach = APPROACHES.get(name)
        reference = "-" if approach.baseline else (get_measure(name).reference or "-")
        if name == "random":
            reference = "Eniser et al., FASE 2019"
        rows.append((name, approach.description, reference))
    return rows


def get_approach(name: str) -> Approach:
    """The registered selection approach ``name`` (a measure or a baseline)."""
    return APPROACHES.get(name)


def check_k(k: int, num_neurons: int) -> int:
    """``k`` as an ``int`` >= 1 and at most ``num_neurons``, the neurons analysed."""
    k = check_int("k (the number of suspicious neurons)", k)
    if k > num_neurons:
        raise DeepFaultError(
            f"k={k} is larger than the {num_neurons} analysed neurons; "
            f"choose k <= {num_neurons} or analyse more layers"
        )
    return int(k)


def rank(scores: np.ndarray, spectrum: Spectrum) -> np.ndarray:
    """Flat neuron indices ordered most suspicious first, with the spec's tie-breaking."""
    scores = np.asarray(scores, dtype=np.float64)
    layout = spectrum.layout
    if scores.shape != (layout.num_neurons,):
        raise DeepFaultError(
            f"scores must have one value per neuron ({layout.num_neurons}); got shape {scores.shape}"
        )
    # np.lexsort sorts by the last key first.
    return np.lexsort((layout.unit_of_each(), -layout.depth_of_each(), -scores))


def _neurons(spectrum: Spectrum, indices, scores) -> tuple[Neuron, ...]:
    layout = spectrum.layout
    out = []
    for i, score in zip(indices, scores, strict=True):
        layer, unit = layout.neuron(int(i))
        out.append(
            Neuron(
                layer, unit, int(i), None if score is None else float(score),
                int(spectrum.a_s[i]), int(spectrum.a_f[i]), int(spectrum.n_s[i]), int(spectrum.n_f[i]),
            )
        )
    return tuple(out)


def select_neurons(spectrum: Spectrum, scores: np.ndarray, k: int, *, approach: str = "") -> Selection:
    """The ``k`` neurons with the highest ``scores``.

    Args:
        spectrum: The spectrum the scores came from (its layout gives depths and units).
        scores: ``(M,)`` suspiciousness scores.
        k: How many to select, ``1 <= k <= M``.
        approach: The measure's name, recorded in the result.

    Raises:
        DeepFaultError: ``k`` out of range, or ``scores`` of the wrong shape.
    """
    k = check_k(k, spectrum.layout.num_neurons)
    order = rank(scores, spectrum)
    top = order[:k]
    runner_up = float(np.asarray(scores, dtype=np.float64)[order[k]]) if k < len(order) else None
    return Selection(_neurons(spectrum, top, np.asarray(scores)[top]), approach, k,
                     spectrum.num_failed == 0, order, runner_up)


def localize(spectrum: Spectrum, *, measure: str = "tarantula", k: int = 10, star: float = 3.0) -> Selection:
    """Score every neuron with ``measure`` and select the ``k`` most suspicious.

    Examples:
        >>> sel = localize(spec, measure="ochiai", k=5)  # doctest: +SKIP
        >>> [(n.layer, n.unit) for n in sel.neurons]  # doctest: +SKIP
    """
    get_measure(measure)
    check_k(k, spectrum.layout.num_neurons)
    return select_neurons(spectrum, suspiciousness(spectrum, measure, star=star), k, approach=measure)


def random_baseline(
    spectrum: Spectrum, k: int, *, exclude: Sequence[Selection], seed: int
) -> Selection:
    """The paper's random baseline: ``k`` neurons that none of ``exclude`` selected.

    Each neuron's layer is drawn with probability proportional to how many of the
    excluded selections' neurons fell in that layer (so the random neurons are spread
    over the layers like the measures' are), then a unit uniformly among that layer's
    units not yet excluded. When every such layer is used up, the draw continues over the
    remaining layers in proportion to their free units.

    Raises:
        DeepFaultError: Fewer than ``k`` neurons are left outside the excluded selections.
    """
    layout = spectrum.layout
    k = check_k(k, layout.num_neurons)
    free = np.ones(layout.num_neurons, dtype=bool)
    weight = np.zeros(len(layout.layers))
    depth = {la.name: la.depth for la in layout.layers}
    for sel in exclude:
        for n in sel.neurons:
            free[n.index] = False
            weight[depth[n.layer]] += 1
    if free.sum() < k:
        raise DeepFaultError(
            f"the random baseline needs k={k} neurons outside the measures' selections, "
            f"but only {int(free.sum())} are left; choose a smaller k"
        )
    rng = np.random.default_rng(seed)
    bounds = [(la.offset, la.offset + la.size) for la in layout.layers]
    chosen = []
    for _ in range(k):  # k draws, each depending on the last: not a hot loop
        free_per_layer = np.array([free[a:b].sum() for a, b in bounds], dtype=float)
        p = np.where(free_per_layer > 0, weight, 0.0)
        if p.sum() == 0:
            p = free_per_layer
        layer = rng.choice(len(bounds), p=p / p.sum())
        a, b = bounds[layer]
        unit = rng.choice(np.flatnonzero(free[a:b]))
        free[a + unit] = False
        chosen.append(a + unit)
    return Selection(_neurons(spectrum, chosen, [None] * k), "random", k, spectrum.num_failed == 0)


def uniform_baseline(spectrum: Spectrum, k: int, *, seed: int) -> Selection:
    """``k`` distinct neurons drawn uniformly over all analysed neurons."""
    k = check_k(k, spectrum.layout.num_neurons)
    rng = np.random.default_rng(seed)
    chosen = rng.choice(spectrum.layout.num_neurons, size=k, replace=False)
    return Selection(_neurons(spectrum, chosen, [None] * k), "uniform", k, spectrum.num_failed == 0)


def _random(spectrum: Spectrum, k: int, *, star: float = 3.0, seed: int = 0) -> Selection:
    exclude = [localize(spectrum, measure=m, k=k, star=star) for m in PAPER_MEASURES]
    return random_baseline(spectrum, k, exclude=exclude, seed=seed)


def _uniform(spectrum: Spectrum, k: int, *, star: float = 3.0, seed: int = 0) -> Selection:
    return uniform_baseline(spectrum, k, seed=seed)


APPROACHES.register("random", Approach(
    "random", _random, True, "k neurons none of tarantula/ochiai/dstar chose, spread over layers like "
    "theirs (the paper's baseline)"))
APPROACHES.register("uniform", Approach(
    "uniform", _uniform, True, "k neurons drawn uniformly from all analysed neurons"))
for _name in list_measures():
    _measure_approach(get_measure(_name))
_measure_listeners.append(_measure_approach)


def select(
    spectrum: Spectrum, approach: str, k: int, *, star: float = 3.0, seed: int = 0
) -> Selection:
    """Select ``k`` neurons with a measure or a baseline, by name.

    ``"random"`` first selects with Tarantula, Ochiai and D* (same ``k`` and ``star``),
    then draws from the rest (:func:`random_baseline`); ``"uniform"`` draws from all.

    Raises:
        DeepFaultError: Unknown approach, ``k`` out of range, or a negative seed.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise DeepFaultError(f"seed must be an integer >= 0; got {seed!r}")
    return APPROACHES.get(approach).choose(spectrum, k, star=star, seed=int(seed))
