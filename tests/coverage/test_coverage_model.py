"""Coverage on models: layer-minmax NC on hand-set models worked out on paper, DeepXplore's layer
selection on the zoo's LeNets, measure/rank against the naive loops, growth, ranking."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from deepfault.core.batches import activations
from deepfault.coverage import (
    compute_profile,
    measure_coverage,
    prioritize,
    rank_inputs,
)
from deepfault.coverage import reference as ref
from deepfault.coverage.measure import checkpoints
from deepfault.errors import DeepFaultError
from deepfault.models.zoo import build_model
from helpers.tiny_models import chain_model, conv_model, has_hooks


def paper_model() -> nn.Sequential:
    """x (N, 2) -> fc1 = (x0, x1, x0 + x1) -> ReLU -> fc2 = 0 (a constant layer) -> logits."""
    fc1, fc2, logits = nn.Linear(2, 3), nn.Linear(3, 2), nn.Linear(2, 2)
    with torch.no_grad():
        fc1.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
        fc1.bias.zero_()
        fc2.weight.zero_()
        fc2.bias.zero_()
        logits.weight.copy_(torch.eye(2))
        logits.bias.zero_()
    return nn.Sequential(OrderedDict(fc1=fc1, act=nn.ReLU(), fc2=fc2, logits=logits))


def test_layer_minmax_nc_on_paper():
    """x = (1, 2): fc1 = (1, 2, 3) -> scaled (0, .5, 1); x = (2, 1): (2, 1, 3) -> (.5, 0, 1).
    fc2 is constant: every unit scales to 0, never NaN, and is never covered (0 > t fails).

    | t | covered fc1 units | NC |
    | 0 | {0, 1, 2} | 3/5 |
    | 0.25 | {0, 1, 2} | 3/5 |
    | 0.5 | {2} (0.5 > 0.5 fails) | 1/5 |
    | 0.75 | {2} | 1/5 |
    """
    model = paper_model()
    x = torch.tensor([[1.0, 2.0], [2.0, 1.0]])
    layout, values = activations(model, x, layers=["fc1", "fc2"], transform="layer-minmax")
    torch.testing.assert_close(values, torch.tensor([[0.0, 0.5, 1.0, 0.0, 0.0], [0.5, 0.0, 1.0, 0.0, 0.0]]))
    report = measure_coverage(model, x, threshold=[0, 0.25, 0.5, 0.75], layers=["fc1", "fc2"],
                              transform="layer-minmax")
    got = {r.params["threshold"]: (r.covered, r.total, r.per_layer) for r in report.results}
    assert got == {
        0.0: (3, 5, {"fc1": (3, 3), "fc2": (0, 2)}),
        0.25: (3, 5, {"fc1": (3, 3), "fc2": (0, 2)}),
        0.5: (1, 5, {"fc1": (1, 3), "fc2": (0, 2)}),
        0.75: (1, 5, {"fc1": (1, 3), "fc2": (0, 2)}),
    }
    # only the first input: fc1 unit 0 is at the layer minimum
    first = measure_coverage(model, x[:1], layers=["fc1", "fc2"], transform="layer-minmax")
    assert first.results[0].per_layer == {"fc1": (2, 3), "fc2": (0, 2)}


def test_layer_minmax_of_a_conv_layer_on_paper():
    """conv_model on x = [[0, 1], [2, 3]]: channel 0 = 2x = (0, 2, 4, 6), channel 1 = 1 - x =
    (1, 0, -1, -2). The whole layer spans [-2, 6]: channel 0 scales to (.25, .5, .75, 1), mean
    0.625; channel 1 to (3, 2, 1, 0)/8, mean 0.1875. NC(0.5) = 1/2, NC(0.1) = 2/2."""
    model = conv_model()
    x = torch.tensor([[[[0.0, 1.0], [2.0, 3.0]]]])
    _, values = activations(model, x, layers=["conv"], transform="layer-minmax")
    torch.testing.assert_close(values, torch.tensor([[0.625, 0.1875]]))
    report = measure_coverage(model, x, threshold=[0.1, 0.5], layers=["conv"], transform="layer-minmax")
    assert [r.covered for r in report.results] == [2, 1]


@pytest.mark.parametrize(("arch", "neurons"), [("lenet1", 52), ("lenet4", 148), ("lenet5", 268)])
def test_deepxplore_selection_neuron_counts(arch, neurons):
    """DeepXplore's LeNets: convolutions, poolings, logits and softmax."""
    model = build_model(arch)
    x = torch.rand(3, 1, 28, 28)
    report = measure_coverage(model, x, layers="deepxplore", transform="layer-minmax")
    assert report.layout.num_neurons == neurons
    assert report.layout.names[-1] == "softmax(output)"
    assert not has_hooks(model)


def _naive(model, x, **kw):
    layout, values = activations(model, x, layers=kw.get("layers"), transform=kw.get("transform", "raw"))
    return layout, values.tolist()


def test_measure_matches_the_naive_loops_on_a_model():
    model = chain_model()
    rng = np.random.default_rng(0)
    train = torch.from_numpy(rng.normal(0, 1, (80, 4)).astype(np.float32))
    test = torch.from_numpy(rng.normal(0, 1.5, (50, 4)).astype(np.float32))
    profile = compute_profile(model, train)
    report = measure_coverage(model, test, criteria="all", threshold=[0, 1], sections=5, top_k=2,
                              scale=0.5, profile=profile, batch_size=7)
    layout, values = _naive(model, test)
    layers = [(la.offset, la.size) for la in layout.layers]
    m = layout.num_neurons
    expect = {
        "nc(threshold=0)": (ref.nc_sets(values, 0.0), m),
        "nc(threshold=1)": (ref.nc_sets(values, 1.0), m),
        "nac(threshold=0)": (ref.nc_sets(values, 0.0), m),
        "nac(threshold=1)": (ref.nc_sets(values, 1.0), m),
        "kmnc(sections=5)": (ref.kmnc_sets(values, profile.low, profile.high, 5), 5 * m),
        "nbc(scale=0.5)": (ref.nbc_sets(values, profile.low, profile.high, profile.std, 0.5), 2 * m),
        "snac(scale=0.5)": (ref.snac_sets(values, profile.high, profile.std, 0.5), m),
        "tknc(top_k=2)": (ref.tknc_sets(values, layers, 2), m),
        "tknp(top_k=2)": (ref.tknp_sets(values, layers, 2), None),
    }
    assert [r.label for r in report.results] == list(expect)
    for r in report.results:
        sets, total = expect[r.label]
        covered, _ = ref.coverage_reference(sets, total)
        assert (r.covered, r.total) == (covered, total), r.label
        # growth: after the first n inputs, at 1, 2, 5, 10, 20, 50
        assert [n for n, _ in report.growth[r.label]] == [1, 2, 5, 10, 20, 50]
        for n, c in report.growth[r.label]:
            assert c == ref.coverage_reference(sets[:n], total)[0]


def test_results_do_not_depend_on_the_batch_size():
    model = chain_model()
    x = torch.from_numpy(np.random.default_rng(1).normal(0, 1, (40, 4)).astype(np.float32))
    a = measure_coverage(model, x, criteria="nc,tknc,tknp", threshold=[0, 0.5], batch_size=3)
    b = measure_coverage(model, x, criteria="nc,tknc,tknp", threshold=[0, 0.5], batch_size=1000)
    assert a.results == b.results
    assert a.growth == b.growth


def test_checkpoints():
    assert checkpoints(1) == [1]
    assert checkpoints(10) == [1, 2, 5, 10]
    assert checkpoints(10000)[-4:] == [1000, 2000, 5000, 10000]
    assert checkpoints(120) == [1, 2, 5, 10, 20, 50, 100, 120]


# --------------------------------------------------------------------------- ranking


@settings(max_examples=80, deadline=None)
@given(sets=st.lists(st.sets(st.integers(0, 11), max_size=6), min_size=0, max_size=12))
def test_prioritize_matches_the_naive_greedy_loop(sets):
    width = max([len(s) for s in sets] + [1])
    items = np.full((len(sets), width), -1, dtype=np.int64)
    for i, s in enumerate(sets):
        items[i, : len(s)] = sorted(s)
    order, greedy = prioritize(items, 12)
    want, want_greedy = ref.greedy_reference(sets)
    assert order.tolist() == want
    assert greedy == want_greedy


def test_an_input_covering_everything_goes_first_and_rank_reports_apfd():
    model = chain_model()
    rng = np.random.default_rng(2)
    x = torch.from_numpy(rng.normal(0, 1, (30, 4)).astype(np.float32))
    with torch.no_grad():
        labels = model(x).argmax(1)
    labels[[3, 17]] = (labels[[3, 17]] + 1) % 3  # two failing inputs
    report = rank_inputs(model, x, labels, criteria="nc,kmnc,tknp", profile=compute_profile(model, x))
    assert report.failing.nonzero()[0].tolist() == [3, 17]
    for r in report.rankings:
        assert sorted(r.order.tolist()) == list(range(30))
        assert r.apfd == pytest.approx(ref.apfd_reference(r.order.tolist(), report.failing.tolist()))
    d = report.to_dict()
    assert d["num_failing"] == 2
    assert d["failing"] == [3, 17]
    assert len(d["rankings"][0]["order"]) == 30
    assert report.rankings[2].total is None  # tknp counts patterns
    assert not has_hooks(model)


def test_bad_input_to_the_api():
    model = chain_model()
    x = torch.rand(5, 4)
    with pytest.raises(DeepFaultError, match=(r"unknown coverage criterion 'ncx'"
                                              r"; did you mean 'nc' or 'nac' or 'nbc'\? \(known:")):
        measure_coverage(model, x, criteria="nc,ncx")
    with pytest.raises(DeepFaultError, match="sections must be an integer >= 1; got 0"):
        measure_coverage(model, x, criteria="tknc", sections=0)
    with pytest.raises(DeepFaultError, match="threshold must be a number; got 'a'"):
        measure_coverage(model, x, threshold=[0, "a"])
    with pytest.raises(DeepFaultError, match="kmnc needs a profile"):
        measure_coverage(model, x, criteria="kmnc")
    with pytest.raises(DeepFaultError, match="cannot take inputs of shape"):
        measure_coverage(model, torch.rand(5, 7))
    with pytest.raises(DeepFaultError, match="unknown transform"):
        measure_coverage(model, x, transform="minmax")
    with pytest.raises(DeepFaultError, match="labels must be a 1-D array"):
        rank_inputs(model, x, [0, 1])
    assert not has_hooks(model)


def test_the_model_is_left_as_it_was():
    model = chain_model().train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    measure_coverage(model, torch.rand(6, 4), criteria="nc,tknc")
    compute_profile(model, torch.rand(6, 4))
    assert model.training
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
