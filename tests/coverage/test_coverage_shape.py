"""Coverage's entries in the one call shape (issue 40): ``fn(model, data, config, runtime=...)``,
the old keyword forms (a FutureWarning, the same results), the declared constraints, the outcomes,
and the surprise coverages as criteria the one loop feeds with scores.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
import torch

from deepfault.core.constraints import constraints, undeclared
from deepfault.core.outcome import Outcome
from deepfault.core.runtime import Runtime
from deepfault.coverage import (
    CoverageConfig,
    ProfileConfig,
    SurpriseConfig,
    compute_profile,
    fit_surprise,
    load_profile,
    measure_coverage,
    rank_inputs,
)
from deepfault.coverage.scored import SurpriseCoverage
from deepfault.errors import DeepFaultError
from helpers.tiny_models import chain_model, has_hooks


@pytest.fixture(scope="module")
def setup():
    # a model that predicts every class: a surprise fit needs two traces of each
    model = chain_model(seed=11, widths=(8, 6, 5), classes=3)
    gen = torch.Generator().manual_seed(0)
    train = torch.randn(240, 4, generator=gen)
    x = torch.randn(70, 4, generator=gen)
    with torch.no_grad():
        y = model(x).argmax(1)
    y[::4] = (y[::4] + 1) % 3
    state = fit_surprise(model, train, SurpriseConfig(layers=("fc2",)))
    profile = compute_profile(model, train)
    return model, train, x, y, state, profile


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn(*args, **kwargs)


def test_every_field_is_declared_and_every_hostile_value_refused():
    for cls in (CoverageConfig, ProfileConfig, SurpriseConfig):
        assert undeclared(cls) == []
        for name, c in constraints(cls).items():
            for bad in c.invalid():
                with pytest.raises(DeepFaultError, match="must be|unknown|no prioritiser|no coverage|needs"):
                    cls(**{name: bad})


def test_a_config_normalises_its_names():
    c = CoverageConfig(criteria="NC, tknc,nc", threshold=[0, (0.5, 0)], by="gini,cam", layers=["fc1"])
    assert (c.criteria, c.threshold, c.by) == (("nc", "tknc"), (0.0, 0.5), ("gini", "cam"))
    assert c.layers == ("fc1",)
    assert CoverageConfig(criteria="all").criteria[0] == "nc"
    with pytest.raises(DeepFaultError, match="unknown coverage criterion 'bogus'"):
        CoverageConfig(criteria="nc,bogus")
    with pytest.raises(DeepFaultError, match="profile must be a Profile or the path of one; got 3"):
        CoverageConfig(profile=3)


def test_measure_new_shape_equals_the_old_keywords(setup):
    model, _, x, _, state, profile = setup
    config = CoverageConfig(criteria="nc,kmnc,tknc,lsc,dsc", threshold=(0, 0.5), profile=profile,
                            surprise=state, sa_sections=20)
    new = _quiet(measure_coverage, model, x, config, runtime=Runtime(batch_size=16))
    with pytest.warns(FutureWarning, match=r"pass config=CoverageConfig\(criteria=\.\.\."):
        old = measure_coverage(model, x, criteria="nc,kmnc,tknc,lsc,dsc", threshold=[0, 0.5], profile=profile,
                               surprise=state, sa_sections=20, batch_size=16)
    a, b = new.to_dict(), old.to_dict()
    a.pop("seconds"), b.pop("seconds")
    assert a == b
    assert isinstance(new, Outcome)
    assert new.payload()["results"] == a["results"]
    assert not has_hooks(model)


def test_a_scored_criterion_reads_the_scores_the_loop_feeds_it(setup):
    model, _, x, _, state, _ = setup
    report = measure_coverage(model, x, CoverageConfig(criteria="nc,dsc", surprise=state, sa_sections=8),
                              runtime=Runtime(batch_size=9))
    sc = SurpriseCoverage("dsc", sections=8)
    assert sc.reads == "dsa"
    sc.update(report.scores["dsa"])
    assert report.result("dsc").covered == sc.compute().covered
    # the growth curve is redrawn with the final bound, whatever the batches were
    marks = [m for m, _ in report.growth["nc(threshold=0)"]]
    assert report.growth[report.result("dsc").label] == sc.growth(marks)
    whole = measure_coverage(model, x, CoverageConfig(criteria="nc,dsc", surprise=state, sa_sections=8))
    assert whole.growth == report.growth


def test_one_forward_pass_with_neuron_and_scored_criteria(setup):
    model, _, x, _, state, profile = setup
    calls: list[int] = []
    handle = model.register_forward_pre_hook(lambda m, a: calls.append(len(a[0])))
    try:
        config = CoverageConfig(criteria="nc,kmnc,lsc,dsc,mdsc", profile=profile, surprise=state)
        measure_coverage(model, x, config, runtime=Runtime(batch_size=32))
    finally:
        handle.remove()
    assert sum(calls) == len(x)


def test_rank_labels_go_with_the_data(setup):
    model, _, x, y, state, _ = setup
    config = CoverageConfig(by="gini,dsa,cam", surprise=state)
    new = _quiet(rank_inputs, model, (x, y), config)
    with pytest.warns(FutureWarning, match="pass the labels with the data"):
        old = rank_inputs(model, x, y, by="gini,dsa,cam", surprise=state)
    for a, b in zip(new.rankings, old.rankings, strict=True):
        assert a.name == b.name
        np.testing.assert_array_equal(a.order, b.order)
    assert "earliest: " in new.summary()


def test_output_kind_goes_with_the_model(setup):
    from deepfault.models.prepare import prepare_model

    _, _, x, y, _, _ = setup
    probs = torch.nn.Sequential(chain_model(seed=3, widths=(8, 6, 5), classes=3), torch.nn.Softmax(dim=1))
    new = rank_inputs(prepare_model(probs, output_kind="probabilities"), (x, y), CoverageConfig(by="entropy"))
    with pytest.warns(FutureWarning, match="output_kind"):
        old = rank_inputs(probs, x, y, by="entropy", output_kind="probabilities")
    np.testing.assert_array_equal(new.rankings[0].order, old.rankings[0].order)


def test_states_by_path(setup, tmp_path):
    model, _, x, y, state, profile = setup
    path = profile.save(tmp_path / "p.npz")
    by_path = measure_coverage(model, x, CoverageConfig(criteria="kmnc", profile=str(path)))
    by_object = measure_coverage(model, x, CoverageConfig(criteria="kmnc", profile=load_profile(path)))
    assert by_path.results == by_object.results
    record = CoverageConfig(criteria="kmnc", profile=str(path)).record("measure", 32).to_dict()
    assert (record["profile"], record["batch_size"]) == (str(path), 32)
    assert "by" not in record


def test_fits_are_outcomes_and_keep_their_old_form(setup, tmp_path):
    model, train, _, _, _, profile = setup
    with pytest.warns(FutureWarning, match=r"ProfileConfig\(layers=\.\.\.\)"):
        old = compute_profile(model, train, layers=["fc1"])
    new = compute_profile(model, train, ProfileConfig(layers=("fc1",)))
    np.testing.assert_array_equal(old.low, new.low)
    assert "mean std" in new.summary()
    (artifact,) = new.outputs()
    assert load_profile(artifact.write(tmp_path / "p.npz")).count == len(train)
    with pytest.warns(FutureWarning, match=r"SurpriseConfig\(var_threshold=\.\.\.\)"):
        a = fit_surprise(model, train, var_threshold=None)
    b = fit_surprise(model, train, SurpriseConfig(var_threshold=None))
    np.testing.assert_array_equal(a.ats, b.ats)
    assert "inputs per class (by predictions" in b.summary()


def test_a_prepared_model_fits_its_surprise_state_on_its_training_split():
    from deepfault.data import as_dataset
    from deepfault.models.prepare import prepare_model

    # a model that predicts every class: a surprise fit needs two traces of each
    model = chain_model(seed=11, widths=(8, 6, 5), classes=3)
    gen = torch.Generator().manual_seed(1)
    train, test = torch.randn(200, 4, generator=gen), torch.randn(30, 4, generator=gen)
    with torch.no_grad():
        data = dataclasses.replace(as_dataset((train, model(train).argmax(1)), name="toy"),
                                   x_test=test.numpy(), y_test=model(test).argmax(1).numpy())
    prepared = prepare_model(model, data)
    report = rank_inputs(prepared, data, CoverageConfig(by="dsa"))
    assert report.surprise["source"] == "fitted on toy train"
    assert "no --surprise given: fitted surprise adequacy on toy train (200 inputs" in report.summary()
    with pytest.raises(DeepFaultError, match="surprise adequacy needs a state"):
        rank_inputs(model, data, CoverageConfig(by="dsa"))
