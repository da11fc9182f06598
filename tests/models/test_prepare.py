"""prepare_model: one route from files, ModelFiles and modules to a model in the data's native layout."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
import torch
from torch import nn

import deepfault as df
from deepfault.data import Dataset
from deepfault.models import ModelFile, save_model
from deepfault.models.fingerprint import fingerprint
from deepfault.models.prepare import InputAdapter, PreparedModel, prepare_model
from helpers.tiny_models import has_hooks

h5py = pytest.importorskip("h5py")

from helpers.keras_files import lenet_like, sequential_config, write_full, write_lenet, write_pair  # noqa: E402


def _images(n=12, c=1, size=28, seed=0, classes=10):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, (n, c, size, size)).astype(np.float32)
    y = rng.integers(0, classes, n)
    return Dataset("tiny", x, y, x, y, (0.0, 1.0), tuple(str(i) for i in range(classes)))


def _naive_nhwc(x: np.ndarray) -> np.ndarray:
    """(N, C, H, W) -> (N, H, W, C) by a loop over every element."""
    n, c, h, w = x.shape
    out = np.zeros((n, h, w, c), x.dtype)
    for i in range(n):
        for ch in range(c):
            for r in range(h):
                for col in range(w):
                    out[i, r, col, ch] = x[i, ch, r, col]
    return out


def test_keras_channels_last_model_takes_native_inputs_and_keeps_layer_names(tmp_path):
    path = write_lenet(tmp_path / "m.h5", seed=0)
    data = _images()
    pm = prepare_model(path, data)
    raw = pm.model_file.model
    assert pm.adapter == "NHWC"
    assert pm.layout == "NHWC"
    assert pm.input_shape == (1, 28, 28)
    assert pm.file_input_shape == (28, 28, 1)
    assert pm.data.input_shape == (1, 28, 28)
    assert [n for n, _ in pm.module.named_modules()][1:] == [n for n, _ in raw.named_modules()][1:]
    assert pm.module.state_dict().keys() == raw.state_dict().keys()
    # naive oracle: the old route (data laid out channels last by a loop) gives the same predictions
    with torch.no_grad():
        new = pm.module(torch.as_tensor(data.x_test))
        old = raw(torch.as_tensor(_naive_nhwc(data.x_test)))
    torch.testing.assert_close(new, old)
    assert not has_hooks(raw)
    assert not has_hooks(pm.module)


def test_prepared_predictions_equal_the_file_module_on_its_own_layout(tmp_path):
    from deepfault.models import open_model

    path = write_lenet(tmp_path / "m.h5", seed=3)
    data = _images(seed=5)
    pm = prepare_model(path, data)
    mf = open_model(path)
    own = data.for_input_shape(mf.meta["input_shape"])  # the layout the Keras file takes
    assert own.input_shape == (28, 28, 1)
    with torch.no_grad():
        new = pm.module(torch.as_tensor(data.x_test))
        torch.testing.assert_close(new, mf.model(torch.as_tensor(own.x_test)))


def test_keras_logits_are_split_off_the_final_softmax(tmp_path):
    for softmax in ("activation", "layer"):
        path = write_lenet(tmp_path / f"m-{softmax}.h5", seed=1, softmax=softmax)
        pm = prepare_model(path, _images())
        assert pm.output_kind == "probabilities"
        assert pm.logits is not None
        assert pm.no_logits is None
        x = torch.as_tensor(_images(seed=2).x_test)
        with torch.no_grad():
            torch.testing.assert_close(torch.softmax(pm.logits(x), 1), pm.module(x))
        assert fingerprint(pm.logits) == pm.fingerprint  # the same weights, shared
        assert pm.logits_module() is pm.logits
    logits_model = prepare_model(write_lenet(tmp_path / "l.h5", seed=1, softmax="none"), _images())
    assert logits_model.output_kind == "logits"
    assert logits_model.logits is logits_model.module


class _FunctionalSoftmax(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return torch.softmax(self.fc(x), dim=1)


class _SoftmaxThenScale(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.soft = nn.Softmax(dim=1)

    def forward(self, x):
        return self.soft(self.fc(x)) * 1.0


def test_non_separable_probability_models_say_why_there_are_no_logits():
    pm = prepare_model(_FunctionalSoftmax(), output_kind="probabilities", input_shape=(4,))
    assert pm.logits is None
    assert "not an nn.Softmax" in pm.no_logits
    with pytest.raises(df.DeepFaultError, match="not available: its last layer is not an nn.Softmax"):
        pm.logits_module()
    pm = prepare_model(_SoftmaxThenScale(), output_kind="probabilities")
    assert pm.logits is None
    assert "custom forward()" in pm.no_logits
    separable = nn.Sequential(OrderedDict(fc=nn.Linear(4, 3), soft=nn.Softmax(dim=1)))
    pm = prepare_model(separable)
    assert pm.output_kind == "probabilities"
    assert [n for n, _ in pm.logits.named_modules()] == ["", "fc"]


def test_fingerprint_is_the_same_whichever_way_the_weights_are_loaded(tmp_path):
    layers, weights, shape = lenet_like(seed=4)
    config = sequential_config(layers, shape, form="dict")
    full = write_full(tmp_path / "full.h5", config, weights)
    json_path, _ = write_pair(tmp_path / "pair", config, weights)
    a = prepare_model(full, _images())
    b = prepare_model(tmp_path / "pair", _images())
    c = prepare_model(a.model_file.model, input_layout="NHWC")
    assert a.fingerprint == b.fingerprint == c.fingerprint == fingerprint(a.model_file.model)
    assert len(a.fingerprint) == 16
    assert df.coverage.model_hash(a.module).startswith(a.fingerprint)
    other = prepare_model(write_lenet(tmp_path / "other.h5", seed=5), _images())
    assert other.fingerprint != a.fingerprint
    # a zoo .pt file, its ModelFile and its module
    from deepfault.models import build_model

    model = build_model("digits_mlp")
    save_model(tmp_path / "m.pt", ModelFile(model, "digits_mlp", dataset="digits", bounds=(0.0, 1.0)))
    assert prepare_model(tmp_path / "m.pt").fingerprint == prepare_model(model).fingerprint


def test_caller_module_is_wrapped_not_modified():
    model = nn.Sequential(OrderedDict(fc=nn.Linear(12, 3)))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    data = Dataset("hw", *(np.random.default_rng(0).uniform(0, 1, (5, 1, 3, 4)).astype(np.float32),
                           np.zeros(5, np.int64)) * 2, (0.0, 1.0), ("a", "b", "c"))
    pm = prepare_model(model, data, input_shape=(12,), name="mine")
    assert isinstance(pm.module, InputAdapter)
    assert pm.module.inner is model
    assert pm.adapter == "flat"
    assert pm.name == "mine"
    assert pm.num_classes == 3
    assert type(model) is nn.Sequential
    assert not has_hooks(model)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    x = torch.as_tensor(data.x_test)
    torch.testing.assert_close(pm(x), model(x.flatten(1)))
    pm.module.eval()
    assert not model.training
    assert not model.fc.training


@pytest.mark.parametrize(("layout", "shape"), [("NHWC", (4, 5, 3)), ("NHW", (4, 5)), ("flat", (60,)),
                                           ("flat-NHWC", (60,))])
def test_every_adapter_matches_a_naive_loop(layout, shape):
    from deepfault.models.prepare import LAYOUTS

    c = 1 if layout == "NHW" else 3
    x = np.random.default_rng(1).standard_normal((2, c, 4, 5)).astype(np.float32)
    got = LAYOUTS[layout](torch.as_tensor(x)).numpy()
    if layout == "NHWC":
        want = _naive_nhwc(x)
    elif layout == "NHW":
        want = x[:, 0]
    elif layout == "flat":
        want = np.array([[x[i, ch, r, k] for ch in range(c) for r in range(4) for k in range(5)]
                         for i in range(2)])
    else:  # a Keras Flatten over channels-last images
        want = np.array([[x[i, ch, r, k] for r in range(4) for k in range(5) for ch in range(c)]
                         for i in range(2)])
    assert got.shape[1:] == shape
    np.testing.assert_array_equal(got, want)


def test_keras_flat_model_on_colour_images_uses_keras_flatten_order(tmp_path):
    from helpers.keras_files import layer

    rng = np.random.default_rng(0)
    layers = [layer("Dense", "dense_1", units=3, activation="linear", use_bias=True)]
    kernel = rng.standard_normal((48, 3)).astype(np.float32)
    path = write_full(tmp_path / "flat.h5", sequential_config(layers, (48,), form="dict"),
                      {"dense_1": [("kernel", kernel), ("bias", np.zeros(3, np.float32))]})
    data = _images(n=4, c=3, size=4, classes=3)
    pm = prepare_model(path, data)
    assert pm.adapter == "flat-NHWC"
    x = data.x_test
    want = _naive_nhwc(x).reshape(4, -1) @ kernel
    np.testing.assert_allclose(pm.module(torch.as_tensor(x)).detach().numpy(), want, rtol=1e-5, atol=1e-5)


def test_range_and_output_kind_facts_and_errors(tmp_path):
    data = Dataset("px", *(np.full((3, 1, 2, 2), 255.0, np.float32), np.zeros(3, np.int64)) * 2,
                   (0.0, 255.0), ("a", "b"))
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 2))
    with pytest.raises(df.DeepFaultError, match=r"trained on inputs in \(0.0, 1.0\)"):
        prepare_model(model, Dataset(**{**data.__dict__, "name": "px.npz", "meta": {"source": "px.npz"}}),
                      bounds=(0.0, 1.0))
    scaled = prepare_model(model, data, bounds=(0.0, 1.0))
    assert scaled.bounds == (0.0, 1.0)
    assert float(scaled.data.x_test.max()) == 1.0
    with pytest.raises(df.DeepFaultError, match="output_kind must be one of"):
        prepare_model(model, output_kind="scores")
    with pytest.raises(df.DeepFaultError, match="input_layout must be one of"):
        prepare_model(model, input_layout="CHW")
    pm = prepare_model(model, data)
    assert prepare_model(pm) is pm
    with pytest.raises(df.DeepFaultError, match="already prepared"):
        prepare_model(pm, output_kind="logits")


def test_python_api_accepts_prepared_models(tmp_path):
    path = write_lenet(tmp_path / "m.h5", seed=2)
    data = _images(n=16)
    pm = prepare_model(path, data)
    report = df.measure_coverage(pm, data.x_test, criteria="nc")
    direct = df.measure_coverage(pm.module, data.x_test, criteria="nc")
    assert report.results[0].covered == direct.results[0].covered
    profile = df.compute_profile(pm, data.x_train)
    assert profile.model_hash == df.coverage.model_hash(pm.model_file.model)
    ranking = df.rank_inputs(pm, data.x_test, data.y_test, criteria="nc")
    assert len(ranking.rankings[0].order) == 16
    assert isinstance(pm, PreparedModel)
    assert pm.to_dict()["logits_available"]


def test_options_object_and_keywords_prepare_the_same_model():
    from deepfault.errors import DeepFaultError
    from deepfault.models.prepare import PrepareOptions

    torch.manual_seed(0)
    module = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 10), nn.Softmax(dim=1))
    data = _images()
    by_keywords = prepare_model(module, data, output_kind="probabilities", bounds=(0.0, 1.0), num_classes=10)
    by_options = prepare_model(module, data, options=PrepareOptions(output_kind="probabilities",
                                                                    bounds=(0.0, 1.0), num_classes=10))
    assert by_keywords.to_dict() == by_options.to_dict()
    x = torch.as_tensor(data.x_test)
    with torch.no_grad():
        torch.testing.assert_close(by_keywords.logits_module()(x), by_options.logits_module()(x))
    # a keyword replaces that field of the options
    partly = PrepareOptions(output_kind="probabilities", bounds=(0.0, 255.0))
    mixed = prepare_model(module, data, options=partly, bounds=(0.0, 1.0), num_classes=10)
    assert mixed.to_dict() == by_options.to_dict()
    with pytest.raises(TypeError, match="unexpected keyword argument 'bound'"):
        prepare_model(module, data, bound=(0.0, 1.0))
    with pytest.raises(DeepFaultError, match="already prepared; bounds cannot change it"):
        prepare_model(by_options, data, options=PrepareOptions(bounds=(0.0, 1.0)))
