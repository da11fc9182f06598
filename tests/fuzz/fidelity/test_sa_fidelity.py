"""The surprise-adequacy fidelity check (``--fidelity dsa:T``, issue 28): the threshold, planted
realistic and unrealistic inputs, traces against inputs, batch sizes, vectors, the spec's
parse errors and the cache."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from deepfault.core.capture import capture
from deepfault.coverage.surprise import fit_surprise, save_surprise
from deepfault.errors import DeepFaultError
from deepfault.fuzz.fidelity import (
    SurpriseFidelity,
    check_fidelity_spec,
    list_fidelities,
    make_fidelity,
    make_surprise_fidelity,
    parse_surprise_spec,
)
from deepfault.fuzz.fidelity import surprise as sa_fid
from helpers.float_tolerance import assert_close_two_ways, surprise_condition
from helpers.sa_fuzz import band_model, band_problem


def naive_dsa(train_ats, train_cls, ats, cls) -> np.ndarray:
    """Kim et al.'s DSA, one input at a time, from the definition (ties: the lower index)."""
    out = []
    for a, c in zip(ats.astype(np.float64), cls, strict=True):
        same = [i for i in range(len(train_ats)) if train_cls[i] == c]
        d_same = [float(np.linalg.norm(a - train_ats[i])) for i in same]
        near = same[int(np.argmin(d_same))]
        d_other = [float(np.linalg.norm(train_ats[near] - train_ats[j]))
                   for j in range(len(train_ats)) if train_cls[j] != c]
        out.append(min(d_same) / min(d_other))
    return np.array(out)


@pytest.fixture(scope="module")
def fitted():
    m1, _, x, _, x_train = band_problem()
    return m1, x, x_train, fit_surprise(m1, x_train)


def test_the_surprise_checks_are_registered():
    assert {"dsa", "lsa", "mdsa"} <= set(list_fidelities())


@pytest.mark.parametrize("kind", ["dsa", "lsa", "mdsa"])
def test_rejects_what_is_above_the_threshold_and_accepts_what_is_below(fitted, kind):
    m1, x, x_train, state = fitted
    # planted: copies of training inputs (realistic by definition) and inputs far outside the data
    near = x_train[:20]
    far = torch.cat([torch.full((5, 1, 8, 8), 6.0), x_train[:5] * 9 - 4])
    scores = {name: SurpriseFidelity(state, kind=kind, threshold=0.0, model=m1, bounds=(0, 1)).check(v).scores
              for name, v in (("near", near), ("far", far))}
    assert scores["near"].max() < scores["far"].min()
    t = float((scores["near"].max() + scores["far"].min()) / 2)
    fid = SurpriseFidelity(state, kind=kind, threshold=t, model=m1, bounds=(0.0, 1.0))
    assert fid.check(near).passed.all()
    assert not fid.check(far).passed.any()
    # on ordinary inputs: passed exactly when the score is at most T (T itself passes)
    got = fid.check(x)
    assert torch.equal(got.passed, got.scores <= t)
    at = SurpriseFidelity(state, kind=kind, threshold=float(got.scores[0]), model=m1, bounds=(0, 1))
    assert bool(at.check(x).passed[0])  # (the same batch: float rounding of M1 may differ by batch)
    assert fid.passes(x, torch.zeros(len(x))).tolist() == got.passed.tolist()


def test_dsa_of_the_check_equals_the_definition_on_images_and_on_traces(fitted):
    m1, x, _, state = fitted
    fid = SurpriseFidelity(state, kind="dsa", threshold=1.0, model=m1, bounds=(0.0, 1.0))
    with torch.no_grad(), capture(m1, list(fid.layers)) as rec:
        pred = m1(x[:25]).argmax(1)
        ats = rec.collect()
    want = naive_dsa(state.ats, state.classes, ats.numpy(), pred.numpy())
    np.testing.assert_allclose(fid.check(x[:25]).scores.numpy(), want, rtol=1e-6, atol=1e-9)
    traced = fid.check_traces(ats, pred)
    np.testing.assert_allclose(traced.scores.numpy(), want, rtol=1e-6, atol=1e-9)
    assert traced.passed.tolist() == (torch.from_numpy(want) <= 1.0).tolist()


@pytest.mark.float_sensitive
def test_the_answers_do_not_depend_on_the_batch_size(fitted):
    """M1's fc1 traces are float32 sums of 64 + 1 terms, regrouped by batch size; the scores move
    within that tolerance (MDSA's stretched by its whitening), and so does every answer whose
    score is not that close to the threshold."""
    m1, x, _, state = fitted
    for kind, t in (("dsa", 0.6), ("mdsa", 8.0)):
        runs = [SurpriseFidelity(state, kind=kind, threshold=t, model=m1, bounds=(0, 1),
                                 batch_size=b).check(x) for b in (1, 7, 1000)]
        condition = 1.0 if kind == "dsa" else surprise_condition(state.ats, state.classes)
        for other in runs[1:]:
            atol = assert_close_two_ways(other.scores, runs[0].scores, n=65, dtype=torch.float32,
                                         condition=condition, err_msg=kind)
            clear = (runs[0].scores.double() - t).abs() > atol
            assert clear.all(), kind  # as it is today: no score on the threshold, every answer compared
            assert other.passed[clear].tolist() == runs[0].passed[clear].tolist()


def test_vector_inputs_and_vector_traces():
    """Tabular data: 5 features, an MLP; the check takes (B, F) inputs and (B, M) traces."""
    g = torch.Generator().manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    train = torch.randn(300, 5, generator=g)
    test = torch.randn(40, 5, generator=g)
    fid = make_surprise_fidelity("dsa:p90", model=model, train_inputs=train, test_inputs=test,
                                 bounds=(-5.0, 5.0), cache=False)
    got = fid.check(test)
    assert got.scores.shape == (40,)
    assert got.passed.float().mean() >= 0.9  # the 90th percentile of these very inputs
    with torch.no_grad(), capture(model, list(fid.layers)) as rec:
        pred = model(test).argmax(1)
        ats = rec.collect()
    state = fid.surprise
    np.testing.assert_allclose(fid.check_traces(ats, pred).scores.numpy(),
                               naive_dsa(state.ats, state.classes, ats.numpy(), pred.numpy()), rtol=1e-6)
    assert not fid.check(torch.full((3, 5), 40.0)).passed.any()


def test_percentile_thresholds(fitted):
    m1, x, x_train, _ = fitted
    fid = make_surprise_fidelity("dsa:p80", model=m1, train_inputs=x_train, test_inputs=x, bounds=(0, 1),
                                 cache=False)
    s = fid.check(x).scores.numpy()
    assert fid.threshold in s  # a test input's score, not an interpolation
    assert (s <= fid.threshold).mean() >= 0.8 > (s < fid.threshold).mean()
    assert "80th percentile" in fid.rule
    assert sa_fid.percentile_threshold(np.array([1.0, np.nan, 0.5, 2.0]), 100) == math.inf
    assert sa_fid.percentile_threshold(np.array([1.0, np.nan, 0.5, 2.0]), 50) == 1.0
    default = make_surprise_fidelity("dsa", model=m1, train_inputs=x_train, test_inputs=x, bounds=(0, 1),
                                     cache=False)
    assert default.threshold == sa_fid.percentile_threshold(s, sa_fid.DEFAULT_PERCENTILE)
    fixed = make_surprise_fidelity("dsa:0.75", model=m1, train_inputs=x_train, bounds=(0, 1), cache=False)
    assert fixed.threshold == 0.75
    assert fixed.to_dict()["threshold"] == 0.75


@pytest.mark.parametrize(("spec", "match"), [
    ("dsa:abc", r"threshold in 'dsa:abc' must be 'dsa:T'"),
    ("dsa:-0.5", r"threshold in 'dsa:-0.5'"),
    ("mdsa:inf", r"threshold in 'mdsa:inf'"),
    ("dsa:nan", r"threshold in 'dsa:nan'"),
    ("dsa:", r"threshold in 'dsa:' is empty"),
    ("lsa:p0", r"percentile in 'lsa:p0' must be pQ with 0 < Q <= 100"),
    ("dsa:p100.5", r"percentile in 'dsa:p100.5'"),
    ("dsa:pxx", r"percentile in 'dsa:pxx'"),
    ("dsa:0.9:", r"state file in 'dsa:0.9:' is empty"),
    ("dsa::/no/such/state.npz", r"surprise state '/no/such/state.npz' .* does not exist"),
])
def test_bad_specs_are_refused_before_any_work(spec, match):
    with pytest.raises(DeepFaultError, match=match):
        parse_surprise_spec(spec)
    with pytest.raises(DeepFaultError, match=match):
        check_fidelity_spec(spec)
    with pytest.raises(DeepFaultError, match=match):  # the factory parses before it fits
        make_fidelity(spec, bounds=(0, 1), model=band_model())


def test_good_specs_parse():
    assert parse_surprise_spec("dsa") == sa_fid.SurpriseSpec("dsa", None, sa_fid.DEFAULT_PERCENTILE, None)
    assert parse_surprise_spec("LSA:-12.5").threshold == -12.5  # LSA may be negative
    assert parse_surprise_spec("mdsa:P97.5").percentile == 97.5
    check_fidelity_spec("ssim:0.9")
    with pytest.raises(DeepFaultError, match="SSIM threshold"):
        check_fidelity_spec("ssim:1.5")


def test_a_state_file_and_a_state_of_another_model(fitted, tmp_path):
    m1, x, _, state = fitted
    path = save_surprise(state, tmp_path / "m1.npz")
    fid = make_fidelity(f"dsa:0.5:{path}", bounds=(0, 1), model=m1)
    assert fid.threshold == 0.5
    assert fid.check(x).scores.shape == (len(x),)
    with pytest.raises(DeepFaultError, match="fitted for another model"):
        make_fidelity(f"dsa::{path}", bounds=(0, 1), model=band_model(noise=0.1), test_inputs=x)
    with pytest.raises(DeepFaultError, match="give model=M1"):
        make_fidelity("dsa:0.5", bounds=(0, 1), train_inputs=x)
    with pytest.raises(DeepFaultError, match="training split, and there is none"):
        make_fidelity("dsa:0.5", bounds=(0, 1), model=m1, train_inputs=x[:0])
    with pytest.raises(DeepFaultError, match="give the threshold as a number"):
        make_fidelity("dsa:p90", bounds=(0, 1), model=m1, train_inputs=x)


def test_the_fit_and_the_test_scores_are_cached(fitted, tmp_path, monkeypatch):
    m1, x, x_train, _ = fitted
    monkeypatch.setenv("DEEPFAULT_CACHE", str(tmp_path))
    first = make_fidelity("dsa:p95", bounds=(0, 1), model=m1, train_inputs=x_train, test_inputs=x)
    files = sorted(p.name for p in (tmp_path / "surprise").iterdir())
    assert len(files) == 2  # the state (shared with run and xplore) and the test scores
    assert files[1].startswith("test-")

    def no_refit(*a, **k):
        raise AssertionError("fitted again")

    monkeypatch.setattr("deepfault.coverage.surprise_cache.fit_surprise", no_refit)
    monkeypatch.setattr("deepfault.coverage.surprise.surprise_scores", no_refit)
    again = make_fidelity("dsa:p95", bounds=(0, 1), model=m1, train_inputs=x_train, test_inputs=x)
    assert again.threshold == first.threshold
    np.testing.assert_array_equal(again.surprise.ats, first.surprise.ats)
    # other training data, or another M1, is another state
    with pytest.raises(AssertionError, match="fitted again"):
        make_fidelity("dsa:0.5", bounds=(0, 1), model=m1, train_inputs=x_train[:-1])
    with pytest.raises(AssertionError, match="fitted again"):
        make_fidelity("dsa:0.5", bounds=(0, 1), model=band_model(noise=0.01), train_inputs=x_train)
