"""``regress`` in the one call shape (issue 40): ``regress((m1, m2), data, config, runtime=)``, the
old keyword form's warning and equal results, an outcome that shows and writes itself, and a
configuration whose every field declares what it accepts (the API and the command line alike)."""

from __future__ import annotations

import argparse
import dataclasses
import warnings

import numpy as np
import pytest

from deepfault.cli._common import add_field
from deepfault.core.constraints import Flag, constraints, undeclared
from deepfault.core.runtime import Runtime
from deepfault.errors import DeepFaultError
from deepfault.fuzz import CampaignConfig, RegressOutcome, Versions, regress
from helpers.hardening import write_regress_pair

CONFIG = CampaignConfig(budget="12it", inputs_per_step=4, seed=1, fidelity="ssim:0.5")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("shape")
    write_regress_pair(d, 40)
    return d


def _same(a: RegressOutcome, b: RegressOutcome) -> None:
    timed = {"seconds_to_first_rf", "urf_per_minute"}
    assert ({k: v for k, v in a.result.metrics.to_dict().items() if k not in timed}
            == {k: v for k, v in b.result.metrics.to_dict().items() if k not in timed})
    fa, fb = a.result.fault_arrays(), b.result.fault_arrays()
    for name in ("inputs", "seed_index", "label", "m2_pred"):
        np.testing.assert_array_equal(fa[name], fb[name])
    assert a.experiment == b.experiment
    assert a.result.config.to_dict() == b.result.config.to_dict()


def test_the_one_shape_and_the_old_form_give_the_same_campaign(files):
    data = str(files / "data.npz")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the one shape warns about nothing
        new = regress((files / "m1.pt", files / "m2.pt"), data, CONFIG)
        again = regress(Versions(files / "m1.pt", files / "m2.pt"), data, config=CONFIG,
                        runtime=Runtime(threads=1))
    with pytest.warns(FutureWarning, match=r"regress\(m1, m2, dataset=\.\.\., \.\.\.\) is deprecated"):
        old = regress(files / "m1.pt", files / "m2.pt", dataset=data, budget="12it", inputs_per_step=4,
                      seed=1, fidelity="ssim:0.5")
    assert new.result.iterations == 12
    _same(new, again)  # seeded: the same campaign, whatever the threads
    _same(new, old)
    assert new.names == ("m1.pt", "m2.pt")


def test_the_store_and_the_campaign_go_in_the_runtime_and_the_config(files):
    store = files / "s.sqlite"
    config = dataclasses.replace(CONFIG, campaign="mine")
    seen = []
    first = regress((files / "m1.pt", files / "m2.pt"), str(files / "data.npz"), config,
                    runtime=Runtime(store=store, progress=seen.append))
    assert (first.cell, first.store, first.store_state.status) == ("mine", str(store), "new")
    assert type(seen[0]).__name__ == "StoreState"  # said before any work, then the steps
    assert type(seen[-1]).__name__ == "CampaignProgress"
    done = regress((files / "m1.pt", files / "m2.pt"), str(files / "data.npz"), config,
                   runtime=Runtime(store=store))
    assert done.store_state.status == "finished"
    _same(first, done)
    fresh = regress((files / "m1.pt", files / "m2.pt"), str(files / "data.npz"),
                    dataclasses.replace(config, fresh=True), runtime=Runtime(store=store))
    assert fresh.store_state.status == "new" or "fresh" in fresh.store_state.line()
    # where a campaign is kept is no part of what it computes
    assert config.key() == CONFIG.key() == dataclasses.replace(CONFIG, fresh=True, experiment="e").key()


def test_the_outcome_shows_and_writes_itself(files, tmp_path):
    out = regress((files / "m1.pt", files / "m2.pt"), str(files / "data.npz"), CONFIG)
    text = out.summary()
    lines = text.splitlines()
    assert lines[0].startswith("regress m1.pt -> m2.pt: ")  # the answer first
    assert lines[-1].startswith("verdict: ")
    assert "regress: drfuzz on m1.pt -> m2.pt, budget 12it, 4 inputs per step, seed 1, ssim:0.5 check" in text
    body = out.payload()
    assert "config" not in body  # the result document's envelope holds it
    assert body["models"]["m1"]["file"] == str(files / "m1.pt")
    assert body["dataset"]["name"] == "data"
    assert body["metrics"] == out.to_dict()["metrics"]
    written = {a.name: a.write(tmp_path / f"f{a.suffix}") for a in out.outputs()}
    with np.load(written["faults"]) as f:
        assert len(f["inputs"]) == out.result.metrics.rf
    assert written["grid"] is None or written["grid"].is_file()


def test_a_fidelity_left_at_its_default_follows_the_inputs():
    default = CampaignConfig()
    assert default.fidelity == "discriminator"
    assert default.for_inputs("image").fidelity == "discriminator"
    assert default.for_inputs("vector").fidelity == "mdsa"
    assert default.for_inputs("sequence").fidelity == "mdsa"
    chosen = CampaignConfig(fidelity="discriminator")  # chosen: refused for vectors later, not replaced
    assert chosen.for_inputs("vector").fidelity == "discriminator"
    assert default.key() == chosen.key()  # and stored alike


def test_every_field_is_declared_and_refused_alike_by_the_api_and_the_command_line():
    assert undeclared(CampaignConfig) == []
    parser = argparse.ArgumentParser(exit_on_error=False)
    for name in constraints(CampaignConfig):
        add_field(parser, CampaignConfig, name)
    for name, c in constraints(CampaignConfig).items():
        for bad in c.invalid():
            with pytest.raises(DeepFaultError, match=rf"^{name}\b"):
                CampaignConfig(**{name: bad})
            if isinstance(bad, str) and bad and not isinstance(c, Flag):  # 'yes' is a flag's text
                with pytest.raises(DeepFaultError):
                    c.parse("", bad)


@pytest.mark.parametrize(("settings", "words"), [
    ({"budget": "ten minutes"}, "budget must be a number with a unit"),
    ({"fidelity": "dsx:1"}, "fidelity must be one of .*; did you mean 'dsa'"),
    ({"fidelity": "ssim:2"}, r"fidelity must be ssim:T with a threshold 0 < T <= 1"),
    ({"shared_fidelity": "dsa:-1"}, r"shared_fidelity: the threshold in 'dsa:-1'"),
    ({"queue_memory": "lots"}, "queue_memory must be a size"),
    ({"criteria": "kmcn"}, "criteria must be one of .*did you mean 'kmnc'"),
    ({"campaign": "a/b"}, "campaign must be a plain name"),
    ({"inputs_per_step": 0}, "inputs_per_step must be an integer from 1 to 16,777,216"),
])
def test_what_the_command_line_checked_first_the_config_checks(settings, words):
    with pytest.raises(DeepFaultError, match=words):
        CampaignConfig(**settings)


def test_a_missing_model_file_and_a_bad_store_are_refused_before_any_work(files, tmp_path):
    with pytest.raises(DeepFaultError, match=r"model file .*nosuch.pt' \(--m2\) does not exist"):
        regress((files / "m1.pt", tmp_path / "nosuch.pt"), str(files / "data.npz"), CONFIG)
    (tmp_path / "folder").mkdir()
    with pytest.raises(DeepFaultError, match="store"):
        regress((files / "m1.pt", files / "m2.pt"), str(files / "data.npz"), CONFIG,
                runtime=Runtime(store=tmp_path / "folder"))
    with pytest.raises(DeepFaultError, match="models must be the pair"):
        regress(files / "m1.pt")
