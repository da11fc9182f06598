"""The gate on a scenario's pair (SUPPLY and QUANT-INT8 of a digits MLP, a few epochs): its flips
and accuracies equal what `deepfault scenario` counted on its own and what numpy counts from the
two models' predictions; a model against itself passes with zero flips."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from statsmodels.stats.contingency_tables import mcnemar

from deepfault.data import load_dataset
from deepfault.models import load_model
from helpers.hardening import cli


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("scenarios")  # one folder: the scenarios share the base model


@pytest.fixture(scope="module", params=["supply", "quant-int8"])
def pair(request, folder):
    status, _, err = cli(
        [
            "scenario",
            request.param,
            "--arch",
            "digits_mlp",
            "--dataset",
            "digits",
            "--epochs",
            "8",
            "--out",
            "sc",
            "--no-progress",
            "--threads",
            "1",
        ],
        folder,
    )
    assert status == 0, err
    return folder, json.loads((folder / "sc" / f"{request.param}-digits_mlp-digits.json").read_text())


def test_the_gate_on_a_scenario_pair_equals_the_scenario_and_numpy(pair):
    folder, scenario = pair
    m1, m2 = (str(folder / scenario[k]) for k in ("m1_path", "m2_path"))
    status, out, err = cli(
        [
            "gate",
            "--m1",
            m1,
            "--m2",
            m2,
            "--dataset",
            "digits",
            "--budget",
            "0",
            "--no-progress",
            "--out",
            "g.json",
        ],
        folder,
    )
    doc = json.loads((folder / "g.json").read_text())
    h = doc["heldout"]
    assert h["inputs"] == scenario["n_test"]
    assert (h["negative_flips"], h["positive_flips"]) == (scenario["regressions"], scenario["fixes"])
    assert h["accuracy_m1"] == pytest.approx(scenario["m1_accuracy"], abs=1e-6)
    assert h["accuracy_m2"] == pytest.approx(scenario["m2_accuracy"], abs=1e-6)
    data = load_dataset("digits")
    x, y = torch.as_tensor(data.x_test), data.y_test
    with torch.no_grad():
        p1, p2 = (load_model(m).model.eval()(x).argmax(1).numpy() for m in (m1, m2))
    neg = (p1 == y) & (p2 != y)
    assert [c["negative_flips"] for c in h["classes"]] == list(np.bincount(y[neg], minlength=10))
    b, c = int(neg.sum()), int(((p1 != y) & (p2 == y)).sum())
    assert h["mcnemar_p"] == pytest.approx(mcnemar(np.array([[0, b], [c, 0]]), exact=True).pvalue, rel=1e-9)
    expected = 1 if doc["verdict"] == "fail" else 0
    assert status == expected, (out, err)
    assert doc["verdict"] == ("fail" if h["negative_flip_rate"] > 0.01 else doc["verdict"])


def test_a_scenario_model_against_itself_passes(pair):
    folder, scenario = pair
    m1 = str(folder / scenario["m1_path"])
    status, out, _ = cli(
        ["gate", "--m1", m1, "--m2", m1, "--dataset", "digits", "--budget", "0", "--no-progress"], folder
    )
    assert status == 0, out
    assert "negative flips 0 (0.00%), positive flips 0 (0.00%)" in out
