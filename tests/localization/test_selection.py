import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepfault import (
    DeepFaultError,
    localize,
    random_baseline,
    rank,
    select,
    select_neurons,
    uniform_baseline,
)
from helpers.spectra import make_spectrum


def test_tie_break_deeper_layer_then_lower_unit():
    spec = make_spectrum()
    scores = np.array([5, 1, 5, 0, 5, 2, 5, 9, 5.0])  # layers: l0 0-2, l1 3-6, l2 7-8
    order = rank(scores, spec)
    # 9 first; then score 5: l2 unit 1 (index 8), l1 units 1, 3 (4, 6), l0 units 0, 2 (0, 2)
    np.testing.assert_array_equal(order[:6], [7, 8, 4, 6, 0, 2])
    sel = select_neurons(spec, scores, 3, approach="x")
    assert [(n.layer, n.unit) for n in sel.neurons] == [("l2", 0), ("l2", 1), ("l1", 1)]
    assert sel.layer_distribution() == {"l2": 2, "l1": 1}


def test_inf_ranks_above_everything():
    spec = make_spectrum()
    scores = np.zeros(9)
    scores[1], scores[5] = np.inf, 1e300
    assert list(rank(scores, spec)[:2]) == [1, 5]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=9, max_size=9), st.integers(1, 9))
def test_selection_is_a_prefix_of_a_total_order(values, k):
    spec = make_spectrum()
    scores = np.array(values, dtype=float)
    sel = select_neurons(spec, scores, k)
    chosen = sel.indices
    assert len(set(chosen)) == k
    rest = np.setdiff1d(np.arange(9), chosen)
    assert scores[chosen].min() >= (scores[rest].max() if len(rest) else -np.inf)
    np.testing.assert_array_equal(select_neurons(spec, scores, k).indices, chosen)


def test_no_failures_uses_tie_breaking_order():
    spec = make_spectrum(failed=0)
    sel = localize(spec, measure="ochiai", k=3)
    assert sel.no_failures
    assert [(n.layer, n.unit) for n in sel.neurons] == [("l2", 0), ("l2", 1), ("l1", 0)]


@pytest.mark.parametrize("k", [0, -1, 10, 2.5, True])
def test_bad_k(k):
    with pytest.raises(DeepFaultError, match="k"):
        localize(make_spectrum(), measure="ochiai", k=k)


def test_k_too_large_message():
    with pytest.raises(DeepFaultError, match=r"k=10 is larger than the 9 analysed neurons"):
        localize(make_spectrum(), k=10)


def test_random_baseline_avoids_measures_and_follows_their_layers():
    spec = make_spectrum(sizes=(50, 50, 50), seed=3)
    excluded = [localize(spec, measure=m, k=10) for m in ("tarantula", "ochiai", "dstar")]
    taken = {n.index for s in excluded for n in s.neurons}
    weights = {}
    for s in excluded:
        for n in s.neurons:
            weights[n.layer] = weights.get(n.layer, 0) + 1
    counts = {}
    for seed in range(200):
        sel = random_baseline(spec, 10, exclude=excluded, seed=seed)
        assert not taken & set(sel.indices.tolist())
        assert len(set(sel.indices.tolist())) == 10
        for n in sel.neurons:
            counts[n.layer] = counts.get(n.layer, 0) + 1
    for layer in ("l0", "l1", "l2"):
        expected = weights.get(layer, 0) / 30
        assert abs(counts.get(layer, 0) / 2000 - expected) < 0.05, layer


def test_random_baselines_are_seeded():
    spec = make_spectrum(sizes=(30, 30))
    a = select(spec, "random", 5, seed=4)
    b = select(spec, "random", 5, seed=4)
    c = select(spec, "random", 5, seed=5)
    assert a == b or np.array_equal(a.indices, b.indices)
    assert not np.array_equal(a.indices, c.indices)
    u1, u2 = uniform_baseline(spec, 5, seed=1), uniform_baseline(spec, 5, seed=1)
    np.testing.assert_array_equal(u1.indices, u2.indices)
    assert all(n.score is None for n in u1.neurons)


def test_random_baseline_runs_out():
    spec = make_spectrum()  # 9 neurons
    taken = select_neurons(spec, np.arange(9.0), 7)
    assert len(random_baseline(spec, 2, exclude=[taken], seed=0).neurons) == 2
    with pytest.raises(DeepFaultError, match="needs k=3 neurons .* only 2 are left"):
        random_baseline(spec, 3, exclude=[taken], seed=0)


def test_unknown_approach():
    with pytest.raises(DeepFaultError, match=r"unknown approach 'best'; known: .*random, uniform"):
        select(make_spectrum(), "best", 2)
