"""Suspiciousness measures from spectrum-based fault localisation (spec section 3).

A measure is a pure function of the four count arrays ``as, af, ns, nf`` (each ``(M,)``)
returning ``(M,)`` float64 scores; higher is more suspicious. In the literature's
notation ``ef = af``, ``ep = as``, ``nf = nf``, ``np = ns``, ``F = af + nf`` (failing
inputs) and ``P = as + ns`` (passing inputs).

Conventions (held for every measure and tested): a score is never NaN; a ratio whose
denominator is zero is ``0`` unless noted; for D* a zero denominator with ``af > 0``
(active on every failing input and on no passing one) scores ``+inf``, above every
finite score.

New measures are registered with :func:`register_measure`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..core.registry import Registry
from ..errors import DeepFaultError

__all__ = [
    "MEASURES",
    "Measure",
    "register_measure",
    "get_measure",
    "list_measures",
    "suspiciousness",
]


@dataclass(frozen=True)
class Measure:
    """A registered suspiciousness measure.

    Attributes:
        name: Registry name (``--measure`` on the command line).
        fn: ``fn(a_s, a_f, n_s, n_f, **params) -> scores``.
        formula: The score in the literature's notation.
        reference: Where the measure comes from.
        params: Names of the keyword parameters ``fn`` takes (for example ``star``).
    """

    name: str
    fn: Callable[..., np.ndarray]
    formula: str
    reference: str = ""
    params: tuple[str, ...] = ()

    def __call__(self, a_s, a_f, n_s, n_f, **params) -> np.ndarray:
        counts = [np.asarray(c, dtype=np.float64) for c in (a_s, a_f, n_s, n_f)]
        return np.asarray(self.fn(*counts, **params), dtype=np.float64)


#: Every suspiciousness measure, by name (``--measure``).
MEASURES: Registry[Measure] = Registry("measure")

#: Called with each newly registered measure (the approach registry listens).
_listeners: list[Callable[[Measure], None]] = []


def register_measure(name: str, fn: Callable[..., np.ndarray] | None = None, *, formula: str = "",
                     reference: str = "", params: tuple[str, ...] = ()):
    """Add a measure ``fn(a_s, a_f, n_s, n_f, **params) -> scores`` under ``name``.

    Called with ``fn`` it registers it at once; without, it returns a decorator::

        register_measure("my_measure", lambda a_s, a_f, n_s, n_f: a_f - a_s, formula="af - as")

        @register_measure("other", formula="af / (af + nf)")
        def other(a_s, a_f, n_s, n_f): ...

    Args:
        name: Registry name (``--measure`` on the command line).
        fn: The scoring function of the four ``(M,)`` count arrays.
        formula: The score in the literature's notation, for listings.
        reference: Where the measure comes from.
        params: Names of keyword parameters ``fn`` takes (for example ``star``).

    Raises:
        DeepFaultError: ``fn`` is not callable.
        RuntimeError: ``name`` is registered already.
    """

    def decorate(f):
        if not callable(f):
            raise DeepFaultError(f"register_measure needs a function of (as, af, ns, nf); got {f!r}")
        measure = Measure(name, f, formula or getattr(f, "__doc__", "") or name, reference, params)
        MEASURES.register(name, measure)
        for listener in _listeners:
            listener(measure)
        return f

    return decorate if fn is None else decorate(fn)


def list_measures() -> list[str]:
    """Names of the registered measures, sorted."""
    return MEASURES.names()


def get_measure(name: str) -> Measure:
    """The measure registered as ``name``.

    Raises:
        DeepFaultError: Unknown name; the message lists the known ones.
    """
    return MEASURES.get(name)


def check_star(star: float) -> float:
    if not (isinstance(star, (int, float)) and math.isfinite(star) and star >= 1):
        raise DeepFaultError(f"star (the D* exponent) must be a number >= 1; got {star!r}")
    return float(star)


def suspiciousness(spectrum, measure: str = "tarantula", *, star: float = 3.0) -> np.ndarray:
    """Score every neuron of a spectrum.

    Args:
        spectrum: A :class:`~deepfault.localization.spectrum.Spectrum`.
        measure: A registered measure name (see :func:`list_measures`).
        star: The exponent of D*; used only by measures that take it.

    Returns:
        ``(M,)`` float64 scores, never NaN. When the spectrum has no failing input every
        score is 0 (nothing is suspicious), and selection falls back to its tie-breaking.

    Raises:
        DeepFaultError: Unknown measure, or ``star < 1``.
    """
    m = get_measure(measure)
    params = {"star": check_star(star)} if "star" in m.params else {}
    if spectrum.num_failed == 0:
        return np.zeros(spectrum.layout.num_neurons)
    scores = m(*spectrum.counts, **params)
    if scores.shape != (spectrum.layout.num_neurons,):
        raise DeepFaultError(
            f"measure {measure!r} returned scores of shape {scores.shape}; a measure must return one "
            f"score per neuron, shape ({spectrum.layout.num_neurons},)"
        )
    if np.isnan(scores).any():
        first = int(np.flatnonzero(np.isnan(scores))[0])
        raise DeepFaultError(
            f"measure {measure!r} produced NaN scores (first for neuron {spectrum.layout.neuron(first)}); "
            "a measure must return a number for every neuron, e.g. 0 where a denominator is zero"
        )
    return scores


def _div(num, den, *, zero=0.0):
    """``num / den`` elementwise, ``zero`` where ``den == 0``."""
    num, den = np.broadcast_arrays(np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64))
    out = np.full(num.shape, zero, dtype=np.float64)
    np.divide(num, den, out=out, where=den != 0)
    return out


# --- the paper's measures (Table 1) -------------------------------------------------


@register_measure(
    "tarantula",
    formula="(af/(af+nf)) / (af/(af+nf) + as/(as+ns))",
    reference="Jones & Harrold, ASE 2005",
)
def tarantula(a_s, a_f, n_s, n_f):
    fail_ratio = _div(a_f, a_f + n_f)
    pass_ratio = _div(a_s, a_s + n_s)
    return _div(fail_ratio, fail_ratio + pass_ratio)


@register_measure(
    "ochiai", formula="af / sqrt((af+nf) * (af+as))", reference="Abreu et al., TAICPART 2007"
)
def ochiai(a_s, a_f, n_s, n_f):
    return _div(a_f, np.sqrt((a_f + n_f) * (a_f + a_s)))


@register_measure(
    "dstar",
    formula="af**star / (as + nf); +inf when as + nf = 0 and af > 0",
    reference="Wong et al., IEEE TR 2014",
    params=("star",),
)
def dstar(a_s, a_f, n_s, n_f, *, star=3.0):
    num = a_f**star
    return np.where((a_s + n_f == 0) & (num > 0), np.inf, _div(num, a_s + n_f))


# --- further measures from the SBFL literature --------------------------------------


@register_measure("jaccard", formula="af / (af + nf + as)", reference="Abreu et al., 2007")
def jaccard(a_s, a_f, n_s, n_f):
    return _div(a_f, a_f + n_f + a_s)


@register_measure(
    "kulczynski2",
    formula="(af/(af+nf) + af/(af+as)) / 2",
    reference="Naish et al., TOSEM 2011",
)
def kulczynski2(a_s, a_f, n_s, n_f):
    return 0.5 * (_div(a_f, a_f + n_f) + _div(a_f, a_f + a_s))


@register_measure("op2", formula="af - as / (as + ns + 1)", reference="Naish et al., TOSEM 2011")
def op2(a_s, a_f, n_s, n_f):
    return a_f - a_s / (a_s + n_s + 1.0)


@register_measure(
    "barinel",
    formula="1 - as/(as+af), i.e. af/(as+af)",
    reference="Abreu et al., ASE 2009",
)
def barinel(a_s, a_f, n_s, n_f):
    # Written as af/(as+af) so that a never-active neuron scores 0, not 1.
    return _div(a_f, a_s + a_f)


@register_measure(
    "zoltar",
    formula="af / (af + nf + as + 10000*nf*as/af)",
    reference="Gonzalez-Sanchez, 2007",
)
def zoltar(a_s, a_f, n_s, n_f):
    return _div(a_f, a_f + n_f + a_s + 10000.0 * _div(n_f * a_s, a_f))


@register_measure(
    "ample", formula="|af/(af+nf) - as/(as+ns)|", reference="Dallmeier et al., ECOOP 2005"
)
def ample(a_s, a_f, n_s, n_f):
    return np.abs(_div(a_f, a_f + n_f) - _div(a_s, a_s + n_s))


@register_measure(
    "naish1", formula="-1 if nf > 0 else ns", reference="Naish et al., TOSEM 2011"
)
def naish1(a_s, a_f, n_s, n_f):
    return np.where(n_f > 0, -1.0, n_s)


@register_measure(
    "russell_rao", formula="af / (af + nf + as + ns)", reference="Russell & Rao, 1940"
)
def russell_rao(a_s, a_f, n_s, n_f):
    return _div(a_f, a_f + n_f + a_s + n_s)


@register_measure(
    "sorensen_dice", formula="2af / (2af + nf + as)", reference="Dice, 1945; Sorensen, 1948"
)
def sorensen_dice(a_s, a_f, n_s, n_f):
    return _div(2.0 * a_f, 2.0 * a_f + n_f + a_s)


@register_measure("anderberg", formula="af / (af + 2(nf + as))", reference="Anderberg, 1973")
def anderberg(a_s, a_f, n_s, n_f):
    return _div(a_f, a_f + 2.0 * (n_f + a_s))


@register_measure(
    "rogers_tanimoto",
    formula="(af + ns) / (af + ns + 2(nf + as))",
    reference="Rogers & Tanimoto, 1960",
)
def rogers_tanimoto(a_s, a_f, n_s, n_f):
    return _div(a_f + n_s, a_f + n_s + 2.0 * (n_f + a_s))


@register_measure(
    "simple_matching", formula="(af + ns) / (af + nf + as + ns)", reference="Sokal & Michener, 1958"
)
def simple_matching(a_s, a_f, n_s, n_f):
    return _div(a_f + n_s, a_f + n_f + a_s + n_s)


@register_measure(
    "hamann", formula="(af + ns - nf - as) / (af + nf + as + ns)", reference="Hamann, 1961"
)
def hamann(a_s, a_f, n_s, n_f):
    return _div(a_f + n_s - n_f - a_s, a_f + n_f + a_s + n_s)


@register_measure(
    "goodman", formula="(2af - nf - as) / (2af + nf + as)", reference="Goodman & Kruskal, 1954"
)
def goodman(a_s, a_f, n_s, n_f):
    return _div(2.0 * a_f - n_f - a_s, 2.0 * a_f + n_f + a_s)


@register_measure(
    "ochiai2",
    formula="af*ns / sqrt((af+as)(nf+ns)(af+ns)(as+nf))",
    reference="Naish et al., TOSEM 2011",
)
def ochiai2(a_s, a_f, n_s, n_f):
    return _div(a_f * n_s, np.sqrt((a_f + a_s) * (n_f + n_s) * (a_f + n_s) * (a_s + n_f)))


@register_measure(
    "arithmetic_mean",
    formula="2(af*ns - nf*as) / ((af+as)(nf+ns) + (af+nf)(as+ns))",
    reference="Naish et al., TOSEM 2011",
)
def arithmetic_mean(a_s, a_f, n_s, n_f):
    return _div(
        2.0 * (a_f * n_s - n_f * a_s), (a_f + a_s) * (n_f + n_s) + (a_f + n_f) * (a_s + n_s)
    )


@register_measure("wong1", formula="af", reference="Wong et al., JSS 2007")
def wong1(a_s, a_f, n_s, n_f):
    return a_f.copy()


@register_measure("wong2", formula="af - as", reference="Wong et al., JSS 2007")
def wong2(a_s, a_f, n_s, n_f):
    return a_f - a_s


@register_measure(
    "wong3",
    formula="af - h; h = as if as <= 2, 2 + 0.1(as-2) if as <= 10, else 2.8 + 0.001(as-10)",
    reference="Wong et al., JSS 2007",
)
def wong3(a_s, a_f, n_s, n_f):
    h = np.where(a_s <= 2, a_s, np.where(a_s <= 10, 2 + 0.1 * (a_s - 2), 2.8 + 0.001 * (a_s - 10)))
    return a_f - h


@register_measure(
    "gp13", formula="af * (1 + 1/(2as + af))", reference="Yoo, SSBSE 2012 (genetic programming)"
)
def gp13(a_s, a_f, n_s, n_f):
    return a_f * (1.0 + _div(1.0, 2.0 * a_s + a_f))


@register_measure("euclid", formula="sqrt(af + ns)", reference="Krause, 1973")
def euclid(a_s, a_f, n_s, n_f):
    return np.sqrt(a_f + n_s)
