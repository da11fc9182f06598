"""Streaming profiles: against a two-pass reference, merge and batch-size invariance, the file
format, and refusing a profile made for another model, other layers or another transform."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from deepfault.core.batches import activations
from deepfault.coverage import (
    ProfileAccumulator,
    compute_profile,
    load_profile,
    measure_coverage,
    model_hash,
    rank_inputs,
)
from deepfault.coverage import reference as ref
from deepfault.errors import DeepFaultError
from helpers.float_tolerance import assert_close_two_ways
from helpers.tiny_models import chain_model


def inputs(n, seed=0, features=4):
    return torch.from_numpy(np.random.default_rng(seed).normal(0, 1, (n, features)).astype(np.float32))


@pytest.mark.float_sensitive
@pytest.mark.parametrize("batch_size", [1, 7, 1000])
def test_profile_matches_the_two_pass_reference(batch_size):
    model = chain_model()
    x = inputs(60)
    p = compute_profile(model, x, batch_size=batch_size)
    # the same batch size: a matrix product of one row may round differently from one of many
    layout, values = activations(model, x, batch_size=batch_size)
    want = ref.profile_reference(values.tolist())
    assert p.layers == layout.names
    assert p.sizes == tuple(la.size for la in layout.layers)
    assert p.count == 60
    assert p.transform == "raw"
    assert p.model_hash == model_hash(model)
    np.testing.assert_array_equal(p.low, want["low"])
    np.testing.assert_array_equal(p.high, want["high"])
    # the same values, summed in float64 batch by batch (merged) against two plain passes over the
    # 60 inputs: relative to the values' magnitude
    scale = float(values.abs().max())
    for field in ("mean", "std"):
        assert_close_two_ways(getattr(p, field), want[field], n=60, dtype=torch.float64, scale=scale,
                              err_msg=field)


@pytest.mark.float_sensitive
@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 40), cuts=st.lists(st.integers(0, 40), max_size=4),
       offset=st.sampled_from([0.0, 1e6]))
def test_chunks_and_merges_give_the_whole(n, cuts, offset):
    """Chan's formula: any chunking, merged in any grouping, equals one pass (also for values far
    from zero, where a sum-of-squares formula would lose every digit)."""
    rng = np.random.default_rng(n)
    v = torch.from_numpy(rng.normal(offset, 1.0, (n, 3)))
    bounds = sorted({0, n, *[c for c in cuts if c <= n]})
    parts = []
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        acc = ProfileAccumulator()
        acc.update(v[a:b])
        parts.append(acc)
    merged = ProfileAccumulator()
    for part in reversed(parts):
        merged.merge(part)
    stats = merged.compute()
    np.testing.assert_array_equal(stats["low"], v.min(0).values.numpy())
    np.testing.assert_array_equal(stats["high"], v.max(0).values.numpy())
    # float64 sums of the n values, grouped by chunk, relative to the values' magnitude (the spread's
    # deviations from the mean lose what the values have over it)
    scale = float(v.abs().max())
    for field, want in (("mean", v.numpy().mean(0)), ("std", v.numpy().std(0))):
        assert_close_two_ways(stats[field], want, n=n, dtype=torch.float64, scale=scale, err_msg=field)


def test_save_and_load_round_trip(tmp_path):
    model = chain_model()
    for layers in (None, ["fc1", "fc3"], "fc2"):
        p = compute_profile(model, inputs(30), layers=layers, transform="layer-minmax")
        q = load_profile(p.save(tmp_path / "p.npz"))
        assert q.same_as(p)
        assert q.selection == p.selection
        assert q.layers == p.layers
        assert q.to_dict() == p.to_dict()
    assert not list(tmp_path.glob(".*.tmp")), "no temporary file is left"


def test_loading_something_else_is_an_error(tmp_path):
    with pytest.raises(DeepFaultError, match="does not exist"):
        load_profile(tmp_path / "none.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(DeepFaultError, match="is not a readable profile"):
        load_profile(tmp_path / "junk.npz")
    np.savez(tmp_path / "other.npz", x=np.zeros(3))
    with pytest.raises(DeepFaultError, match="is not a deepfault profile"):
        load_profile(tmp_path / "other.npz")


def test_a_profile_for_another_model_layers_or_transform_is_refused():
    model, other = chain_model(seed=0), chain_model(seed=1)
    x = inputs(20)
    p = compute_profile(model, x)
    with pytest.raises(DeepFaultError, match=r"profile was computed for another model \(weights sha256 "):
        measure_coverage(other, x, criteria="kmnc", profile=p)
    with pytest.raises(DeepFaultError, match=r"computed for another model"):
        rank_inputs(other, x, torch.zeros(20, dtype=torch.long), criteria="nbc", profile=p)
    with pytest.raises(DeepFaultError, match=r"computed on 'raw' values but coverage is measured on "
                                             r"'layer-minmax'"):
        measure_coverage(model, x, criteria="kmnc", profile=p, transform="layer-minmax")
    with pytest.raises(DeepFaultError, match=r"computed for other layers \(fc1\[6\], fc2\[5\], fc3\[4\]\) "
                                             r"than these \(fc1\[6\]\)"):
        measure_coverage(model, x, criteria="snac", profile=p, layers=["fc1"])


def test_the_profile_supplies_layers_and_transform():
    model = chain_model()
    x = inputs(20)
    p = compute_profile(model, x, layers=["fc2", "fc3"], transform="layer-minmax")
    report = measure_coverage(model, x, criteria="kmnc,nbc", profile=p)
    assert report.layout.names == ("fc2", "fc3")
    assert report.transform == "layer-minmax"
    # the training inputs themselves: every value inside its range, no corner case
    assert report.result("nbc").covered == 0
    assert report.result("kmnc").covered > 0
    assert report.profile["model_sha256"] == model_hash(model)


def test_a_deepxplore_profile_is_reused_with_its_layers():
    from helpers.tiny_models import small_conv_net

    model = small_conv_net()
    x = torch.rand(16, 1, 8, 8)
    p = compute_profile(model, x, layers="deepxplore", transform="layer-minmax")
    assert p.selection == "deepxplore"
    assert p.layers[-1] == "softmax(output)"
    report = measure_coverage(model, x, criteria="kmnc,snac", profile=p)
    assert report.layout.names == p.layers
    assert report.result("snac").covered == 0


def test_empty_inputs_are_an_error():
    with pytest.raises(DeepFaultError, match="no inputs to profile"):
        compute_profile(chain_model(), torch.zeros(0, 4))
