"""Every measure against a per-neuron loop written straight from its formula."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepfault import DeepFaultError, get_measure, list_measures, suspiciousness
from deepfault.core.capture import NeuronLayout
from deepfault.localization.spectrum import Spectrum


def d(num, den):
    """Scalar ratio with the spec's convention: 0 when the denominator is 0."""
    return num / den if den != 0 else 0.0


def wong3_h(ep):
    if ep <= 2:
        return ep
    if ep <= 10:
        return 2 + 0.1 * (ep - 2)
    return 2.8 + 0.001 * (ep - 10)


def dstar_naive(ep, ef, np_, nf, star=3.0):
    if ep + nf == 0:
        return math.inf if ef > 0 else 0.0
    return ef**star / (ep + nf)


# (as=ep, af=ef, ns=np, nf=nf), one neuron at a time.
NAIVE = {
    "tarantula": lambda ep, ef, np_, nf: d(d(ef, ef + nf), d(ef, ef + nf) + d(ep, ep + np_)),
    "ochiai": lambda ep, ef, np_, nf: d(ef, math.sqrt((ef + nf) * (ef + ep))),
    "dstar": dstar_naive,
    "jaccard": lambda ep, ef, np_, nf: d(ef, ef + nf + ep),
    "kulczynski2": lambda ep, ef, np_, nf: (d(ef, ef + nf) + d(ef, ef + ep)) / 2,
    "op2": lambda ep, ef, np_, nf: ef - ep / (ep + np_ + 1),
    "barinel": lambda ep, ef, np_, nf: 1 - ep / (ep + ef) if ep + ef else 0.0,
    "zoltar": lambda ep, ef, np_, nf: d(ef, ef + nf + ep + 10000 * nf * ep / ef) if ef else 0.0,
    "ample": lambda ep, ef, np_, nf: abs(d(ef, ef + nf) - d(ep, ep + np_)),
    "naish1": lambda ep, ef, np_, nf: -1.0 if nf > 0 else float(np_),
    "russell_rao": lambda ep, ef, np_, nf: d(ef, ef + nf + ep + np_),
    "sorensen_dice": lambda ep, ef, np_, nf: d(2 * ef, 2 * ef + nf + ep),
    "anderberg": lambda ep, ef, np_, nf: d(ef, ef + 2 * (nf + ep)),
    "rogers_tanimoto": lambda ep, ef, np_, nf: d(ef + np_, ef + np_ + 2 * (nf + ep)),
    "simple_matching": lambda ep, ef, np_, nf: d(ef + np_, ef + nf + ep + np_),
    "hamann": lambda ep, ef, np_, nf: d(ef + np_ - nf - ep, ef + nf + ep + np_),
    "goodman": lambda ep, ef, np_, nf: d(2 * ef - nf - ep, 2 * ef + nf + ep),
    "ochiai2": lambda ep, ef, np_, nf: d(
        ef * np_, math.sqrt((ef + ep) * (nf + np_) * (ef + np_) * (ep + nf))
    ),
    "arithmetic_mean": lambda ep, ef, np_, nf: d(
        2 * (ef * np_ - nf * ep), (ef + ep) * (np_ + nf) + (ef + nf) * (ep + np_)
    ),
    "wong1": lambda ep, ef, np_, nf: float(ef),
    "wong2": lambda ep, ef, np_, nf: float(ef - ep),
    "wong3": lambda ep, ef, np_, nf: ef - wong3_h(ep),
    "gp13": lambda ep, ef, np_, nf: ef * (1 + d(1, 2 * ep + ef)),
    "euclid": lambda ep, ef, np_, nf: math.sqrt(ef + np_),
}


def test_every_registered_measure_has_an_oracle_and_at_least_thirteen():
    assert set(NAIVE) == set(list_measures())
    assert len(list_measures()) >= 13


def spectra(max_neurons=12, max_count=6):
    """Random spectra with a shared number of passing and failing inputs per neuron."""

    @st.composite
    def build(draw):
        p = draw(st.integers(0, max_count))
        f = draw(st.integers(0, max_count))
        m = draw(st.integers(1, max_neurons))
        a_s = np.array(draw(st.lists(st.integers(0, p), min_size=m, max_size=m)))
        a_f = np.array(draw(st.lists(st.integers(0, f), min_size=m, max_size=m)))
        return a_s, a_f, p - a_s, f - a_f

    return build()


@pytest.mark.parametrize("name", sorted(NAIVE))
@settings(max_examples=60, deadline=None)
@given(counts=spectra())
def test_measure_equals_naive_loop_and_is_never_nan(name, counts):
    a_s, a_f, n_s, n_f = counts
    got = get_measure(name)(a_s, a_f, n_s, n_f)
    want = [NAIVE[name](*map(int, c)) for c in zip(a_s, a_f, n_s, n_f, strict=True)]
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_zero_denominator_conventions():
    # neuron 0: never active; 1: active on every failing input only; 2: active everywhere
    a_s, a_f, n_s, n_f = (np.array(v) for v in ([0, 0, 4], [0, 3, 3], [4, 4, 0], [3, 0, 0]))
    t = get_measure("tarantula")(a_s, a_f, n_s, n_f)
    np.testing.assert_allclose(t, [0.0, 1.0, 0.5])
    ds = get_measure("dstar")(a_s, a_f, n_s, n_f, star=2)
    assert ds[1] == math.inf
    assert ds[0] == 0.0
    assert ds[2] == 9 / 4
    o = get_measure("ochiai")(a_s, a_f, n_s, n_f)
    np.testing.assert_allclose(o, [0.0, 1.0, 3 / math.sqrt(3 * 7)])
    # no passing inputs at all: tarantula of an always-failing-active neuron is 1
    t = get_measure("tarantula")(np.array([0]), np.array([2]), np.array([0]), np.array([0]))
    assert t[0] == 1.0


def _spectrum(a_s, a_f, n_s, n_f):
    layout = NeuronLayout.from_sizes(["l"], [len(a_s)])
    return Spectrum(layout, *(np.asarray(c) for c in (a_s, a_f, n_s, n_f)))


def test_no_failures_means_all_zero_scores():
    spec = _spectrum([1, 2], [0, 0], [1, 0], [0, 0])
    for name in list_measures():
        np.testing.assert_array_equal(suspiciousness(spec, name), [0.0, 0.0])


def test_star_and_unknown_measure_errors():
    spec = _spectrum([1], [1], [0], [0])
    with pytest.raises(DeepFaultError, match=r"star .* must be a number >= 1; got 0.5"):
        suspiciousness(spec, "dstar", star=0.5)
    with pytest.raises(DeepFaultError, match=(r"unknown measure 'tarntula'"
                                              r"; did you mean 'tarantula'\? \(known: ample, ")):
        suspiciousness(spec, "tarntula")


def test_register_measure_as_the_readme_documents_it():
    import numpy as np

    from deepfault import list_approaches, register_measure, select
    from deepfault.localization.measures import MEASURES
    from deepfault.localization.selection import APPROACHES

    try:
        register_measure("readme_af", lambda a_s, a_f, n_s, n_f: a_f - a_s, formula="af - as")

        @register_measure("readme_deco", formula="af")
        def deco(a_s, a_f, n_s, n_f):
            return np.asarray(a_f, dtype=float)

        assert {"readme_af", "readme_deco"} <= set(list_approaches())
        from helpers.spectra import make_spectrum

        spec = make_spectrum()
        assert select(spec, "readme_af", 2).approach == "readme_af"
        assert len(select(spec, "readme_deco", 1).neurons) == 1
    finally:
        for name in ("readme_af", "readme_deco"):
            MEASURES.unregister(name)
            APPROACHES.unregister(name)
