"""Channels-last Keras models through the CLI: regress and xplore work in the data's native layout."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import deepfault as df
from deepfault.cli import main

pytest.importorskip("h5py")

from helpers.keras_files import write_lenet  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def keras_pair(tmp_path_factory):
    """Two channels-last 28x28x1 Keras LeNets (M2 = other weights) and 40 channels-first inputs
    labelled by M1."""
    d = tmp_path_factory.mktemp("keras-layouts")
    m1 = write_lenet(d / "m1.h5", seed=0)
    write_lenet(d / "m2.h5", seed=1)
    x = np.random.default_rng(3).uniform(0, 1, (40, 1, 28, 28)).astype(np.float32)
    zeros = np.zeros(40, np.int64)
    names = tuple(str(i) for i in range(10))
    pm = df.prepare_model(m1, df.Dataset("d", x, zeros, x, zeros, (0.0, 1.0), names))
    with torch.no_grad():
        y = pm.module(torch.as_tensor(x)).argmax(1).numpy()
    np.savez(d / "data.npz", x=x, y=y, class_names=np.array([str(i) for i in range(10)]))
    return d


def test_regress_fuzzes_a_channels_last_keras_pair(keras_pair, capsys):
    d = keras_pair
    args = ["regress", "--m1", str(d / "m1.h5"), "--m2", str(d / "m2.h5"), "--dataset", str(d / "data.npz"),
            "--budget", "30it", "--inputs-per-step", "4", "--store", str(d / "s.sqlite"), "--no-progress",
            "--device", "cpu", "--fidelity", "ssim:0.3", "--seed", "1"]
    code = main(args)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "8x8" not in err
    assert "#RF" in out
    faults = np.load(d / "s-drfuzz-seed1-faults.npz")
    assert faults["inputs"].shape[1:] == (1, 28, 28)  # native layout, whatever the files take


def test_regress_api_takes_prepared_models_and_paths_alike(keras_pair):
    d = keras_pair
    data = df.load_dataset(str(d / "data.npz"))
    p1, p2 = (df.prepare_model(d / f"m{i}.h5", data) for i in (1, 2))
    by_path = df.regress(d / "m1.h5", d / "m2.h5", dataset=str(d / "data.npz"), budget="12it",
                         inputs_per_step=4,
                         fidelity="ssim:0.3", seed=2)
    by_model = df.regress(p1, p2, dataset=data, budget="12it", inputs_per_step=4, fidelity="ssim:0.3", seed=2)
    counts = ("rf", "urf", "seeds", "gf", "initial_rf")
    assert [getattr(by_path.result.metrics, c) for c in counts] == [getattr(by_model.result.metrics, c)
                                                                     for c in counts]
    assert by_path.result.generated == by_model.result.generated
    assert by_path.experiment == by_model.experiment  # the same weights, the same key


def test_xplore_runs_on_channels_last_keras_lenets_with_logits(keras_pair, capsys, tmp_path):
    d = keras_pair
    out = tmp_path / "x.json"
    args = ["xplore", "--model", f"{d / 'm1.h5'},{d / 'm2.h5'}", "--dataset", str(d / "data.npz"),
            "--num-seeds", "12", "--iterations", "3", "--step-size", "0.5", "--out", str(out),
            "--no-progress"]
    code = main(args)
    text, err = capsys.readouterr()
    assert code == 0, err
    assert "objective logits" in text
    result = json.loads(out.read_text())
    found = np.load(out.with_suffix(".npz"))
    assert all(found[k].shape[1:] == (1, 28, 28) for k in found.files if found[k].ndim == 4)
    # the Python API on the same prepared models and channels-first inputs finds the same
    from deepfault.xplore import XploreConfig

    data = df.load_dataset(str(d / "data.npz"))
    prepared = [df.prepare_model(d / f"m{i}.h5", data, name=f"m{i}.h5") for i in (1, 2)]
    assert {(p.output_kind, p.layout) for p in prepared} == {("probabilities", "NHWC")}
    api = df.xplore(prepared, data.x_test, config=XploreConfig(seeds=12, iterations=3, step_size=0.5))
    assert api.num_found == result["found"]
    assert list(api.model_names) == ["m1.h5", "m2.h5"]


def test_xplore_api_refuses_logits_of_a_softmax_it_cannot_split(keras_pair):
    from torch import nn

    class Functional(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(784, 8)
            self.fc2 = nn.Linear(8, 10)

        def forward(self, x):
            return torch.softmax(self.fc2(torch.relu(self.fc1(x.flatten(1)))), dim=1)

    data = df.load_dataset(str(keras_pair / "data.npz"))
    models = [df.prepare_model(Functional(), data, output_kind="probabilities", name=f"f{i}")
              for i in range(2)]
    with pytest.raises(df.DeepFaultError, match="'f0' outputs probabilities and its logits are not"):
        df.xplore(models, data.x_test)
    with pytest.raises(df.DeepFaultError, match="not available: its last layer is not an nn.Softmax"):
        df.xplore([Functional(), Functional()], data.x_test, output_kinds=["probabilities"] * 2)
