"""Tolerances for float results computed two ways, derived from the dtype and the reduction size.

Two computations of the same float result (another batch size, thread count, order of reduction,
device, or a vectorised kernel against a naive loop) may group a sum's terms differently, and so
round differently. How far apart they may land follows from the dtype and the number of terms,
not from a number that happened to pass on one CPU:

- Higham's forward-error bound (*Accuracy and Stability of Numerical Algorithms*, 2nd ed.,
  section 3.1): a sum or dot product of ``n`` terms, in any order or grouping, computed in a dtype of
  unit roundoff ``u = eps / 2`` is within ``gamma_n = n u / (1 - n u)`` of the exact value, relative to
  the sum of the terms' magnitudes (``|fl(w.x) - w.x| <= gamma_n |w|.|x|``). Two computations are
  each that close to the same exact value, so they are within ``2 gamma_n`` of each other
  (:func:`two_way_rtol`).
- The bound is relative to ``|w|.|x|``, which a test does not know and which cancellation can make
  far larger than the result itself (a logit near 0, an entropy near 0): a per-element ``rtol``
  fails on such elements. :func:`assert_close_two_ways` therefore compares normwise: every element
  within ``2 gamma_n`` times the largest finite magnitude among the compared values (the scale of
  the results, which stands for ``|w|.|x|``; ``scale=`` where the results summarise larger values,
  as a mean does). That is an assumption about the suite's small seeded networks, which the
  float_sensitive runs under other kernels and thread counts check (tests/core/test_float_portability.py);
  it still fails on a wrong order of magnitude or a swapped pair of well-separated scores.
- A result that went through several reductions (the layers of a network, then a score over the
  layer's values) takes ``n`` as the sum of their lengths: to first order, the error bounds of
  successive dot products add up (``gamma_a + gamma_b <= gamma_{a+b}``). A reduction done in a
  wider dtype than its inputs (the surprise scores' float64 distances over float32 activation
  traces) counts for nothing beside the narrow dtype's ``u``, and is left out. Each caller states the
  ``n`` it used and why.
- An exact step after the sums may still stretch their error: a whitening by a covariance (the
  Mahalanobis distance of MDSA, the Gaussian kernels of LSA, whose bandwidth is a multiple of the
  class covariance) by up to the square root of the covariance's condition number, and a squared
  distance doubles a relative error. Such a caller passes ``condition``, computed from its data
  (:func:`surprise_condition`), never guessed.

Orders of float scores are compared with :func:`assert_orders_agree`: equal up to permutations
inside runs of scores whose neighbouring gaps are within what the two computations may move them.
Counts and integers are compared exactly, as are results that are bitwise the same by construction.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["assert_close_two_ways", "assert_orders_agree", "gamma", "surprise_condition", "two_way_rtol",
           "unit_roundoff"]


def unit_roundoff(dtype) -> float:
    """``u = eps / 2`` of a torch or NumPy floating dtype (float32: 2**-24, float64: 2**-53)."""
    if isinstance(dtype, torch.dtype):
        return torch.finfo(dtype).eps / 2
    return float(np.finfo(dtype).eps) / 2


def gamma(n: int, dtype) -> float:
    """Higham's ``gamma_n = n u / (1 - n u)``: the relative forward-error bound of a sum or dot
    product of ``n`` terms in ``dtype``, whatever the order or grouping of its additions."""
    if n < 1:
        raise ValueError(f"a reduction has at least one term; got n={n}")
    nu = n * unit_roundoff(dtype)
    if nu >= 1:
        raise ValueError(f"gamma_n is unbounded for n={n} in {dtype} (n u >= 1)")
    return nu / (1 - nu)


def two_way_rtol(n: int, dtype) -> float:
    """``2 gamma_n``: how far apart, relative to the results' scale, two computations of the same
    sums of ``n`` terms in ``dtype`` may land (each is within ``gamma_n`` of the exact value)."""
    return 2 * gamma(n, dtype)


def _float64(x) -> np.ndarray:
    if torch.is_tensor(x):
        x = x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


def _finite_scale(*arrays: np.ndarray) -> float:
    finite = [np.abs(a[np.isfinite(a)]) for a in arrays]
    return max((float(f.max()) for f in finite if f.size), default=0.0)


def surprise_condition(ats, classes) -> float:
    """How much the surprise scores' whitening may stretch the traces' relative error:
    ``2 sqrt(cond(C))`` for the worst class covariance ``C`` of the training traces ``ats``
    (``(N, M)``, grouped by ``classes``). MDSA is the quadratic form ``d' C^-1 d`` of ``d``, a trace
    less its class mean: ``C^-1/2`` stretches a relative change of ``d`` by at most
    ``sqrt(cond(C))``, the square doubles it. LSA's Gaussian kernels are such forms too, with a
    bandwidth that is a multiple of ``C``. (DSA's Euclidean distances stretch nothing: 1.)
    """
    x, c = np.asarray(ats, dtype=np.float64), np.asarray(classes)
    worst = 1.0
    for cls in np.unique(c):
        rows = x[c == cls]
        if len(rows) > x.shape[1]:
            eig = np.linalg.eigvalsh(np.cov(rows.T, ddof=0))
            worst = max(worst, float(np.sqrt(eig.max() / eig.min())))
    return 2 * worst


def assert_close_two_ways(actual, desired, *, n: int, dtype, condition: float = 1.0,
                          scale: float | None = None, err_msg: str = "") -> float:
    """Assert that ``actual`` and ``desired``, one float result computed two ways, agree to within
    ``condition * two_way_rtol(n, dtype)`` times the largest finite magnitude among them (normwise;
    see the module docstring), with infinities and NaNs in the same places. ``condition``: how much
    an exact step after the sums may stretch their relative error (1 for plain sums; computed from
    the data otherwise, e.g. :func:`surprise_condition`). ``scale``: the magnitude the sums'
    rounding is relative to, where the compared results are smaller than the values they summarise
    (a mean or a spread of values: the values' largest magnitude); by default the results' own.
    Returns the absolute tolerance used, for :func:`assert_orders_agree`.
    """
    a, d = _float64(actual), _float64(desired)
    assert a.shape == d.shape, f"{err_msg}: shapes {a.shape} and {d.shape}"
    finite = np.isfinite(d)
    np.testing.assert_array_equal(np.isfinite(a), finite, err_msg=f"{err_msg}: finite in different places")
    np.testing.assert_array_equal(a[~finite], d[~finite], err_msg=f"{err_msg}: different non-finite values")
    rtol = condition * two_way_rtol(n, dtype)
    atol = rtol * (_finite_scale(a, d) if scale is None else scale)
    np.testing.assert_allclose(a[finite], d[finite], rtol=0, atol=atol,
                               err_msg=f"{err_msg} (n={n} in {dtype}, condition {condition:.3g}: "
                                       f"{rtol:.3g} of the scale, atol={atol:.3g})")
    return atol


def assert_orders_agree(order_a, order_b, scores, *, atol: float, err_msg: str = "") -> None:
    """Assert that two orders of the same inputs agree up to permutations inside runs of ties by
    tolerance.

    ``scores`` are the scores ``order_a`` sorts (by input index); ``atol`` bounds how far the other
    computation may move each score (what :func:`assert_close_two_ways` returns). Two scores more than
    ``2 * atol`` apart keep their order whichever computation ranks them, so the runs break at gaps
    wider than that; inside a run any permutation is accepted. Equal scores (infinities included) are
    always tied. With ``atol=0`` this is an exact comparison up to equal scores.
    """
    a, b = np.asarray(order_a), np.asarray(order_b)
    assert a.ndim == 1, f"{err_msg}: an order of shape {a.shape}"
    assert a.shape == b.shape, f"{err_msg}: orders of shapes {a.shape} and {b.shape}"
    np.testing.assert_array_equal(np.sort(a), np.sort(b), err_msg=f"{err_msg}: not the same inputs")
    ranked = np.asarray(scores, dtype=np.float64)[a]
    with np.errstate(invalid="ignore"):
        gaps = np.abs(np.diff(ranked))
    gaps[ranked[1:] == ranked[:-1]] = 0.0
    gaps[np.isnan(gaps)] = np.inf
    breaks = (np.flatnonzero(gaps > 2 * atol) + 1).tolist()
    for start, stop in zip([0, *breaks], [*breaks, len(a)], strict=True):
        if set(a[start:stop].tolist()) != set(b[start:stop].tolist()):
            raise AssertionError(
                f"{err_msg}: the orders differ at positions {start}..{stop - 1}, a run of scores "
                f"{ranked[start:stop].tolist()} (ties within 2 * atol = {2 * atol:.3g}): "
                f"{a[start:stop].tolist()} against {b[start:stop].tolist()}")
