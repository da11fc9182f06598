"""Uncertainty scores (confidence, margin, entropy, DeepGini) against a naive per-input loop
written from the formulas of the module docstring, and the priority order's contract."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from deepfault.coverage.uncertainty import (
    UNCERTAINTY,
    list_uncertainty,
    priority_order,
    probabilities,
    uncertainty_scores,
)
from deepfault.errors import DeepFaultError

NAMES = ("confidence", "margin", "entropy", "gini")


def naive_softmax(row: list[float]) -> list[float]:
    top = max(row)
    e = [math.exp(v - top) for v in row]
    s = sum(e)
    return [v / s for v in e]


def naive_score(name: str, p: list[float]) -> float:
    """One input's score straight from the definitions."""
    ranked = sorted(p, reverse=True)
    if name == "confidence":
        return ranked[0]
    if name == "margin":
        return ranked[0] - ranked[1] if len(ranked) > 1 else 1.0
    if name == "entropy":
        return -sum(v * math.log(v) for v in p if v > 0)  # 0 ln 0 = 0
    if name == "gini":
        return 1.0 - sum(v * v for v in p)
    raise AssertionError(name)


def naive(outputs: np.ndarray, name: str, output_kind: str = "logits") -> np.ndarray:
    rows = outputs.astype(np.float64).tolist()
    return np.array([naive_score(name, naive_softmax(r) if output_kind == "logits" else r) for r in rows])


def logits_batch(seed: int = 0, n: int = 200, c: int = 10) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 3, (n, c))
    x[:5] = 0.0                          # uniform: confidence 1/C, margin 0, max entropy
    x[5, 0] = 80.0                       # one-hot in float64: other probabilities underflow past 1e-30
    x[6, :2] = 7.0                       # a tie at the top: margin 0
    return x.astype(np.float32)


def test_registry_lists_the_four():
    assert list_uncertainty() == sorted(NAMES)
    assert [UNCERTAINTY.get(n).ascending for n in NAMES] == [True, True, False, False]


@pytest.mark.parametrize("name", NAMES)
def test_logits_equal_naive_loop(name):
    x = logits_batch()
    mine = uncertainty_scores(torch.from_numpy(x), name)
    assert mine.dtype == torch.float64
    assert mine.shape == (len(x),)
    np.testing.assert_allclose(mine.numpy(), naive(x, name), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", NAMES)
def test_probabilities_equal_naive_loop(name):
    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.full(7, 0.3), size=150)
    p[0] = np.eye(7)[2]                  # exact zeros: 0 ln 0 = 0, entropy 0
    p[1] = np.full(7, 1 / 7)
    mine = uncertainty_scores(torch.from_numpy(p), name, output_kind="probabilities")
    np.testing.assert_allclose(mine.numpy(), naive(p, name, "probabilities"), rtol=1e-12, atol=1e-15)
    assert np.isfinite(mine.numpy()).all()


def test_known_values():
    x = torch.zeros(1, 4)
    assert uncertainty_scores(x, "confidence").item() == pytest.approx(0.25)
    assert uncertainty_scores(x, "margin").item() == 0.0
    assert uncertainty_scores(x, "entropy").item() == pytest.approx(math.log(4))
    assert uncertainty_scores(x, "gini").item() == pytest.approx(0.75)
    one_hot = torch.tensor([[0.0, 1.0, 0.0]])
    for name, want in zip(NAMES, (1.0, 1.0, 0.0, 0.0), strict=True):
        assert uncertainty_scores(one_hot, name, output_kind="probabilities").item() == want


def test_single_class_margin_is_one():
    x = torch.tensor([[2.0], [-1.0]])
    assert uncertainty_scores(x, "margin").tolist() == [1.0, 1.0]
    assert uncertainty_scores(x, "entropy").tolist() == [0.0, 0.0]


@pytest.mark.float_sensitive
@pytest.mark.parametrize("name", NAMES)
def test_batch_independence(name):
    """Each score is its own row's (a softmax over the row): the same bits whatever the batch."""
    x = torch.from_numpy(logits_batch(1, n=97))
    whole = uncertainty_scores(x, name)
    for size in (1, 7, 32):
        parts = torch.cat([uncertainty_scores(x[i : i + size], name) for i in range(0, len(x), size)])
        torch.testing.assert_close(parts, whole, rtol=0, atol=0)


def test_probabilities_and_errors():
    x = torch.tensor([[1.0, 2.0, 3.0]])
    torch.testing.assert_close(probabilities(x), torch.softmax(x.double(), dim=1))
    assert probabilities(x, output_kind="probabilities").dtype == torch.float64
    with pytest.raises(DeepFaultError, match="output_kind must be"):
        probabilities(x, output_kind="softmax")
    with pytest.raises(DeepFaultError, match=r"must be \(N, classes\)"):
        probabilities(torch.zeros(3))
    with pytest.raises(DeepFaultError, match="NaN or infinite"):
        probabilities(torch.tensor([[0.0, float("nan")]]))
    with pytest.raises(DeepFaultError, match=(r"unknown uncertainty score 'ginni'"
                                              r"; did you mean 'gini'\? \(known: confidence")):
        uncertainty_scores(x, "ginni")


def test_uncertainty_does_not_touch_the_callers_tensor():
    x = torch.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    before = x.detach().clone()
    uncertainty_scores(x, "gini")
    assert torch.equal(x.detach(), before)
    assert x.grad is None


# --------------------------------------------------------------------------- priority_order


def naive_order(scores: list[float], ascending: bool) -> list[int]:
    """Selection sort by hand: the best remaining, the lower index on a tie, NaN last."""
    left = list(range(len(scores)))
    out = []
    while left:
        finite = [i for i in left if not math.isnan(scores[i])]
        if not finite:
            out += left
            break
        pick = finite[0]
        for i in finite[1:]:
            if (scores[i] < scores[pick]) if ascending else (scores[i] > scores[pick]):
                pick = i
        out.append(pick)
        left.remove(pick)
    return out


@pytest.mark.parametrize("ascending", [True, False])
def test_priority_order_ties_and_nan(ascending):
    s = np.array([0.5, np.nan, 0.2, 0.5, 0.9, np.nan, 0.2, -np.inf, np.inf])
    order = priority_order(s, ascending=ascending)
    assert order.tolist() == naive_order(s.tolist(), ascending)
    if ascending:
        assert order.tolist() == [7, 2, 6, 0, 3, 4, 8, 1, 5]
    else:
        assert order.tolist() == [8, 4, 0, 3, 2, 6, 7, 1, 5]


def test_priority_order_takes_tensors():
    s = torch.tensor([3.0, 1.0, 2.0])
    assert priority_order(s, ascending=True).tolist() == [1, 2, 0]
    assert priority_order(s, ascending=False).tolist() == [0, 2, 1]
    assert priority_order(np.zeros(0), ascending=True).tolist() == []


@pytest.mark.parametrize("name", NAMES)
def test_order_of_a_score_puts_the_uncertain_first(name):
    x = torch.tensor([[9.0, 0.0, 0.0], [1.0, 1.0, 1.0], [3.0, 1.0, 0.0]])
    u = UNCERTAINTY.get(name)
    assert priority_order(uncertainty_scores(x, name), ascending=u.ascending).tolist() == [1, 2, 0]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.floats(-3, 3), st.just(float("nan")), st.sampled_from([0.0, 1.0])),
                max_size=30), st.booleans())
def test_priority_order_property(scores, ascending):
    assert priority_order(np.array(scores, dtype=np.float64), ascending=ascending).tolist() == \
        naive_order(scores, ascending)


@settings(max_examples=60, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 8), st.integers(2, 6)),
              elements=st.floats(-50, 50, allow_nan=False)))
def test_scores_lie_in_their_ranges(logits):
    c = logits.shape[1]
    t = torch.from_numpy(logits)
    conf = uncertainty_scores(t, "confidence").numpy()
    marg = uncertainty_scores(t, "margin").numpy()
    ent = uncertainty_scores(t, "entropy").numpy()
    gini = uncertainty_scores(t, "gini").numpy()
    eps = 1e-12
    assert ((conf >= 1 / c - eps) & (conf <= 1 + eps)).all()
    assert ((marg >= -eps) & (marg <= 1 + eps)).all()
    assert ((ent >= -eps) & (ent <= math.log(c) + eps)).all()
    assert ((gini >= -eps) & (gini <= 1 - 1 / c + eps)).all()
    np.testing.assert_allclose(ent, naive(logits, "entropy"), rtol=1e-9, atol=1e-12)
