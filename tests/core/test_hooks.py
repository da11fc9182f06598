"""No forward hook may be left on a model after any entry point, error paths included."""

import numpy as np
import pytest
import torch

import deepfault as df
from deepfault.data import Dataset
from deepfault.localization.protocol import RunConfig, run_deepfault
from helpers.tiny_models import chain_model, has_hooks, random_data


def _data():
    x, y = random_data(30, seed=4)
    return Dataset("tiny", x, y, x, y, (0.0, 1.0), ("a", "b", "c"))


CALLS = {
    "activations": lambda m, x, y: df.activations(m, x),
    "activations_bad_layer": lambda m, x, y: df.activations(m, x, layers=["zz"]),
    "spectrum": lambda m, x, y: df.compute_spectrum(m, x, y),
    "spectrum_bad_shape": lambda m, x, y: df.compute_spectrum(m, np.zeros((2, 9)), y[:2]),
    "class_spectra": lambda m, x, y: df.compute_class_spectra(m, x, y, [0, 1]),
    "synthesize": lambda m, x, y: df.synthesize(m, x, [("fc2", 1)]),
    "synthesize_bad_unit": lambda m, x, y: df.synthesize(m, x, [("fc2", 99)]),
    "evaluate": lambda m, x, y: df.evaluate(m, x, x, y, [("fc1", 0)]),
    "run": lambda m, x, y: run_deepfault(m, _data(), RunConfig(k=3)),
    "run_bad_k": lambda m, x, y: run_deepfault(m, _data(), RunConfig(k=1000)),
    "run_nan": lambda m, x, y: run_deepfault(_nan_model(m), _data(), RunConfig(k=3)),
}


def _nan_model(m):
    with torch.no_grad():
        m.fc3.bias[0] = float("nan")
    return m


@pytest.mark.parametrize("name", sorted(CALLS))
def test_no_hook_left(name):
    model = chain_model()
    x, y = random_data(30, seed=4)
    try:
        CALLS[name](model, x, y)
    except df.DeepFaultError:
        assert name.endswith(("_bad_layer", "_bad_shape", "_bad_unit", "_bad_k", "_nan"))
    else:
        assert not name.endswith(("_bad_layer", "_bad_shape", "_bad_unit", "_bad_k", "_nan"))
    assert not has_hooks(model)
