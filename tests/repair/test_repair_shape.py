"""repair's one call shape (issue 40): ``repair(model or (model, m1), found, config, runtime=...)``,
a result that shows and writes itself, and the old keyword form still working with a warning and
giving the same result."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import deepfault as df
from deepfault.core.constraints import constraints, undeclared
from deepfault.data import Dataset
from deepfault.errors import DeepFaultError
from deepfault.models import build_model, open_model
from deepfault.models.train import TrainConfig, fit
from deepfault.repair import InputFile, RepairConfig, RepairResult, repair

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _labels(x):
    return np.where(x[:, 1] > 0.8, 2, (x[:, 0] > 0.5).astype(int))


@pytest.fixture(scope="module")
def task():
    rng = np.random.default_rng(0)
    x_train = rng.uniform(0, 1, (600, 2)).astype(np.float32)
    x_train = x_train[x_train[:, 1] <= 0.8]
    x_test = rng.uniform(0, 1, (300, 2)).astype(np.float32)
    data = Dataset("plane", x_train, _labels(x_train), x_test, _labels(x_test), (0.0, 1.0), ("0", "1", "2"))
    torch.manual_seed(0)
    model = build_model("digits_mlp", hidden=(16,), in_features=2, num_classes=3)
    fit(model, data.x_train, data.y_train, TrainConfig(epochs=5, lr=1e-2, val_fraction=0.0))
    seeds = np.repeat(np.flatnonzero(x_test[:, 1] > 0.8), 2)
    found = InputFile(path=__import__("pathlib").Path("band.npz"), kind="run", inputs=x_test[seeds],
                      seed_index=seeds, labels=data.y_test[seeds])
    return model.eval(), data, found


def _same(a: RepairResult, b: RepairResult) -> None:
    da, db = a.to_dict(), b.to_dict()
    for d in (da, db):
        d.pop("seconds")
        for x in d["approaches"]:
            x.pop("seconds")
    assert da == db


def test_every_field_is_declared():
    assert undeclared(RepairConfig) == []
    for name, c in constraints(RepairConfig).items():
        for bad in c.invalid():
            if bad in ("all", "none"):
                continue
            with pytest.raises(DeepFaultError, match=rf"^{name} must be "):
                RepairConfig(**{name: bad})


def test_the_one_shape_and_the_old_form_agree(task, tmp_path):
    model, data, found = task
    config = RepairConfig(epochs=1, baselines=("random-train",), mix=2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = repair(df.prepare_model(model, data), [found], config, runtime=df.Runtime(device="cpu"))
    with pytest.warns(FutureWarning, match=r"dataset=.*deprecated: give the data set with the model"):
        old = repair(model, [found], dataset=data, epochs=1, baselines=("random-train",), mix=2.0,
                     save_model=tmp_path / "old.pt")
    assert old.saved_to == str(tmp_path / "old.pt")
    _same(new, old.saving(None))
    text = new.summary()
    assert text.rstrip().splitlines()[-1].startswith("verdict: ")
    body = new.payload()
    assert "config" not in body
    assert "device" not in body
    assert body["saved_to"] is None


def test_the_repaired_model_is_an_artifact(task, tmp_path):
    model, data, found = task
    result = repair(df.prepare_model(model, data), found, RepairConfig(epochs=1, baselines=()))
    named = result.saving(tmp_path / "r.pt")
    assert str(tmp_path / "r.pt") in named.verdict().text
    (artifact,) = named.outputs()
    assert (artifact.name, artifact.suffix) == ("model", ".pt")
    path = artifact.write(tmp_path / "r.pt")
    with torch.no_grad():
        x = torch.as_tensor(data.x_test[:5])
        torch.testing.assert_close(open_model(path).model(x), result.model(x))


def test_train_on_is_a_config_field_not_in_the_result_keys(task):
    model, data, found = task
    config = RepairConfig(epochs=1, baselines=(), train_on=(0,))
    assert "train_on" not in config.to_dict()
    with pytest.warns(FutureWarning, match=r"config=RepairConfig\(train_on=\.\.\.\)"):
        old = repair(df.prepare_model(model, data), [found], RepairConfig(epochs=1, baselines=()),
                     train_on=(0,))
    _same(old, repair(df.prepare_model(model, data), [found], config))


def test_the_failing_inputs_are_found_and_inputs_still_works(task):
    """The files of failing inputs are ``found`` (the parameter's name); ``inputs=`` is the old
    keyword: it still works, with a FutureWarning naming the new one."""
    model, data, found = task
    prepared = df.prepare_model(model, data)
    config = RepairConfig(epochs=1, baselines=())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = repair(prepared, found=[found], config=config)
    words = r"inputs=\.\.\.\) is deprecated: the files of failing inputs are 'found'"
    with pytest.warns(FutureWarning, match=words):
        old = repair(prepared, inputs=[found], config=config)
    _same(new, old)
