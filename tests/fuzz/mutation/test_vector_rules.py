"""The mutation rules for vectors (N, F) and sequences (N, C, L): each against a naive loop over
inputs and elements written from its formula, bounds (global and per feature), replay from the
returned parameters, determinism by seed, the caller's tensor left alone, and the registry."""

from __future__ import annotations

import math

import pytest
import torch

from deepfault.errors import DeepFaultError
from deepfault.fuzz.mutation.rules import apply_rule, get_rule, list_rules, register_rule, rule_kind
from deepfault.fuzz.mutation.vectors import (
    FEATURE_SCALE_RANGE,
    NOISE_SIGMAS,
    PERTURB_MAX,
    SEQUENCE_RULES,
    SUBSET_SHARES,
    VECTOR_RULES,
    max_shift,
    subset_size,
)

TIME_RULES = ("time_shift", "time_crop")


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def vectors(n: int = 7, f: int = 12, seed: int = 1) -> torch.Tensor:
    return torch.rand(n, f, generator=gen(seed), dtype=torch.float64)


def sequences(n: int = 5, c: int = 2, length: int = 20, seed: int = 2) -> torch.Tensor:
    return torch.rand(n, c, length, generator=gen(seed), dtype=torch.float64)


def cases():
    for name in VECTOR_RULES:
        yield name, "vector"
        yield name, "sequence"
    for name in TIME_RULES:
        yield name, "sequence"


CASES = list(cases())


def batch(kind: str) -> torch.Tensor:
    return vectors() if kind == "vector" else sequences()


# ----------------------------------------------------------------------------- naive oracles


def naive(name: str, x: torch.Tensor, p: dict, lo, hi) -> torch.Tensor:
    """The rule's formula, one input and one element at a time (``lo``/``hi``: per-element tensors)."""
    out = x.clone()
    flat_lo, flat_hi = lo.reshape(-1), hi.reshape(-1)
    for i in range(len(x)):
        v = x[i].reshape(-1)
        o = out[i].reshape(-1)
        if name in TIME_RULES:
            c, steps = x.shape[1], x.shape[2]
            for ch in range(c):
                for t in range(steps):
                    if name == "time_shift":
                        src = min(max(t - int(p["shift"][i]), 0), steps - 1)
                        value = float(x[i, ch, src])
                    else:
                        pos = float(p["start"][i]) * (steps - 1) + float(p["length"][i]) * t
                        pos = min(max(pos, 0.0), steps - 1.0)
                        left = min(int(math.floor(pos)), steps - 2)
                        w = pos - left
                        a, b = float(x[i, ch, left]), float(x[i, ch, left + 1])
                        value = a + (b - a) * w
                    k = ch * steps + t
                    o[k] = min(max(value, float(flat_lo[k])), float(flat_hi[k]))
            out[i] = o.view(x.shape[1:])
            continue
        for k in range(v.numel()):
            lo_k, hi_k, r = float(flat_lo[k]), float(flat_hi[k]), float(flat_hi[k] - flat_lo[k])
            value = float(v[k])
            if name == "feature_noise":
                value += float(p["sigma"][i]) * r * float(p["noise"][i].reshape(-1)[k])
            elif name == "feature_perturb":
                if bool(p["features"][i].reshape(-1)[k]):
                    value += float(p["delta"][i].reshape(-1)[k]) * r
            elif name == "feature_mask":
                if bool(p["features"][i].reshape(-1)[k]):
                    value = lo_k if int(p["fill"][i]) == 0 else (lo_k + hi_k) / 2
            elif name == "feature_scale":
                c = (lo_k + hi_k) / 2
                value = c + (value - c) * float(p["factor"][i])
            o[k] = min(max(value, lo_k), hi_k)
        out[i] = o.view(x.shape[1:])
    return out


def per_element(bounds, x):
    lo, hi = (torch.broadcast_to(torch.as_tensor(b, dtype=torch.float64), x.shape[1:]) for b in bounds)
    return lo, hi


@pytest.mark.parametrize(("name", "kind"), CASES)
def test_rule_matches_a_naive_loop_with_global_bounds(name, kind):
    x = batch(kind)
    y, p = apply_rule(name, x, generator=gen(3), bounds=(0.0, 1.0))
    lo, hi = per_element((0.0, 1.0), x)
    torch.testing.assert_close(y, naive(name, x, p, lo, hi), rtol=0, atol=1e-12)
    assert y.shape == x.shape
    assert y.dtype == x.dtype


@pytest.mark.parametrize(("name", "kind"), CASES)
def test_rule_matches_a_naive_loop_with_per_feature_bounds_and_respects_them(name, kind):
    x = batch(kind)
    shape = x.shape[1:]
    lo = -torch.arange(math.prod(shape), dtype=torch.float64).reshape(shape) / 10
    hi = lo + 0.5 + torch.rand(shape, generator=gen(9), dtype=torch.float64)
    x = lo + (hi - lo) * x  # inside the per-feature bounds
    y, p = apply_rule(name, x, generator=gen(4), bounds=(lo, hi))
    torch.testing.assert_close(y, naive(name, x, p, lo, hi), rtol=0, atol=1e-12)
    assert bool((y >= lo).all())
    assert bool((y <= hi).all())


@pytest.mark.parametrize(("name", "kind"), CASES)
def test_bounds_hold_for_extreme_inputs(name, kind):
    x = batch(kind).round()  # every element at a bound
    for seed in range(5):
        y, _ = apply_rule(name, x, generator=gen(seed), bounds=(0.0, 1.0))
        assert float(y.min()) >= 0.0
        assert float(y.max()) <= 1.0


@pytest.mark.parametrize(("name", "kind"), CASES)
def test_replay_determinism_and_the_input_left_alone(name, kind):
    x = batch(kind)
    before = x.clone()
    y, p = apply_rule(name, x, generator=gen(5), bounds=(0.0, 1.0))
    assert torch.equal(x, before)
    again, p2 = apply_rule(name, x, generator=gen(5), bounds=(0.0, 1.0))
    assert torch.equal(y, again)
    assert p.keys() == p2.keys()
    assert all(torch.equal(p[k], p2[k]) for k in p)
    replay, used = apply_rule(name, x, bounds=(0.0, 1.0), params=p)  # no generator needed
    assert torch.equal(y, replay)
    assert used.keys() == p.keys()
    assert all(v.device.type == "cpu" and v.shape[0] == len(x) for v in p.values())
    other, _ = apply_rule(name, x, generator=gen(6), bounds=(0.0, 1.0))
    assert not torch.equal(y, other)


@pytest.mark.parametrize(("name", "kind"), CASES)
def test_result_does_not_depend_on_the_batch(name, kind):
    x = batch(kind)
    y, p = apply_rule(name, x, generator=gen(7), bounds=(0.0, 1.0))
    for i in (0, len(x) - 1):
        sub = {k: v[i : i + 1] for k, v in p.items()}
        one, _ = apply_rule(name, x[i : i + 1], bounds=(0.0, 1.0), params=sub)
        torch.testing.assert_close(one[0], y[i], rtol=0, atol=1e-12)


def test_draws_follow_the_documented_distributions():
    x = vectors(n=400, f=20)
    _, p = apply_rule("feature_noise", x, generator=gen(0), bounds=(0.0, 1.0))
    assert set(p["sigma"].tolist()) == set(NOISE_SIGMAS)
    _, p = apply_rule("feature_perturb", x, generator=gen(0), bounds=(0.0, 1.0))
    assert set(p["features"].sum(1).tolist()) == {subset_size(s, 20) for s in SUBSET_SHARES}
    assert float(p["delta"].abs().max()) <= PERTURB_MAX
    _, p = apply_rule("feature_mask", x, generator=gen(0), bounds=(0.0, 1.0))
    assert set(p["fill"].tolist()) == {0, 1}
    _, p = apply_rule("feature_scale", x, generator=gen(0), bounds=(0.0, 1.0))
    low, high = FEATURE_SCALE_RANGE
    assert low <= float(p["factor"].min()) <= float(p["factor"].max()) <= high
    s = sequences(n=400, length=30)
    _, p = apply_rule("time_shift", s, generator=gen(0), bounds=(0.0, 1.0))
    assert set(p["shift"].tolist()) == set(range(-max_shift(30), max_shift(30) + 1))
    _, p = apply_rule("time_crop", s, generator=gen(0), bounds=(0.0, 1.0))
    assert bool((p["start"] + p["length"] <= 1 + 1e-12).all())
    assert float(p["length"].min()) >= 0.8


@pytest.mark.parametrize("name", ["feature_noise", "feature_scale", "time_shift", "time_crop"])
def test_neutral_parameters_are_the_identity(name):
    from deepfault.fuzz.mutation.rules import neutral_params

    x = sequences()
    p = neutral_params(name, len(x))
    if name == "feature_noise":
        p["noise"] = torch.randn(x.shape, generator=gen(0), dtype=x.dtype)
    y, _ = apply_rule(name, x, bounds=(0.0, 1.0), params=p)
    assert torch.equal(y, x)


def test_registry_by_input_kind():
    assert list_rules(inputs="vector") == sorted(VECTOR_RULES)
    assert list_rules(inputs="sequence") == sorted(SEQUENCE_RULES)
    assert len(list_rules()) == 15  # images keep exactly their rules
    assert not set(list_rules()) & set(SEQUENCE_RULES)
    assert list_rules("affine", inputs="sequence") == sorted(TIME_RULES)
    assert get_rule("time_crop").inputs == ("sequence",)
    assert [rule_kind((1,) * r) for r in (1, 2, 3)] == ["vector", "sequence", "image"]
    with pytest.raises(DeepFaultError, match="vectors \\(N, F\\); got a batch of rank 5"):
        rule_kind(torch.zeros(1, 1, 1, 1, 1).shape[1:])
    with pytest.raises(DeepFaultError, match="inputs must be among image, sequence, vector; got 'audio'"):
        register_rule("hum", family="pixel", inputs="audio")


def test_a_user_rule_for_vectors_registers_like_the_others():
    from deepfault.fuzz.mutation import rules as rules_module

    @register_rule("test_negate_vectors", family="pixel", inputs="vector")
    def negate(x, *, generator=None, bounds, params=None):
        lo, hi = bounds
        return (lo + hi) - x, {}

    try:
        assert "test_negate_vectors" in list_rules(inputs="vector")
        assert "test_negate_vectors" not in list_rules()
        y, _ = apply_rule("test_negate_vectors", vectors(), bounds=(0.0, 1.0))
        torch.testing.assert_close(y, 1.0 - vectors())
    finally:
        rules_module._RULES.unregister("test_negate_vectors")


def test_bad_inputs_bounds_and_params_are_refused():
    with pytest.raises(DeepFaultError, match=r"must be a float tensor \(N, F\) or \(N, C, L\)"):
        apply_rule("feature_noise", torch.rand(2, 1, 8, 8), generator=gen(), bounds=(0, 1))
    with pytest.raises(DeepFaultError, match=r"'time_shift' must be a float tensor \(N, C, L\)"):
        apply_rule("time_shift", vectors(), generator=gen(), bounds=(0, 1))
    with pytest.raises(DeepFaultError, match="at least 2 time steps"):
        apply_rule("time_crop", torch.rand(2, 1, 1), generator=gen(), bounds=(0, 1))
    with pytest.raises(DeepFaultError, match="broadcastable to one input's shape"):
        apply_rule("feature_scale", vectors(), generator=gen(), bounds=(torch.zeros(5), torch.ones(5)))
    with pytest.raises(DeepFaultError, match="lo < hi for every feature"):
        apply_rule("feature_scale", vectors(), generator=gen(), bounds=(1.0, 0.0))
    with pytest.raises(DeepFaultError, match="needs a generator"):
        apply_rule("feature_mask", vectors(), bounds=(0, 1))
    with pytest.raises(DeepFaultError, match=r"params\['fill'\] for mutation rule 'feature_mask' must lie"):
        apply_rule("feature_mask", vectors(), generator=gen(), bounds=(0, 1),
                   params={"fill": torch.full((7,), 2)})
    with pytest.raises(DeepFaultError, match="start \\+ length <= 1"):
        apply_rule("time_crop", sequences(), bounds=(0, 1),
                   params={"start": torch.full((5,), 0.5), "length": torch.full((5,), 0.9)})
