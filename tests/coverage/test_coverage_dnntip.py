"""Against an independent implementation: dnn-tip (PyPI, MIT; a development dependency).

Coverage spec section 4: on the same activation matrices and profile, with held-out inputs (so
no value equals a profile bound) and ``scale`` 0 for NBC/SNAC, the per-input covered sets of
NAC, KMNC, NBC, SNAC and TKNC are identical. dnn-tip differs from the spec only at the bounds,
where its comparisons are ``<=``/``>=`` (NBC, SNAC) and KMNC's last section is open at
``high``; the last test shows those documented differences.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from deepfault.core.batches import activations
from deepfault.coverage import compute_profile, make_criterion, prioritize
from deepfault.coverage import reference as ref
from deepfault.coverage.rank import apfd
from helpers.tiny_models import small_conv_net

dnn_tip = pytest.importorskip("dnn_tip")
from dnn_tip import apfd as tip_apfd  # noqa: E402
from dnn_tip import neuron_coverage as tip  # noqa: E402
from dnn_tip import prioritizers as tip_prio  # noqa: E402


def per_layer(array: np.ndarray, layout) -> list[np.ndarray]:
    return [array[..., la.offset : la.offset + la.size] for la in layout.layers]


@pytest.fixture(scope="module", params=["model", "random"])
def matrices(request):
    """(layout, profile, held-out activations): a small conv net's neurons on random images, or
    plain random matrices with a profile computed from other random rows."""
    if request.param == "model":
        model = small_conv_net()
        rng = np.random.default_rng(1)
        train = torch.from_numpy(rng.uniform(0, 1, (300, 1, 8, 8)).astype(np.float32))
        held = torch.from_numpy(rng.uniform(0, 1, (200, 1, 8, 8)).astype(np.float32))
        profile = compute_profile(model, train, batch_size=64)
        layout, values = activations(model, held)
        return layout, profile, values.numpy()
    from deepfault.core.capture import NeuronLayout
    from deepfault.coverage import Profile, ProfileAccumulator

    layout = NeuronLayout.from_sizes(["a", "b", "c"], [5, 9, 3])
    rng = np.random.default_rng(2)
    train = rng.normal(0, 1, (400, 17)).astype(np.float32)
    acc = ProfileAccumulator()
    acc.update(torch.from_numpy(train))
    profile = Profile(layout.names, (5, 9, 3), "raw", "-", 400, **acc.compute())
    return layout, profile, rng.normal(0, 1.3, (300, 17)).astype(np.float32)


def ours(name, layout, values, **params):
    crit = make_criterion(name, layout, **params)
    return crit.covered_by(torch.from_numpy(values)).numpy()


def test_no_value_equals_a_bound(matrices):
    """The precondition of the comparison (spec section 4)."""
    _, profile, values = matrices
    assert not np.isin(values, np.concatenate([profile.low, profile.high])).any()


@pytest.mark.parametrize("threshold", [0.0, 0.3, -0.2])
def test_nac(matrices, threshold):
    layout, _, values = matrices
    _, theirs = tip.NAC(threshold)(per_layer(values, layout))
    np.testing.assert_array_equal(ours("nac", layout, values, threshold=threshold), theirs)


@pytest.mark.parametrize("sections", [1, 4, 10, 1000])
def test_kmnc(matrices, sections):
    layout, profile, values = matrices
    method = tip.KMNC(per_layer(profile.low, layout), per_layer(profile.high, layout), sections)
    _, theirs = method(per_layer(values, layout))
    mine = ours("kmnc", layout, values, profile=profile, sections=sections)
    np.testing.assert_array_equal(mine, theirs.reshape(len(values), -1))
    assert mine.any()


def test_nbc(matrices):
    layout, profile, values = matrices
    method = tip.NBC(per_layer(profile.low, layout), per_layer(profile.high, layout),
                     per_layer(profile.std, layout), 0.0)
    _, theirs = method(per_layer(values, layout))
    mine = ours("nbc", layout, values, profile=profile, scale=0.0)
    np.testing.assert_array_equal(mine, theirs.reshape(len(values), -1))
    assert mine.any()


def test_snac(matrices):
    layout, profile, values = matrices
    method = tip.SNAC(per_layer(profile.high, layout), per_layer(profile.std, layout), 0.0)
    _, theirs = method(per_layer(values, layout))
    mine = ours("snac", layout, values, profile=profile, scale=0.0)
    np.testing.assert_array_equal(mine, theirs)
    assert mine.any()


@pytest.mark.parametrize("top_k", [1, 2, 3])
def test_tknc(matrices, top_k):
    layout, _, values = matrices
    if any(la.size < top_k for la in layout.layers):
        pytest.skip("dnn-tip's argsort slice needs k <= every layer's size")
    _, theirs = tip.TKNC(top_k)(per_layer(values, layout))
    np.testing.assert_array_equal(ours("tknc", layout, values, top_k=top_k), theirs)


@pytest.mark.parametrize(("name", "params"), [("nac", {"threshold": 0.0}), ("kmnc", {"sections": 10}),
                                         ("tknc", {"top_k": 1})])
def test_ranking_and_apfd_match_dnn_tip(matrices, name, params):
    """dnn-tip's coverage-additional method picks the same inputs in the same order while they add
    coverage; its APFD of our order is ours."""
    layout, profile, values = matrices
    extra = {"profile": profile} if name == "kmnc" else {}
    crit = make_criterion(name, layout, **params, **extra)
    dense = crit.covered_by(torch.from_numpy(values)).numpy()
    items, num = crit.input_items(torch.from_numpy(values))
    order, greedy = prioritize(items, num)
    theirs = list(tip_prio.cam(dense.sum(axis=1), dense.copy()))
    assert order[:greedy].tolist() == [int(i) for i in theirs[:greedy]]
    assert sorted(order.tolist()) == list(range(len(values)))
    failing = np.random.default_rng(3).uniform(size=len(values)) < 0.1
    assert apfd(order, failing) == pytest.approx(tip_apfd.apfd_from_order(failing.astype(int), order))
    assert apfd(order, failing) == pytest.approx(ref.apfd_reference(order.tolist(), failing.tolist()))


def test_documented_differences_at_the_bounds():
    """On a value equal to a bound the spec and dnn-tip differ, as documented: dnn-tip's KMNC
    leaves ``v = high`` uncovered (the spec puts it in the last section) and its NBC/SNAC count
    ``v = low``/``v = high`` as corner cases (the spec's comparisons are strict)."""
    from deepfault.core.capture import NeuronLayout
    from deepfault.coverage import Profile

    layout = NeuronLayout.from_sizes(["a"], [1])
    profile = Profile(("a",), (1,), "raw", "-", 2, np.array([0.0]), np.array([1.0]), np.array([0.5]),
                      np.array([0.5]))
    at = np.array([[0.0], [1.0]], dtype=np.float32)
    _, kmnc = tip.KMNC([profile.low], [profile.high], 4)([at])
    assert not kmnc[1].any()
    assert ours("kmnc", layout, at, profile=profile, sections=4)[1, 3]
    _, nbc = tip.NBC([profile.low], [profile.high], [profile.std], 0.0)([at])
    assert nbc[0, 0, 0]
    assert nbc[1, 0, 1]
    assert not ours("nbc", layout, at, profile=profile).any()
