"""Coverage criteria against the naive per-input, per-neuron loops written from the spec, and
batch-size, order and merge invariance."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deepfault.core.capture import NeuronLayout
from deepfault.coverage import CRITERIA, Profile, build_criteria, make_criterion
from deepfault.coverage import reference as ref
from deepfault.coverage.criteria import BitSetCriterion, _above32, _below32
from deepfault.errors import DeepFaultError

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Values on a coarse grid, so that ties, section edges and profile bounds are hit exactly.
GRID = st.integers(-6, 6).map(lambda i: i / 2)


def make_profile(layout: NeuronLayout, low, high, std) -> Profile:
    low = np.asarray(low, dtype=np.float64)
    return Profile(layout.names, tuple(la.size for la in layout.layers), "raw", "test", 7,
                   low, np.asarray(high, dtype=np.float64), (low + np.asarray(high)) / 2,
                   np.asarray(std, dtype=np.float64))


@st.composite
def cases(draw, max_inputs=10):
    sizes = draw(st.lists(st.integers(1, 5), min_size=1, max_size=3))
    layout = NeuronLayout.from_sizes([f"l{i}" for i in range(len(sizes))], sizes)
    m = layout.num_neurons
    n = draw(st.integers(0, max_inputs))
    values = draw(st.lists(st.lists(GRID, min_size=m, max_size=m), min_size=n, max_size=n))
    a = draw(st.lists(GRID, min_size=m, max_size=m))
    b = draw(st.lists(GRID, min_size=m, max_size=m))
    low, high = np.minimum(a, b), np.maximum(a, b)
    std = draw(st.lists(st.integers(0, 4).map(lambda i: i / 4), min_size=m, max_size=m))
    return layout, values, make_profile(layout, low, high, std)


def as_tensor(values, m, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype).reshape(len(values), m)


def sets_of(crit: BitSetCriterion, x: torch.Tensor) -> list[set]:
    dense = crit.covered_by(x)
    items = crit.covered_items(x)
    from_items = [set(row[row >= 0].tolist()) for row in items]
    from_dense = [set(np.flatnonzero(row.numpy()).tolist()) for row in dense]
    assert from_items == from_dense
    return from_dense


def reference_sets(name, values, layout, profile, params):
    layers = [(la.offset, la.size) for la in layout.layers]
    if name in ("nc", "nac"):
        return ref.nc_sets(values, params["threshold"])
    if name == "kmnc":
        return ref.kmnc_sets(values, profile.low, profile.high, params["sections"])
    if name == "nbc":
        return ref.nbc_sets(values, profile.low, profile.high, profile.std, params["scale"])
    if name == "snac":
        return ref.snac_sets(values, profile.high, profile.std, params["scale"])
    if name == "tknc":
        return ref.tknc_sets(values, layers, params["top_k"])
    raise AssertionError(name)


PARAMS = {
    "nc": [{"threshold": 0.0}, {"threshold": 0.5}, {"threshold": -1.0}],
    "nac": [{"threshold": 0.25}],
    "kmnc": [{"sections": 1}, {"sections": 3}, {"sections": 4}],
    "nbc": [{"scale": 0.0}, {"scale": 1.0}],
    "snac": [{"scale": 0.0}, {"scale": 0.5}],
    "tknc": [{"top_k": 1}, {"top_k": 2}, {"top_k": 9}],
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize(("name", "params"), [(n, p) for n, ps in PARAMS.items() for p in ps])
@SETTINGS
@given(case=cases())
def test_bitset_criteria_match_the_naive_loop(name, params, dtype, case):
    layout, values, profile = case
    m = layout.num_neurons
    x = as_tensor(values, m, dtype)
    extra = {"profile": profile} if name in ("kmnc", "nbc", "snac") else {}
    crit = make_criterion(name, layout, **params, **extra)
    expected = reference_sets(name, values, layout, profile, params)
    assert sets_of(crit, x) == expected
    # would_increase before any update: an input covering anything
    assert crit.would_increase(x).tolist() == [bool(s) for s in expected]
    half = len(values) // 2
    crit.update(x[:half])
    covered = set().union(*expected[:half]) if half else set()
    assert crit.would_increase(x).tolist() == [bool(s - covered) for s in expected]
    crit.update(x[half:])
    union = set().union(*expected) if expected else set()
    assert set(np.flatnonzero(crit.covered.numpy()).tolist()) == union
    result = crit.compute()
    count, ratio = ref.coverage_reference(expected, crit.num_items)
    assert (result.covered, result.total) == (count, crit.num_items)
    assert result.ratio == pytest.approx(ratio)
    assert sum(c for c, _ in result.per_layer.values()) == count
    assert sum(t for _, t in result.per_layer.values()) == crit.num_items


def decode(crit, keys) -> list[tuple]:
    out = []
    for key in keys:
        units = np.frombuffer(bytes(key), dtype="<i4")
        parts, start = [], 0
        for la in crit.layout.layers:
            kk = min(crit.top_k, la.size)
            parts.append(frozenset((units[start : start + kk] - la.offset).tolist()))
            start += kk
        out.append(tuple(parts))
    return out


@pytest.mark.parametrize("top_k", [1, 2, 3])
@SETTINGS
@given(case=cases())
def test_tknp_matches_the_naive_loop(top_k, case):
    layout, values, _ = case
    x = as_tensor(values, layout.num_neurons)
    crit = make_criterion("tknp", layout, top_k=top_k)
    expected = ref.tknp_sets(values, [(la.offset, la.size) for la in layout.layers], top_k)
    assert decode(crit, crit.pattern_keys(x)) == expected
    half = len(values) // 2
    crit.update(x[:half])
    assert crit.would_increase(x).tolist() == [p not in set(expected[:half]) for p in expected]
    crit.update(x[half:])
    result = crit.compute()
    assert result.covered == len(set(expected)) == crit.covered_count()
    assert result.total is None
    assert result.ratio is None
    for i, la in enumerate(layout.layers):
        assert result.per_layer[la.name] == (len({p[i] for p in expected}), None)


@pytest.mark.parametrize("name", CRITERIA.names())
def test_a_state_made_in_inference_mode_updates_outside_it(name, setup):
    layout, prof, x = setup
    with torch.inference_mode():
        crit = _fresh(name, layout, prof)
        crit.update(x[:5])
    crit.update(x[5:])
    whole = _fresh(name, layout, prof)
    whole.update(x)
    assert crit.compute() == whole.compute()


def test_tknp_has_no_fixed_item_set():
    crit = make_criterion("tknp", NeuronLayout.from_sizes(["a"], [2]))
    with pytest.raises(DeepFaultError, match="tknp covers patterns"):
        crit.covered_by(torch.zeros(1, 2))


def test_tknc_ties_go_to_the_lower_unit():
    layout = NeuronLayout.from_sizes(["a", "b"], [4, 3])
    x = torch.tensor([[1.0, 3.0, 3.0, 3.0, 0.0, 0.0, 0.0]])
    one = make_criterion("tknc", layout, top_k=1)
    assert np.flatnonzero(one.covered_by(x)[0].numpy()).tolist() == [1, 4]
    two = make_criterion("tknc", layout, top_k=2)
    assert np.flatnonzero(two.covered_by(x)[0].numpy()).tolist() == [1, 2, 4, 5]


def test_kmnc_sections_on_paper():
    """low 0, high 1, k = 4: sections [0, .25) [.25, .5) [.5, .75) [.75, 1]; outside: none."""
    layout = NeuronLayout.from_sizes(["a"], [1])
    prof = make_profile(layout, [0.0], [1.0], [0.1])
    crit = make_criterion("kmnc", layout, profile=prof, sections=4)
    x = torch.tensor([[0.0], [0.25], [0.49], [0.75], [1.0], [-0.01], [1.01]])
    assert crit.covered_items(x)[:, 0].tolist() == [0, 1, 1, 3, 3, -1, -1]
    # a constant neuron (low = high): only v = high covers, in the last section
    flat = make_criterion("kmnc", layout, profile=make_profile(layout, [2.0], [2.0], [0.0]), sections=4)
    assert flat.covered_items(torch.tensor([[2.0], [1.9], [2.1]]))[:, 0].tolist() == [3, -1, -1]


def test_nbc_corners_on_paper():
    layout = NeuronLayout.from_sizes(["a"], [2])
    prof = make_profile(layout, [0.0, -1.0], [1.0, 1.0], [0.5, 0.0])
    crit = make_criterion("nbc", layout, profile=prof, scale=1.0)
    # neuron 0: lower corner below -0.5, upper above 1.5; neuron 1: below -1, above 1
    x = torch.tensor([[-0.6, 1.5], [1.5, -1.0], [1.6, 0.0]])
    assert [sorted(s) for s in sets_of(crit, x)] == [[0, 3], [], [1]]


@pytest.mark.parametrize("t", [0.1, 1 / 3, -0.7, 1e-8])
def test_comparisons_are_exact_for_float32_values(t):
    """``v > t`` for a float32 ``v`` is decided as for the real numbers, not after rounding t."""
    t32 = np.float32(t)
    near = np.array([np.nextafter(t32, np.float32(-1)), t32, np.nextafter(t32, np.float32(2))], np.float32)
    layout = NeuronLayout.from_sizes(["a"], [1])
    crit = make_criterion("nc", layout, threshold=t)
    got = crit.covered_by(torch.from_numpy(near.reshape(3, 1)))[:, 0].tolist()
    assert got == [float(v) > t for v in near]
    assert float(_below32(t)) <= t <= float(_above32(t))


# --------------------------------------------------------------------------- invariance


def all_criteria(layout, profile):
    return build_criteria("all", layout, threshold=[0.0, 0.5], sections=3, top_k=2, scale=0.5,
                          profile=profile)


def state(crit):
    return crit.patterns if crit.name == "tknp" else crit.covered.tolist()


@SETTINGS
@given(case=cases(max_inputs=16), data=st.data())
def test_batch_size_order_and_merge_invariance(case, data):
    layout, values, profile = case
    x = as_tensor(values, layout.num_neurons)
    whole = all_criteria(layout, profile)
    for c in whole:
        c.update(x)
    # any batch size
    size = data.draw(st.integers(1, 5))
    batched = all_criteria(layout, profile)
    for start in range(0, len(x), size):
        for c in batched:
            c.update(x[start : start + size])
    # any order
    perm = data.draw(st.permutations(range(len(values))))
    shuffled = all_criteria(layout, profile)
    for c in shuffled:
        c.update(x[list(perm)] if perm else x)
    # two workers, merged
    cut = data.draw(st.integers(0, len(values)))
    left, right = all_criteria(layout, profile), all_criteria(layout, profile)
    for a, b in zip(left, right, strict=True):
        a.update(x[:cut])
        b.update(x[cut:])
        a.merge(b)
    for w, b, s, m in zip(whole, batched, shuffled, left, strict=True):
        assert state(w) == state(b) == state(s) == state(m)
        assert w.compute() == m.compute()


# --------------------------------------------------------------------------- contract


def _fresh(name, layout, profile):
    return build_criteria(name, layout, profile=profile)[0]


@pytest.fixture
def setup():
    layout = NeuronLayout.from_sizes(["a", "b"], [3, 4])
    rng = np.random.default_rng(0)
    prof = make_profile(layout, rng.uniform(-1, 0, 7), rng.uniform(0, 1, 7), rng.uniform(0, 0.2, 7))
    x = torch.from_numpy(rng.normal(0, 1, (20, 7)).astype(np.float32))
    return layout, prof, x


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a
    )


@pytest.mark.parametrize("name", CRITERIA.names())
def test_contract_every_criterion(name, setup):
    layout, prof, x = setup
    crit = _fresh(name, layout, prof)
    before = crit.state_dict()
    crit.would_increase(x)
    assert same(crit.state_dict(), before), "would_increase must not change the state"
    crit.update(x[:0])
    assert same(crit.state_dict(), before), "an empty batch changes nothing"
    assert crit.would_increase(x[:0]).shape == (0,)
    crit.update(x[:10])
    assert not crit.would_increase(x[:10]).any()
    assert crit.covered_count() == crit.compute().covered
    json.dumps(crit.compute().to_dict())
    copy = _fresh(name, layout, prof).load_state_dict(crit.state_dict())
    assert copy.compute() == crit.compute()
    crit.reset()
    assert crit.compute().covered == 0
    items, num = crit.input_items(x)
    assert items.shape[0] == len(x)
    assert int(items.max()) < num
    # numpy values are taken too
    assert crit.would_increase(x.numpy()).tolist() == crit.would_increase(x).tolist()
    with pytest.raises(DeepFaultError, match=r"expects neuron values of shape \(N, 7\)"):
        crit.update(torch.zeros(2, 5))


@pytest.mark.parametrize("name", CRITERIA.names())
def test_merging_different_parameters_or_layouts_is_refused(name, setup):
    layout, prof, x = setup
    other_layout = NeuronLayout.from_sizes(["a", "c"], [3, 4])
    crit = _fresh(name, layout, prof)
    with pytest.raises(DeepFaultError, match="cannot merge"):
        crit.merge(make_criterion("nc", layout) if name != "nc" else make_criterion("nac", layout))
    if name not in ("kmnc", "nbc", "snac"):
        with pytest.raises(DeepFaultError, match="different layers or parameters"):
            crit.merge(_fresh(name, other_layout, None))


@pytest.mark.parametrize(
    ("name", "params", "match"),
    [
        ("kmnc", {"sections": 0}, r"sections must be an integer >= 1; got 0"),
        ("kmnc", {"sections": 2.5}, r"sections must be an integer >= 1; got 2.5"),
        ("tknc", {"top_k": 0}, r"top_k must be an integer >= 1; got 0"),
        ("tknp", {"top_k": -1}, r"top_k must be an integer >= 1"),
        ("nc", {"threshold": "abc"}, r"threshold must be a number; got 'abc'"),
        ("nc", {"threshold": float("nan")}, r"threshold must be a finite number"),
        ("nbc", {"scale": -1}, r"scale must be a finite number >= 0; got -1"),
        ("nc", {"sections": 3}, r"'nc' takes no parameter 'sections'; it takes: threshold"),
        ("kmnc", {}, r"kmnc needs a profile"),
        ("nosuch", {}, r"unknown coverage criterion 'nosuch'; known: kmnc, nac, nbc, nc, snac, tknc, tknp"),
    ],
)
def test_bad_parameters(name, params, match, setup):
    layout, prof, _ = setup
    if name in ("nbc",):
        params = {**params, "profile": prof}
    with pytest.raises(DeepFaultError, match=match):
        make_criterion(name, layout, **params)


def test_a_profile_for_other_layers_is_refused(setup):
    layout, prof, _ = setup
    other = NeuronLayout.from_sizes(["a", "b"], [3, 5])
    with pytest.raises(DeepFaultError, match=r"profile was computed for other layers \(a\[3\], b\[4\]\)"):
        make_criterion("kmnc", other, profile=prof)


def test_build_criteria_one_per_threshold_in_the_order_asked(setup):
    layout, prof, _ = setup
    crits = build_criteria("tknc,nc,kmnc", layout, threshold=[0.5, 0, 0.5], profile=prof)
    assert [c.label for c in crits] == ["tknc(top_k=1)", "nc(threshold=0.5)", "nc(threshold=0)",
                                        "kmnc(sections=10)"]
    with pytest.raises(DeepFaultError, match="kmnc, nbc need a profile"):
        build_criteria("kmnc,nbc", layout)
