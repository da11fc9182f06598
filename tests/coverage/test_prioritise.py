"""``rank_inputs(by=...)`` and the surprise coverages of ``measure_coverage``: every prioritiser's
order, APFD and direction, one forward pass, batch-size independence, labels from a loader."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from deepfault.coverage import (
    apfd,
    build_criteria,
    fit_surprise,
    measure_coverage,
    rank_inputs,
    save_surprise,
    surprise_coverage,
    surprise_scores,
    uncertainty_scores,
)
from deepfault.coverage import reference as ref
from deepfault.coverage.criteria import make_criterion
from deepfault.coverage.measure import SCORE_CRITERIA, SurpriseCoverage, parse_criteria
from deepfault.coverage.rank import DEFAULT_BY, list_prioritisers, parse_by, prioritize, rank_criterion
from deepfault.coverage.report import layer_tables, surprise_table
from deepfault.errors import DeepFaultError
from helpers.float_tolerance import (
    assert_close_two_ways,
    assert_orders_agree,
    surprise_condition,
    two_way_rtol,
)
from helpers.tiny_models import chain_model, has_hooks

UNCERTAIN = ("gini", "margin", "entropy", "confidence")

# The float32 sums behind the setup's scores (each Linear adds in_features products and a bias):
# the logits went through fc1 (4 + 1 terms), fc2 (8 + 1), fc3 (6 + 1) and the logits (5 + 1); the
# surprise state's traces (fc2) through the first two. The scores themselves (uncertainty over the
# logits, surprise distances over the traces) are float64 and add nothing beside float32's rounding;
# LSA's and MDSA's whitening stretches the traces' error by _condition's factor.
LOGITS_TERMS = 5 + 9 + 7 + 6
FC2_TERMS = 5 + 9
SURPRISE = ("lsa", "dsa", "mdsa")


def _condition(kind: str, state) -> float:
    return 1.0 if kind == "dsa" else surprise_condition(state.ats, state.classes)


@pytest.fixture(scope="module")
def setup():
    """A seeded MLP (layers fc1, fc2, fc3 before the logits), training and test inputs, labels
    that make some inputs fail, and a surprise state on fc2 (not the coverage layers' last).
    """
    # a model that predicts every class: a surprise fit needs two traces of each
    model = chain_model(seed=11, widths=(8, 6, 5), classes=3)
    gen = torch.Generator().manual_seed(0)
    train = torch.randn(240, 4, generator=gen)
    x = torch.randn(70, 4, generator=gen)
    with torch.no_grad():
        y = model(x).argmax(1)
    y[::4] = (y[::4] + 1) % 3  # every fourth input fails
    state = fit_surprise(model, train, layers=["fc2"])
    assert len(np.unique(state.classes)) >= 2
    return model, train, x, y, state


# --------------------------------------------------------------------------- by=


def test_parse_by():
    assert parse_by("gini, CAM,gini") == ("gini", "cam")
    assert parse_by(["lsa", "dsa"]) == ("lsa", "dsa")
    assert parse_by("all") == tuple(list_prioritisers())
    assert list_prioritisers() == [*UNCERTAIN, "lsa", "dsa", "mdsa", "cam", "ctm"]
    assert set(DEFAULT_BY) == {*UNCERTAIN, "cam", "ctm"}
    with pytest.raises(DeepFaultError, match=r"unknown prioritiser 'bogus'; known: gini, margin, .*, all"):
        parse_by("gini,bogus")
    with pytest.raises(DeepFaultError, match="no prioritiser given"):
        parse_by(" , ")


@pytest.mark.float_sensitive
def test_every_prioritiser_orders_by_its_score_and_its_apfd_is_the_orders(setup):
    model, _, x, y, state = setup
    report = rank_inputs(model, x, y, by="all", surprise=state, criteria="nc,tknc")
    assert [r.name for r in report.rankings] == [*UNCERTAIN, "lsa", "dsa", "mdsa", "cam:nc(threshold=0)",
                                                  "cam:tknc(top_k=1)", "ctm:nc(threshold=0)",
                                                  "ctm:tknc(top_k=1)"]
    failing = (model(x).argmax(1) != y).numpy()
    assert report.failing.tolist() == failing.tolist()
    assert report.num_failing == int(failing.sum()) > 0
    with torch.no_grad():
        logits = model(x)
    sa = surprise_scores(model, x, state, kinds="all")
    for r in report.rankings:
        assert sorted(r.order.tolist()) == list(range(len(x)))
        assert r.apfd == pytest.approx(apfd(r.order, report.failing))
        assert r.apfd == pytest.approx(ref.apfd_reference(r.order.tolist(), failing.tolist()))
        assert r.seconds >= 0
        if r.prioritiser == "cam":
            assert r.scores is None
            continue
        assert r.scores is not None
        s = r.scores[r.order]
        steps = np.diff(s) if r.ascending else -np.diff(s)
        assert (steps >= 0).all(), r.name  # lowest first when ascending, else highest first
        tied = np.diff(s) == 0
        assert (np.diff(r.order)[tied] > 0).all(), r.name  # ties to the lower index
    for name in UNCERTAIN:  # the model's logits over all inputs at once against rank_inputs' batches
        assert_close_two_ways(report.ranking(name).scores, uncertainty_scores(logits, name),
                              n=LOGITS_TERMS, dtype=torch.float32, err_msg=name)
    assert report.ranking("confidence").ascending
    assert report.ranking("margin").ascending
    assert not report.ranking("gini").ascending
    assert not report.ranking("entropy").ascending
    for kind in SURPRISE:
        assert_close_two_ways(report.ranking(kind).scores, sa[kind], n=FC2_TERMS, dtype=torch.float32,
                              condition=_condition(kind, state), err_msg=kind)
        assert report.ranking(kind).ascending is False
    assert report.layout is not None
    assert report.surprise["layers"] == [{"name": "fc2", "size": 6}]
    assert not has_hooks(model)


def test_coverage_orders_are_todays(setup):
    """by='cam' is the coverage-additional order of earlier versions, with ctm's APFD beside it."""
    model, _, x, y, _ = setup
    report = rank_inputs(model, x, y, by="cam,ctm", criteria="nc")
    cam, ctm = report.rankings
    values = _values(model, x)
    old = rank_criterion(make_criterion("nc", report.layout), values, report.failing)
    assert cam.order.tolist() == old.order.tolist()
    assert cam.greedy == old.greedy
    assert cam.apfd == old.apfd
    assert cam.apfd_total == ctm.apfd
    items, num = make_criterion("nc", report.layout).input_items(values)
    assert cam.order.tolist() == prioritize(items, num)[0].tolist()
    assert ctm.scores is not None
    assert ctm.order.tolist() == np.argsort(-ctm.scores, kind="stable").tolist()
    assert (cam.criterion, cam.covered, cam.total) == ("nc(threshold=0)", old.covered, old.total)


def _values(model, x):
    from deepfault.core.batches import activations

    return activations(model, x)[1]


@pytest.mark.float_sensitive
def test_the_orders_do_not_depend_on_the_batch_size(setup):
    """Another batch size regroups the forward pass's float32 sums: the scores move within the
    float32 tolerance of their sums, the orders only among scores that close."""
    model, _, x, y, state = setup
    whole = rank_inputs(model, x, y, by="all", surprise=state, batch_size=1024)
    small = rank_inputs(model, x, y, by="all", surprise=state, batch_size=7)
    # the coverage orders count items (nc: a value above 0, tknc: a layer's top value): exact, for
    # no value lies within the float32 tolerance of 0 and no layer's top two that close
    values = _values(model, x).double()
    atol = two_way_rtol(LOGITS_TERMS, torch.float32) * float(values.abs().max())
    assert float(values.abs().min()) > atol
    start = 0
    for layer in whole.layout.layers:
        top = values[:, start : start + layer.size].topk(2, dim=1).values
        assert float((top[:, 0] - top[:, 1]).min()) > 2 * atol, layer.name
        start += layer.size
    for a, b in zip(whole.rankings, small.rankings, strict=True):
        assert a.name == b.name
        if a.prioritiser in ("cam", "ctm"):  # coverage counts: exact (above)
            assert a.order.tolist() == b.order.tolist(), a.name
            if a.scores is not None:
                np.testing.assert_array_equal(a.scores, b.scores, err_msg=a.name)
            continue
        if a.prioritiser in SURPRISE:
            atol = assert_close_two_ways(b.scores, a.scores, n=FC2_TERMS, dtype=torch.float32,
                                         condition=_condition(a.prioritiser, state), err_msg=a.name)
        else:
            atol = assert_close_two_ways(b.scores, a.scores, n=LOGITS_TERMS, dtype=torch.float32,
                                         err_msg=a.name)
        assert_orders_agree(a.order, b.order, a.scores, atol=atol, err_msg=a.name)


def test_scores_stream_without_coverage(setup):
    """Without cam/ctm no neuron values are kept: no layout, and the surprise traces come from
    the state's own capture."""
    model, _, x, y, state = setup
    report = rank_inputs(model, x, y, by="gini,dsa", surprise=state)
    assert report.layout is None
    assert report.transform is None
    assert [r.name for r in report.rankings] == ["gini", "dsa"]
    d = report.to_dict()
    assert d["layers"] is None
    assert d["num_failing"] == report.num_failing
    assert len(d["rankings"][1]["scores"]) == len(x)
    json.dumps(d, allow_nan=False)


def test_one_forward_pass_for_every_prioritiser(setup):
    model, _, x, y, state = setup
    calls = []
    handle = model.register_forward_pre_hook(lambda m, a: calls.append(len(a[0])))
    try:
        rank_inputs(model, x, y, by="all", surprise=state, batch_size=32)
        assert calls == [32, 32, 6]
        calls.clear()
        measure_coverage(model, x, criteria="nc,lsc,dsc,mdsc", surprise=state, batch_size=32)
        assert calls == [32, 32, 6]
    finally:
        handle.remove()
    assert not has_hooks(model)


@pytest.mark.float_sensitive
def test_labels_come_from_a_loader(setup):
    model, _, x, y, _ = setup
    loader = DataLoader(TensorDataset(x, y), batch_size=16)
    a = rank_inputs(model, loader, by="gini,margin")
    b = rank_inputs(model, x, y, by="gini,margin")  # other batches than the loader's 16
    assert a.failing.tolist() == b.failing.tolist()
    for r, s in zip(a.rankings, b.rankings, strict=True):
        assert r.name == s.name
        atol = assert_close_two_ways(r.scores, s.scores, n=LOGITS_TERMS, dtype=torch.float32, err_msg=r.name)
        assert_orders_agree(s.order, r.order, s.scores, atol=atol, err_msg=r.name)
    assert a.labels.tolist() == y.tolist()


def test_probabilities_are_not_softmaxed_again(setup):
    model, _, x, y, _ = setup
    probs = nn.Sequential(model, nn.Softmax(dim=1))
    a = rank_inputs(probs, x, y, by="confidence,entropy", output_kind="probabilities")
    b = rank_inputs(model, x, y, by="confidence,entropy")
    for r, s in zip(a.rankings, b.rankings, strict=True):
        np.testing.assert_allclose(r.scores, s.scores, rtol=1e-5, atol=1e-6)  # the model's float32 softmax


def test_a_surprise_state_from_a_file(setup, tmp_path):
    model, _, x, y, state = setup
    path = save_surprise(state, tmp_path / "s.npz")
    a = rank_inputs(model, x, y, by="mdsa", surprise=str(path))
    b = rank_inputs(model, x, y, by="mdsa", surprise=state)
    assert a.rankings[0].order.tolist() == b.rankings[0].order.tolist()


def test_scores_that_are_no_number_are_refused_not_ranked(setup):
    """Issue 43: a state without traces of a class (read from an older file) scores its inputs
    ``inf``; the ranking refuses, naming how many, instead of ordering them first."""
    model, train, x, y, state = setup
    from deepfault.coverage.surprise import Surprise

    pred = model(x).argmax(1).numpy()
    missing = int(np.bincount(pred, minlength=3).argmax())
    keep = state.classes != missing
    thin = Surprise(state.layers, state.sizes, state.transform, state.model_hash, state.num_classes,
                    state.ats[keep], state.classes[keep])
    count = int((pred == missing).sum())
    with pytest.raises(DeepFaultError, match=rf"dsa is not a number for {count} of {len(x)} inputs .*"
                       rf"fewer than 2 training traces of class\(es\) {missing}"):
        rank_inputs(model, x, y, by="dsa", surprise=thin)


def test_bad_input_to_rank(setup):
    model, _, x, y, state = setup
    with pytest.raises(DeepFaultError, match="unknown prioritiser 'dsc'"):
        rank_inputs(model, x, y, by="dsc")
    with pytest.raises(DeepFaultError, match="surprise adequacy needs a state fitted on the training data"):
        rank_inputs(model, x, y, by="lsa")
    with pytest.raises(DeepFaultError, match="surprise must be a Surprise or the path of one"):
        rank_inputs(model, x, y, by="lsa", surprise=3)
    with pytest.raises(DeepFaultError, match="fitted for another model"):
        rank_inputs(chain_model(seed=4, widths=(8, 6, 5)), x, y, by="lsa", surprise=state)
    with pytest.raises(DeepFaultError, match=r"lsc cover one score per input .*\(by='lsa'\)"):
        rank_inputs(model, x, y, by="cam", criteria="nc,lsc")
    with pytest.raises(DeepFaultError, match="labels"):
        rank_inputs(model, x, None, by="gini")
    assert not has_hooks(model)


def test_report_lookups(setup):
    model, _, x, y, _ = setup
    report = rank_inputs(model, x, y, by="gini,margin,cam")
    assert report.ranking("cam").name == "cam:nc(threshold=0)"
    best = report.best()
    assert best is not None
    assert best.apfd == max(r.apfd for r in report.rankings)
    found = report.ranking("gini").found(report.failing)
    assert found[-1] == 1.0
    assert (np.diff(found) >= 0).all()
    with pytest.raises(DeepFaultError, match="no ranking 'lsa'; have: gini, margin"):
        report.ranking("lsa")


# --------------------------------------------------------------------------- surprise coverage


@pytest.mark.float_sensitive
def test_surprise_coverage_criteria(setup):
    model, _, x, _, state = setup
    report = measure_coverage(model, x, criteria="nc,lsc,dsc,mdsc", surprise=state, sa_sections=20)
    labels = [r.label for r in report.results]
    assert labels[0] == "nc(threshold=0)"
    sa = surprise_scores(model, x, state, kinds="all")
    for r, kind in zip(report.results[1:], ("lsa", "dsa", "mdsa"), strict=True):
        s = sa[kind]
        fin = s[np.isfinite(s)]
        upper = float(np.nextafter(fin.max(), math.inf))  # the largest score falls in the last bucket
        assert r.params == {"sections": 20, "upper": pytest.approx(upper, rel=1e-6)}
        want = surprise_coverage(s, upper=r.params["upper"], sections=20)
        assert (r.covered, r.total, r.ratio) == (int(want.sum()), 20, want.mean())
        assert want[-1]
        assert report.growth[r.label][-1] == (len(x), r.covered)
        assert report.surprise["criteria"][r.criterion]["upper_from"] == "inputs"
        assert_close_two_ways(report.scores[kind], s, n=FC2_TERMS, dtype=torch.float32,
                              condition=_condition(kind, state), err_msg=kind)
    assert report.layout.names == ("fc1", "fc2", "fc3")  # the coverage layers, not the state's
    assert [t.title for t in layer_tables(report)] == ["nc (covered/items)"]
    table = surprise_table(report)
    assert [row[0] for row in table.rows] == ["lsc", "dsc", "mdsc"]
    d = report.to_dict()
    assert d["surprise"]["state"]["layers"] == [{"name": "fc2", "size": 6}]
    json.dumps(d, allow_nan=False)
    assert not has_hooks(model)


@pytest.mark.float_sensitive
def test_surprise_coverage_with_a_given_bound_and_alone(setup):
    model, _, x, _, state = setup
    report = measure_coverage(model, x, criteria="dsc", surprise=state, sa_upper=1.5, sa_sections=5)
    dsa = surprise_scores(model, x, state, kinds="dsa")["dsa"]
    r = report.results[0]
    assert r.label == "dsc(sections=5, upper=1.5)"
    assert r.covered == int(surprise_coverage(dsa, upper=1.5, sections=5).sum())
    assert report.layout.names == ("fc2",)
    assert report.transform == "raw"
    assert report.surprise["criteria"]["dsc"]["upper_from"] == "given"
    assert report.surprise["criteria"]["dsc"]["at_or_above_upper"] == int((dsa >= 1.5).sum())
    # other batches move each score within the float32 tolerance of fc2's sums; the counts below are
    # exact because no score lies that close to a bucket's edge
    edges = np.linspace(0.0, 1.5, 6)
    finite = dsa[np.isfinite(dsa)]
    margin = two_way_rtol(FC2_TERMS, torch.float32) * np.abs(finite).max()
    assert np.abs(finite[:, None] - edges[None, :]).min() > margin
    small = measure_coverage(model, x, criteria="dsc", surprise=state, sa_upper=1.5, sa_sections=5,
                             batch_size=9)
    assert small.results == report.results
    assert small.growth == report.growth


def test_surprise_coverage_accumulator():
    sc = SurpriseCoverage("lsc", sections=4)
    assert sc.bound() is None
    assert sc.compute().covered == 0
    sc.update([-3.0, math.inf])
    assert sc.bound() is None  # nothing finite above 0: nothing covered
    sc.update([0.0, 1.5, 4.0])
    r = sc.compute()
    assert r.params["upper"] == np.nextafter(4.0, math.inf)
    assert r.covered == 3  # buckets of 0, 1.5 and 4 (the last)
    assert sc.growth([1, 2, 3, 5, 9]) == ((1, 0), (2, 0), (3, 1), (5, 3))
    assert sc.summary()["not_finite"] == 1
    assert sc.summary()["negative"] == 1


def test_surprise_coverage_bad_input(setup):
    model, _, x, _, state = setup
    assert "lsc" not in parse_criteria("all")
    assert set(SCORE_CRITERIA) == {"lsc", "dsc", "mdsc"}
    with pytest.raises(DeepFaultError, match="unknown coverage criterion 'lsx'; known: .*; "
                                             "surprise coverage: "
                                             "lsc, dsc, mdsc"):
        measure_coverage(model, x, criteria="lsx")
    with pytest.raises(DeepFaultError, match="surprise adequacy needs a state"):
        measure_coverage(model, x, criteria="nc,lsc")
    with pytest.raises(DeepFaultError, match="sa_upper must be a finite number > 0"):
        measure_coverage(model, x, criteria="lsc", surprise=state, sa_upper=0)
    with pytest.raises(DeepFaultError, match="sa_sections must be an integer >= 1; got 0"):
        measure_coverage(model, x, criteria="lsc", surprise=state, sa_sections=0)
    with pytest.raises(DeepFaultError, match="cover one score per input, not neurons"):
        build_criteria("nc,lsc", state.layout)
    assert not has_hooks(model)


# --------------------------------------------------------------------------- pages


def test_the_pages(setup, tmp_path):
    pytest.importorskip("matplotlib")
    from deepfault.coverage.report import measure_page, rank_page

    model, _, x, y, state = setup
    report = rank_inputs(model, x, y, by="all", surprise=state)
    page = rank_page(report, tmp_path, model_name="chain", data_name="random")
    assert sorted(p.name for p in page["figures"]) == ["rank_curves.png", "rank_scores.png"]
    best = report.best()
    assert page["html"].index(f"{best.name} found the {report.num_failing} misclassified") < \
        page["html"].index("Ranking curves")
    assert [a for a, _ in page["nav"]][:2] == ["answer", "first"]
    with torch.no_grad():
        right = model(x).argmax(1)
    none = rank_page(rank_inputs(model, x, right, by="gini,margin"), tmp_path / "none", model_name="chain",
                     data_name="random")
    assert "classifies all 70 inputs correctly" in none["html"]
    measured = measure_coverage(model, x, criteria="dsc,mdsc", surprise=state, sa_sections=10)
    page = measure_page(measured, tmp_path / "m", model_name="chain", data_name="random")
    assert [a for a, _ in page["nav"]] == ["summary", "surprise", "figure-growth", "figure-surprise"]
    assert "coverage_surprise.png" in {p.name for p in page["figures"]}
