"""Surprise adequacy (LSA, DSA, MDSA) against dnn-tip, SciPy's ``gaussian_kde`` and naive
per-input loops written from the module docstring; its numerical traps, its blocking, the
model-level API, surprise coverage and the state file.

dnn-tip works in float32 (its inputs' dtype) and ours in float64 from the float32 ATs, so
their scores are compared with a relative tolerance; the naive loops run in float64 and are
compared tightly.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
import zipfile

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from deepfault.coverage import surprise as sa_mod
from deepfault.coverage.surprise import (
    SURPRISE_FORMAT,
    Surprise,
    fit_surprise,
    load_surprise,
    parse_kinds,
    save_surprise,
    surprise_coverage,
    surprise_scores,
)
from deepfault.coverage.uncertainty import priority_order
from deepfault.errors import DeepFaultError
from helpers.float_tolerance import assert_close_two_ways, surprise_condition, two_way_rtol
from helpers.tiny_models import chain_model, random_data


def state(ats, classes, num_classes=None, **kw) -> Surprise:
    ats = np.asarray(ats, dtype=np.float32)
    classes = np.asarray(classes, dtype=np.int64)
    k = int(classes.max()) + 1 if num_classes is None else num_classes
    return Surprise(("l",), (ats.shape[1],), "raw", "x" * 64, k, ats, classes, **kw)


def blobs(seed=0, n=240, m=6, k=3, test=60, spread=1.0):
    """Training ATs around one centre per class (classes balanced, in random order), and
    held-out ATs with classes drawn at random (as a model's predictions would be)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 3, (k, m))
    tc = rng.permutation(np.arange(n) % k)
    tr = centres[tc] + rng.normal(0, spread, (n, m)) * rng.uniform(0.5, 2, m)
    ec = rng.integers(0, k, test)
    te = centres[ec] + rng.normal(0, 1.5 * spread, (test, m))
    return tr.astype(np.float32), tc, te.astype(np.float32), ec


# --------------------------------------------------------------------------- naive oracles


def naive_dsa(tr, tc, te, ec):
    """Per input: the nearest same-class training AT (the first on a tie), then the nearest
    other-class training AT to that one; float64 Euclidean distances."""
    tr = tr.astype(np.float64)
    out = []
    for a, c in zip(te.astype(np.float64).tolist(), ec.tolist(), strict=True):
        best, best_i = math.inf, -1
        for i, (row, rc) in enumerate(zip(tr, tc, strict=True)):
            if rc == c:
                d = math.dist(a, row)
                if d < best:
                    best, best_i = d, i
        if best_i < 0:
            out.append(math.inf)
            continue
        other = min((math.dist(tr[best_i], row) for row, rc in zip(tr, tc, strict=True) if rc != c),
                    default=math.inf)
        out.append(best / other)
    return np.array(out)


def naive_mdsa(tr, tc, te, ec):
    """Per input: squared Mahalanobis distance to its class mean, with the pseudo-inverse of
    the biased (maximum-likelihood) covariance."""
    tr = tr.astype(np.float64)
    out = []
    for a, c in zip(te.astype(np.float64), ec, strict=True):
        x = tr[tc == c]
        if len(x) == 0:
            out.append(math.inf)
            continue
        mu = x.mean(axis=0)
        cov = sum(np.outer(r - mu, r - mu) for r in x) / len(x)
        d = a - mu
        out.append(float(d @ np.linalg.pinv(cov, hermitian=True) @ d))
    return np.array(out)


def scipy_lsa(tr, tc, te, ec, kept_by_class=None):
    """-logpdf of SciPy's gaussian_kde over each class's ATs (on the given columns)."""
    from scipy.stats import gaussian_kde

    out = np.empty(len(te))
    for c in np.unique(ec):
        cols = slice(None) if kept_by_class is None else kept_by_class[c]
        kde = gaussian_kde(tr[tc == c][:, cols].astype(np.float64).T)
        out[ec == c] = -kde.logpdf(te[ec == c][:, cols].astype(np.float64).T)
    return out


# --------------------------------------------------------------------------- naive loops


@pytest.mark.float_sensitive
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dsa_equals_naive_loop(seed):
    """A ratio of two float64 distances, each a sum over the 6 units (their errors add: 12 terms)."""
    tr, tc, te, ec = blobs(seed)
    assert_close_two_ways(state(tr, tc).dsa(te, ec), naive_dsa(tr, tc, te, ec), n=6 + 6, dtype=torch.float64)


@pytest.mark.parametrize("seed", [0, 1])
def test_mdsa_equals_naive_loop(seed):
    tr, tc, te, ec = blobs(seed)
    np.testing.assert_allclose(state(tr, tc).mdsa(te, ec), naive_mdsa(tr, tc, te, ec), rtol=1e-9)


def test_mdsa_with_a_rank_deficient_class_uses_the_pseudo_inverse():
    tr, tc, te, ec = blobs(3, n=30, m=12, k=2)  # 15 ATs per class in 12 dimensions, and a zero column
    tr[:, 4] = 0
    tr[tc == 1, 7] = tr[tc == 1, 2] * 2
    np.testing.assert_allclose(state(tr, tc).mdsa(te, ec), naive_mdsa(tr, tc, te, ec), rtol=1e-7)


@pytest.mark.parametrize("seed", [0, 1])
def test_lsa_equals_scipy_gaussian_kde(seed):
    tr, tc, te, ec = blobs(seed)
    mine = state(tr, tc, var_threshold=None).lsa(te, ec)
    np.testing.assert_allclose(mine, scipy_lsa(tr, tc, te, ec), rtol=1e-10)


def test_lsa_stays_finite_in_high_dimension_where_a_density_underflows():
    dnn_tip = pytest.importorskip("dnn_tip")
    tr, tc, te, ec = blobs(4, n=300, m=40, k=2, spread=0.3)
    te = te * 3  # far from the training data: a density below the smallest float
    mine = state(tr, tc, var_threshold=None).lsa(te, ec)
    assert np.isfinite(mine).all()
    np.testing.assert_allclose(mine, scipy_lsa(tr, tc, te, ec), rtol=1e-10)
    theirs = _tip_lsa(dnn_tip, tr, tc, te, ec, max_features=40)
    assert np.isinf(theirs).any()  # -log(0): what ours avoids
    finite = np.isfinite(theirs)
    np.testing.assert_allclose(mine[finite], theirs[finite], rtol=1e-5)


# --------------------------------------------------------------------------- dnn-tip


def _tip_lsa(dnn_tip, tr, tc, te, ec, **kw):
    from dnn_tip.surprise import LSA, MultiModalSA

    with warnings.catch_warnings(), np.errstate(divide="ignore"):
        warnings.simplefilter("ignore")  # its SciPy-version warning
        return MultiModalSA.build_by_class(tr, tc, lambda a, p: LSA(a, **kw))(te, ec)


@pytest.fixture(scope="module")
def tip():
    return pytest.importorskip("dnn_tip")


@pytest.mark.parametrize("seed", [0, 5])
def test_dsa_equals_dnn_tip(tip, seed):
    from dnn_tip.surprise import DSA

    tr, tc, te, ec = blobs(seed, n=400, m=10, k=4, test=40)
    theirs = DSA(tr, tc, badge_size=40)(te, ec)
    np.testing.assert_allclose(state(tr, tc).dsa(te, ec), theirs, rtol=1e-5)


def test_mdsa_equals_dnn_tip(tip):
    from dnn_tip.surprise import MDSA, MultiModalSA

    tr, tc, te, ec = blobs(6, n=400, m=10, k=4, test=120)
    theirs = MultiModalSA.build_by_class(tr, tc, lambda a, p: MDSA(a))(te, ec)
    np.testing.assert_allclose(state(tr, tc).mdsa(te, ec), theirs, rtol=1e-5)


@pytest.mark.parametrize("k", [3, 8])
def test_lsa_max_features_equals_dnn_tip(tip, k):
    tr, tc, te, ec = blobs(7, n=400, m=8, k=3, test=90)  # distinct variances: no tie in the cut
    theirs = _tip_lsa(tip, tr, tc, te, ec, max_features=k)
    mine = state(tr, tc, var_threshold=None, max_features=k).lsa(te, ec)
    np.testing.assert_allclose(mine, theirs, rtol=1e-5)


def test_lsa_var_threshold_equals_dnn_tip(tip):
    tr, tc, te, ec = blobs(8, n=300, m=7, k=3)
    tr[:, 2] = 0.25                      # constant everywhere
    tr[tc == 1, 5] = 1.0                 # constant within class 1 only
    theirs = _tip_lsa(tip, tr, tc, te, ec, var_threshold=1e-5, max_features=None)
    mine = state(tr, tc, var_threshold=1e-5).lsa(te, ec)
    np.testing.assert_allclose(mine, theirs, rtol=1e-5)


# --------------------------------------------------------------------------- numerical traps


def test_constant_neurons_are_dropped_by_kims_threshold():
    tr, tc, te, ec = blobs(9, m=5)
    tr[:, 1] = 3.0
    tr[tc == 2, 3] = tr[tc == 2, 3] * 1e-4  # variance ~1e-8 within class 2: below 1e-5
    s = state(tr, tc)  # var_threshold=1e-5, Kim et al.'s
    assert s._kde(0).kept.tolist() == [0, 2, 3, 4]
    assert s._kde(2).kept.tolist() == [0, 2, 4]
    kept = {0: [0, 2, 3, 4], 1: [0, 2, 3, 4], 2: [0, 2, 4]}
    np.testing.assert_allclose(s.lsa(te, ec), scipy_lsa(tr, tc, te, ec, kept), rtol=1e-10)


@pytest.mark.parametrize("make", ["duplicate", "double", "sum"])
def test_collinear_neuron_is_dropped_and_equals_a_kde_without_it(make):
    """Exactly collinear columns make the covariance singular without failing the Cholesky
    factorisation (the pivot is ~1e-16); the column is dropped all the same."""
    tr, tc, te, ec = blobs(10, m=5)
    if make == "duplicate":
        tr[:, 3] = tr[:, 1]
    elif make == "double":
        tr[:, 3] = 2 * tr[:, 1]
    else:
        tr[:, 3] = tr[:, 1] + tr[:, 2]
    s = state(tr, tc)
    for c in range(3):
        assert s._kde(c).kept.tolist() == [0, 1, 2, 4]
    kept = dict.fromkeys(range(3), [0, 1, 2, 4])
    mine = s.lsa(te, ec)
    np.testing.assert_allclose(mine, scipy_lsa(tr, tc, te, ec, kept), rtol=1e-10)
    assert (mine > 0).all()


def test_too_few_ats_for_the_dimension_keeps_a_full_rank_subset():
    tr, tc, te, ec = blobs(11, n=16, m=12, k=2)  # 8 ATs per class: rank 7 at most
    s = state(tr, tc)
    for c in range(2):
        kde = s._kde(c)
        assert len(kde.kept) == 7
        x = tr[tc == c][:, kde.kept].astype(np.float64)
        assert np.linalg.matrix_rank(np.cov(x.T)) == 7
    kept = {c: s._kde(c).kept for c in range(2)}
    np.testing.assert_allclose(s.lsa(te, ec), scipy_lsa(tr, tc, te, ec, kept), rtol=1e-8)


def test_a_class_without_training_ats_scores_inf():
    tr, tc, te, _ = blobs(12, k=3)
    s = state(tr, tc, num_classes=5)
    ec = np.array([3, 4, 0, 3])
    for kind in ("lsa", "dsa", "mdsa"):
        out = s.score(kind, te[:4], ec)
        assert np.isinf(out[[0, 1, 3]]).all(), kind
        assert np.isfinite(out[2]), kind
        # a class beyond the model's outputs (or negative) is unseen as well
        assert np.isinf(s.score(kind, te[:2], np.array([7, -1]))).all(), kind


def test_a_class_with_one_at():
    tr, tc, te, ec = blobs(13, k=3)
    tc = tc.copy()
    lone = int(np.flatnonzero(tc == 2)[0])
    tc[(tc == 2) & (np.arange(len(tc)) != lone)] = 1
    s = state(tr, tc)
    two = np.full(5, 2)
    assert np.isinf(s.lsa(te[:5], two)).all()       # no KDE from one AT
    assert (s.mdsa(te[:5], two) == 0).all()         # a zero covariance: pinv 0, distance 0 (finite)
    np.testing.assert_allclose(s.mdsa(te[:5], two), naive_mdsa(tr, tc, te[:5], two))
    dsa = s.dsa(te[:5], two)                        # the one AT is every input's neighbour
    np.testing.assert_allclose(dsa, naive_dsa(tr, tc, te[:5], two), rtol=1e-12)


def test_mdsa_of_a_one_at_class_equals_dnn_tip(tip):
    from dnn_tip.surprise import MDSA, MultiModalSA

    tr, tc, te, _ = blobs(13, k=3)
    tc = np.where(tc == 2, 1, tc)
    tc[0] = 2
    two = np.full(5, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scikit-learn: "Only one sample available"
        theirs = MultiModalSA.build_by_class(tr, tc, lambda a, p: MDSA(a))(te[:5], two)
    np.testing.assert_array_equal(state(tr, tc).mdsa(te[:5], two), theirs)


@pytest.mark.parametrize("var_threshold", [1e-5, None])
def test_a_class_where_no_neuron_varies_has_lsa_zero(var_threshold):
    tr, tc, te, ec = blobs(14, k=2)
    tr[tc == 1] = tr[tc == 1][0]
    s = state(tr, tc, var_threshold=var_threshold)
    out = s.lsa(te, ec)
    assert (out[ec == 1] == 0.0).all()
    assert np.isfinite(out[ec == 0]).all()
    assert (out[ec == 0] != 0).all()


def test_dsa_ties_go_to_the_lower_training_index():
    # class 0 at -1 and +1, class 1 at -4, 4.5 and -0.5 (the mean is 0, so the float32 search
    # sees the input at 0 exactly as near to both class-0 ATs); dist_b depends on the choice
    tr = np.array([[-1.0], [1.0], [-4.0], [4.5], [-0.5]])
    tc = np.array([0, 0, 1, 1, 1])
    te = np.array([[0.0]])
    assert state(tr, tc).dsa(te, [0]).tolist() == [1 / 0.5]          # neighbour -1 (index 0)
    swapped = state(tr[[1, 0, 2, 3, 4]], tc)
    assert swapped.dsa(te, [0]).tolist() == [1 / 1.5]                # neighbour +1, now index 0
    np.testing.assert_array_equal(naive_dsa(tr, tc, te, np.array([0])), [1 / 0.5])


def test_dsa_near_ties_are_decided_by_the_float32_search():
    """A tie in exact arithmetic that the centring (on the training mean, in float32) rounds
    apart is decided by the rounded distances: either neighbour may be taken."""
    tr = np.array([[-1.0], [1.0], [5.0]])
    out = state(tr, [0, 0, 1]).dsa(np.array([[0.0]]), [0]).tolist()
    assert out in ([1 / 6], [1 / 4])


def test_duplicate_training_ats_are_deterministic():
    tr, tc, te, ec = blobs(15)
    tr2 = np.concatenate([tr, tr[::-1]])
    tc2 = np.concatenate([tc, tc[::-1]])
    s = state(tr2, tc2)
    first = s.dsa(te, ec)
    np.testing.assert_array_equal(first, state(tr2, tc2).dsa(te, ec))
    np.testing.assert_allclose(first, state(tr, tc).dsa(te, ec), rtol=1e-12)
    np.testing.assert_allclose(first, naive_dsa(tr2, tc2, te, ec), rtol=1e-12)


def test_dsa_when_dist_b_is_zero():
    """A same-class AT that coincides with another class's: ``dist_b`` is 0, so DSA is ``inf``
    for an input away from it and ``NaN`` (0/0) for an input on it -- dnn-tip's arithmetic
    as well; a NaN sorts last in a priority order and covers no surprise-coverage bucket."""
    tr = np.array([[0.0, 0.0], [0.0, 0.0], [3.0, 0.0], [9.0, 9.0]])
    tc = np.array([0, 1, 0, 1])
    s = state(tr, tc)
    out = s.dsa(np.array([[0.5, 0.0], [0.0, 0.0], [2.5, 0.0]]), [0, 0, 0])
    assert out[0] == math.inf
    assert math.isnan(out[1])
    assert out[2] == pytest.approx(0.5 / math.dist((3, 0), (0, 0)))
    assert not surprise_coverage(out[:2], upper=10.0).any()
    assert priority_order(out, ascending=False).tolist() == [0, 2, 1]


def test_dsa_dist_b_zero_matches_dnn_tip(tip):
    from dnn_tip.surprise import DSA

    tr = np.array([[0.0, 0.0], [0.0, 0.0], [3.0, 0.0], [9.0, 9.0]], dtype=np.float32)
    tc = np.array([0, 1, 0, 1])
    te = np.array([[0.5, 0.0], [0.0, 0.0]], dtype=np.float32)
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = DSA(tr, tc)(te, np.array([0, 0]))
    np.testing.assert_array_equal(state(tr, tc).dsa(te, [0, 0]), theirs)


def test_bad_batches_are_refused():
    s = state(*blobs(16)[:2])
    with pytest.raises(DeepFaultError, match=r"must be \(N, 6\)"):
        s.dsa(np.zeros((2, 5)), [0, 0])
    with pytest.raises(DeepFaultError, match="NaN or infinite"):
        s.lsa(np.full((1, 6), np.nan), [0])
    with pytest.raises(DeepFaultError, match="one per AT"):
        s.mdsa(np.zeros((2, 6)), [0])
    with pytest.raises(DeepFaultError, match="unknown surprise adequacy 'kde'"):
        s.score("kde", np.zeros((1, 6)), [0])
    assert s.dsa(np.zeros((0, 6)), np.zeros(0)).shape == (0,)


def test_parse_kinds():
    assert parse_kinds("all") == ("lsa", "dsa", "mdsa")
    assert parse_kinds("dsa, lsa,dsa") == ("dsa", "lsa")
    for bad in ("", "dsa,kde", ["nope"]):
        with pytest.raises(DeepFaultError, match="unknown surprise adequacy"):
            parse_kinds(bad)


@pytest.mark.parametrize("kw", [{"var_threshold": -1.0}, {"var_threshold": math.nan}, {"max_features": 0},
                                {"max_features": True}, {"grouping": "clusters"}])
def test_bad_settings_are_refused(kw):
    with pytest.raises(DeepFaultError):
        state(np.zeros((2, 2)), [0, 1], **kw)


# --------------------------------------------------------------------------- blocking


@pytest.mark.float_sensitive
@pytest.mark.parametrize("block", [7, 64, 1000])
def test_results_do_not_depend_on_the_block_size(monkeypatch, block):
    """Blocks regroup the float64 sums over the 90 training rows (LSA's density) and the 5 units
    (the distances); LSA and MDSA's whitening stretches their rounding by surprise_condition."""
    tr, tc, te, ec = blobs(17, n=90, m=5, test=23)
    want = {k: state(tr, tc).score(k, te, ec) for k in ("lsa", "dsa", "mdsa")}
    monkeypatch.setattr(sa_mod, "BLOCK_ELEMENTS", block)
    for kind, w in want.items():
        condition = 1.0 if kind == "dsa" else surprise_condition(tr, tc)
        assert_close_two_ways(state(tr, tc).score(kind, te, ec), w, n=90 + 5, dtype=torch.float64,
                              condition=condition, err_msg=kind)


def test_no_test_by_training_matrix_is_built(monkeypatch):
    """500 inputs against 3,000 training ATs with blocks of 4,096 pairs: no ``addmm`` output
    (the distance or kernel blocks) is larger than a block, let alone 500 x 3,000."""
    rng = np.random.default_rng(18)
    tr = rng.normal(size=(3000, 8)).astype(np.float32)
    tc = np.arange(3000) % 2
    te = rng.normal(size=(500, 8)).astype(np.float32)
    ec = np.arange(500) % 2
    block = 4096
    monkeypatch.setattr(sa_mod, "BLOCK_ELEMENTS", block)
    largest = [0]
    real = torch.addmm

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        largest[0] = max(largest[0], out.numel())
        return out

    monkeypatch.setattr(torch, "addmm", spy)
    s = state(tr, tc)
    dsa = s.dsa(te, ec)
    assert 0 < largest[0] <= block
    s.lsa(te, ec)
    assert 0 < largest[0] <= block
    monkeypatch.setattr(torch, "addmm", real)
    np.testing.assert_allclose(dsa[:5], naive_dsa(tr, tc, te[:5], ec[:5]), rtol=1e-12)


# --------------------------------------------------------------------------- properties


@pytest.mark.float_sensitive
@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 10**6))
def test_scores_are_invariant_under_a_permutation_of_the_training_rows(seed, perm_seed):
    """Permuted rows reorder the float64 sums over the 60 training rows (a density, a covariance)
    and over the 3 units; LSA and MDSA's whitening stretches their rounding by surprise_condition."""
    tr, tc, te, ec = blobs(seed % 1000, n=60, m=3, k=3, test=12)
    perm = np.random.default_rng(perm_seed).permutation(len(tr))
    a, b = state(tr, tc, var_threshold=None), state(tr[perm], tc[perm], var_threshold=None)
    for kind in ("lsa", "dsa", "mdsa"):  # continuous random ATs: no tie to break
        condition = 1.0 if kind == "dsa" else surprise_condition(tr, tc)
        assert_close_two_ways(b.score(kind, te, ec), a.score(kind, te, ec), n=60 + 3, dtype=torch.float64,
                              condition=condition, err_msg=kind)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_scores_are_nonnegative_and_dsa_of_a_training_at_is_zero(seed):
    tr, tc, te, ec = blobs(seed % 1000, n=45, m=3, k=3, test=10)
    s = state(tr, tc)
    assert (s.dsa(te, ec) >= 0).all()
    assert (s.mdsa(te, ec) >= 0).all()
    assert (s.dsa(tr[:10], tc[:10]) == 0).all()


# --------------------------------------------------------------------------- the model-level API


@pytest.fixture(scope="module")
def model_and_data():
    model = chain_model(0, classes=3, widths=(8, 6, 5))
    x, y = random_data(400, (4,), 3, seed=1, lo=-2, hi=2)
    return model, torch.from_numpy(x), torch.from_numpy(y)


def _predictions(model, x):
    with torch.no_grad():
        return model(x).argmax(dim=1).numpy()


def test_fit_surprise_defaults_to_the_deepest_layer_before_the_logits(model_and_data):
    model, x, _ = model_and_data
    s = fit_surprise(model, x)
    assert s.layers == ("fc3",)
    assert s.sizes == (5,)
    assert s.num_inputs == 400
    assert s.num_classes == 3
    assert s.grouping == "predictions"
    assert s.selection == ("fc3",)  # the layer the default resolved to
    with torch.no_grad():
        fc3 = model[:5](x).numpy()  # fc1, act1, fc2, act2, fc3 (the unit's value before its ReLU)
    np.testing.assert_allclose(s.ats, fc3, rtol=1e-6)
    np.testing.assert_array_equal(s.classes, _predictions(model, x))


def test_classes_from_labels_or_predictions(model_and_data):
    model, x, y = model_and_data
    by_pred = fit_surprise(model, x, layers=["fc2"])
    by_label = fit_surprise(model, x, y, layers=["fc2"], classes="labels")
    np.testing.assert_array_equal(by_label.classes, y.numpy())
    np.testing.assert_array_equal(by_pred.classes, _predictions(model, x))
    np.testing.assert_array_equal(by_label.ats, by_pred.ats)
    assert by_label.grouping == "labels"
    te = torch.from_numpy(random_data(50, (4,), 3, seed=2, lo=-2, hi=2)[0])
    for s in (by_pred, by_label):
        got = surprise_scores(model, te, s, kinds="all")
        with torch.no_grad():
            ats = model[:3](te).numpy()
        pred = _predictions(model, te)
        np.testing.assert_array_equal(got.predictions, pred)
        ref = state(s.ats, s.classes, num_classes=3)
        for kind in ("lsa", "dsa", "mdsa"):
            np.testing.assert_allclose(got[kind], ref.score(kind, ats, pred), rtol=1e-9, err_msg=kind)
    with pytest.raises(DeepFaultError, match="needs labels"):
        fit_surprise(model, x, classes="labels")


@pytest.mark.float_sensitive
def test_scores_do_not_depend_on_the_batch_size(model_and_data):
    """The forward pass rounds its float32 sums differently by batch size (BLAS blocking): fc3's
    traces went through fc1 (4 + 1 terms), fc2 (8 + 1) and fc3 (6 + 1), and move within the
    tolerance of 21 float32 terms; the scores, float64 over the traces, move with them (LSA's and
    MDSA's by the whitening's surprise_condition)."""
    model, x, _ = model_and_data
    s = fit_surprise(model, x, batch_size=400)
    s7 = fit_surprise(model, x, batch_size=7)
    assert_close_two_ways(s7.ats, s.ats, n=21, dtype=torch.float32, err_msg="ats")
    np.testing.assert_array_equal(s.classes, s7.classes)  # no two top logits that close (below)
    te = torch.from_numpy(random_data(60, (4,), 3, seed=3, lo=-2, hi=2)[0])
    whole = surprise_scores(model, te, s, kinds="all", batch_size=60)
    with torch.no_grad():
        ats = model[:5](te)
        for inputs in (x, te):  # the predictions are exact: no two top logits within tolerance
            top = model(inputs).topk(2, dim=1).values.double()
            assert (top[:, 0] - top[:, 1]).min() > two_way_rtol(27, torch.float32) * top.abs().max()
    pred = whole.predictions
    for bs in (1, 13):
        part = surprise_scores(model, te, s, kinds="all", batch_size=bs)
        np.testing.assert_array_equal(part.predictions, pred)
        for kind in whole:  # the same ATs scored in pieces: float64 sums over the 400 training
            # rows (a density) or the 5 units (a distance), grouped by piece
            pieces = np.concatenate([s.score(kind, ats[i : i + bs], pred[i : i + bs])
                                     for i in range(0, len(te), bs)])
            assert_close_two_ways(pieces, whole[kind], n=len(x) + 5, dtype=torch.float64, err_msg=kind)
            # end to end, the ATs differ by float32 roundings between forward batch sizes
            condition = 1.0 if kind == "dsa" else surprise_condition(s.ats, s.classes)
            assert_close_two_ways(part[kind], whole[kind], n=21, dtype=torch.float32, condition=condition,
                                  err_msg=kind)


def test_another_model_or_other_layers_are_refused(model_and_data):
    model, x, _ = model_and_data
    s = fit_surprise(model, x, layers=["fc2"])
    other = chain_model(1, classes=3, widths=(8, 6, 5))
    with pytest.raises(DeepFaultError, match="fitted for another model"):
        surprise_scores(other, x[:5], s)
    wrong_size = dataclasses.replace(s, sizes=(7,), ats=np.zeros((400, 7), np.float32))
    with pytest.raises(DeepFaultError, match="fitted for other layers"):
        surprise_scores(model, x[:5], wrong_size)
    wrong_name = dataclasses.replace(s, layers=("fc1",), sizes=(6,))
    with pytest.raises(DeepFaultError, match="other layers"):
        surprise_scores(model, x[:5], wrong_name)
    with pytest.raises(DeepFaultError):
        fit_surprise(model, x, layers=["nope"])


def test_one_class_only_is_refused(model_and_data):
    model, x, y = model_and_data
    with pytest.raises(DeepFaultError, match="all 400 inputs are in one class"):
        fit_surprise(model, x, torch.zeros_like(y), classes="labels")
    biased = chain_model(0, classes=3, widths=(8, 6, 5))
    with torch.no_grad():
        biased.logits.bias.copy_(torch.tensor([0.0, 1e6, 0.0]))
    with pytest.raises(DeepFaultError, match="in one class .1."):
        fit_surprise(biased, x)
    with pytest.raises(DeepFaultError, match="no inputs"):
        fit_surprise(model, x[:0])
    with pytest.raises(DeepFaultError, match="labels go up to 5"):
        fit_surprise(model, x, torch.full_like(y, 5), classes="labels")


def test_to_dict_summarises_without_arrays(model_and_data):
    model, x, _ = model_and_data
    d = fit_surprise(model, x, layers=["fc2"], max_features=4, var_threshold=None).to_dict()
    assert d["format"] == SURPRISE_FORMAT
    assert d["count"] == 400
    assert d["layers"] == [{"name": "fc2", "size": 6}]
    assert sum(d["class_counts"]) == 400
    assert d["max_features"] == 4
    assert d["var_threshold"] is None


# --------------------------------------------------------------------------- coverage


@pytest.mark.parametrize(("sections", "upper"), [(10, 2.0), (1, 1.0), (7, 0.3), (100, 5.0)])
def test_surprise_coverage_equals_dnn_tip(tip, sections, upper):
    from dnn_tip.surprise import SurpriseCoverageMapper

    rng = np.random.default_rng(sections)
    edges = np.linspace(0, upper, sections + 1)
    special = [np.inf, -np.inf, np.nan, upper, 0.0]
    values = np.concatenate([rng.uniform(-0.5, upper * 1.3, 40), edges, special])
    theirs = SurpriseCoverageMapper(sections, upper).get_coverage_profile(values).any(axis=0)
    np.testing.assert_array_equal(surprise_coverage(values, upper=upper, sections=sections), theirs)
    sparse = values[:3]
    theirs = SurpriseCoverageMapper(sections, upper).get_coverage_profile(sparse).any(axis=0)
    np.testing.assert_array_equal(surprise_coverage(sparse, upper=upper, sections=sections), theirs)


def test_surprise_coverage_refuses_bad_bounds():
    for upper in (0, -1.0, math.inf, math.nan, "2"):
        with pytest.raises(DeepFaultError, match="upper bound"):
            surprise_coverage(np.zeros(3), upper=upper)
    for sections in (0, 2.5, True):
        with pytest.raises(DeepFaultError, match="sections"):
            surprise_coverage(np.zeros(3), upper=1.0, sections=sections)
    assert not surprise_coverage(np.zeros(0), upper=1.0).any()


# --------------------------------------------------------------------------- the state file


def test_save_load_round_trip(tmp_path, model_and_data):
    model, x, y = model_and_data
    te = x[:40]
    for kw in ({}, {"classes": "labels", "var_threshold": None, "max_features": 3, "layers": ["fc1", "fc2"]},
               {"layers": "fc2"}):
        s = fit_surprise(model, x, y, **kw)
        back = load_surprise(save_surprise(s, tmp_path / "sa.npz"))
        for f in dataclasses.fields(Surprise):
            if f.name != "_cache":
                a, b = getattr(s, f.name), getattr(back, f.name)
                if isinstance(a, np.ndarray):
                    assert a.dtype == b.dtype
                    np.testing.assert_array_equal(a, b)
                else:
                    assert a == b, f.name
        want = surprise_scores(model, te, s, kinds="all")
        got = surprise_scores(model, te, back, kinds="all")
        for kind in want:
            np.testing.assert_array_equal(got[kind], want[kind])


@pytest.fixture
def saved(tmp_path, model_and_data):
    model, x, _ = model_and_data
    return save_surprise(fit_surprise(model, x, layers=["fc2"]), tmp_path / "sa.npz")


def _arrays(path):
    with np.load(path, allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


def _rewrite(path, **changes):
    a = _arrays(path)
    for k, v in changes.items():
        if v is None:
            del a[k]
        else:
            a[k] = v
    with open(path, "wb") as fh:
        np.savez(fh, **a)
    return path


def _one_line_with_fix(err):
    msg = str(err.value)
    assert "\n" not in msg, msg
    assert "fit one with 'deepfault coverage surprise'" in msg, msg


def test_missing_file(tmp_path):
    with pytest.raises(DeepFaultError, match="does not exist") as err:
        load_surprise(tmp_path / "none.npz")
    _one_line_with_fix(err)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "pickle"])
def test_unreadable_files(saved, damage):
    data = saved.read_bytes()
    if damage == "garbage":
        saved.write_bytes(b"not a zip file at all" * 10)
    elif damage == "truncated":
        saved.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        saved.write_bytes(b"")
    else:  # an object array: refused without unpickling
        with open(saved, "wb") as fh:
            np.savez(fh, format=np.array(SURPRISE_FORMAT), layers=np.array([object()], dtype=object))
    with pytest.raises(DeepFaultError, match="not a readable surprise state|is not a deepfault") as err:
        load_surprise(saved)
    _one_line_with_fix(err)


def test_a_corrupted_member_is_refused(saved):
    with zipfile.ZipFile(saved) as z:
        members = {n: z.read(n) for n in z.namelist()}
    raw = bytearray(members["ats.npy"])
    raw[-8:] = b"\xff" * 8  # NaN bits in the last values
    members["ats.npy"] = bytes(raw)
    with zipfile.ZipFile(saved, "w") as z:
        for n, b in members.items():
            z.writestr(n, b)
    with pytest.raises(DeepFaultError, match="damaged surprise state .*NaN") as err:
        load_surprise(saved)
    _one_line_with_fix(err)


@pytest.mark.parametrize(("changes", "match"), [
    ({"format": np.array("deepfault-profile/1")}, "not a deepfault surprise state"),
    ({"format": None}, "not a deepfault surprise state"),
    ({"classes": None}, "damaged"),
    ({"ats": np.zeros((3, 6), np.float32)}, "damaged"),
    ({"ats": np.zeros((400, 5), np.float32)}, "damaged"),
    ({"ats": np.zeros((400,), np.float32)}, "damaged"),
    ({"ats": np.zeros((400, 6), np.int64)}, "damaged"),
    ({"classes": np.full(400, 9)}, "damaged"),
    ({"classes": np.full(400, -1)}, "damaged"),
    ({"num_classes": np.array(1)}, "damaged"),
    ({"sizes": np.array([0])}, "damaged"),
    ({"layers": np.array(["a", "b"])}, "damaged"),
    ({"transform": np.array("sigmoid")}, "damaged"),
    ({"grouping": np.array("clusters")}, "damaged"),
    ({"var_threshold": np.array(-1.0)}, "damaged"),
    ({"max_features": np.array(-3)}, "damaged"),
    ({"selection_kind": np.array("regex")}, "damaged"),
    ({"model_hash": np.array(3)}, "damaged"),
])
def test_damaged_fields_are_refused(saved, changes, match):
    with pytest.raises(DeepFaultError, match=match) as err:
        load_surprise(_rewrite(saved, **changes))
    _one_line_with_fix(err)


def test_a_loaded_state_still_checks_the_model(saved, model_and_data):
    model, x, _ = model_and_data
    s = load_surprise(saved)
    surprise_scores(model, x[:3], s)
    with pytest.raises(DeepFaultError, match="another model"):
        surprise_scores(chain_model(2, classes=3, widths=(8, 6, 5)), x[:3], s)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_scores_on_the_device_equal_the_cpus():
    tr, tc, te, ec = blobs(19, n=300, m=6, k=3, test=50)
    s = state(tr, tc)
    for kind in ("lsa", "dsa", "mdsa"):
        on_gpu = s.score(kind, torch.from_numpy(te).cuda(), ec)
        np.testing.assert_allclose(on_gpu, state(tr, tc).score(kind, te, ec), rtol=1e-9, err_msg=kind)
