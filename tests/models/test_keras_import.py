"""Keras 2 import: files written here with h5py in Keras's own layout, checked against a
numpy forward pass written straight from the Keras layer definitions."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

h5py = pytest.importorskip("h5py")

from deepfault.core.batches import activations  # noqa: E402
from deepfault.errors import DeepFaultError  # noqa: E402
from deepfault.models.keras import list_keras_layers, load_keras  # noqa: E402
from helpers.keras_files import (  # noqa: E402
    convnet,
    functional_config,
    inputs,
    layer,
    misc_net,
    mlp,
    pooling_net,
    sequential_config,
    write_full,
    write_pair,
)

# --------------------------------------------------------------------------- writing files


# --------------------------------------------------------------------------- reference


def _tf_pads(size: int, k: int, s: int, d: int = 1) -> tuple[int, int]:
    out = -(-size // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    return total // 2, total - total // 2


def _windows(x, kh, kw, stride, dilation, padding, fill):
    """Yield ``(i, j, patch)``: the NHWC input seen by kernel tap ``(i, j)``."""
    (sh, sw), (dh, dw) = stride, dilation
    if padding == "same":
        rows, cols = _tf_pads(x.shape[1], kh, sh, dh), _tf_pads(x.shape[2], kw, sw, dw)
        x = np.pad(x, ((0, 0), rows, cols, (0, 0)), constant_values=fill)
    oh = (x.shape[1] - (kh - 1) * dh - 1) // sh + 1
    ow = (x.shape[2] - (kw - 1) * dw - 1) // sw + 1
    for i in range(kh):
        for j in range(kw):
            yield x[:, i * dh: i * dh + (oh - 1) * sh + 1: sh, j * dw: j * dw + (ow - 1) * sw + 1: sw]


def np_conv(x, kernel, bias, stride, dilation, padding):
    kh, kw = kernel.shape[:2]
    out = sum(p @ kernel[n // kw, n % kw]
              for n, p in enumerate(_windows(x, kh, kw, stride, dilation, padding, 0.0)))
    return out + bias if bias is not None else out


def np_pool(x, size, stride, padding, mode):
    if mode == "max":
        return np.max(list(_windows(x, *size, stride, (1, 1), padding, -np.inf)), axis=0)
    sums = np.sum(list(_windows(x, *size, stride, (1, 1), padding, 0.0)), axis=0)
    counts = np.sum(list(_windows(np.ones_like(x), *size, stride, (1, 1), padding, 0.0)), axis=0)
    return sums / counts


def np_activation(x, name):
    if name == "softmax":
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    selu_alpha, selu_scale = 1.6732632423543772, 1.0507009873554805
    return {
        None: lambda v: v,
        "linear": lambda v: v,
        "relu": lambda v: np.maximum(v, 0),
        "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
        "tanh": np.tanh,
        "elu": lambda v: np.where(v > 0, v, np.expm1(v)),
        "selu": lambda v: selu_scale * np.where(v > 0, v, selu_alpha * np.expm1(v)),
        "softplus": lambda v: np.log1p(np.exp(v)),
        "softsign": lambda v: v / (1 + np.abs(v)),
        "swish": lambda v: v / (1 + np.exp(-v)),
    }[name](x)


def np_forward(layers: list[dict], weights: dict, x: np.ndarray, data_format: str):  # noqa: C901 - one branch per layer class
    """Keras's forward pass in float64; images are kept NHWC whatever the model's format."""
    x = x.astype(np.float64)
    cf = data_format == "channels_first"
    if cf and x.ndim == 4:
        x = x.transpose(0, 2, 3, 1)
    for item in layers:
        cls, cfg = item["class_name"], item["config"]
        w = {k: v.astype(np.float64) for k, v in weights.get(cfg["name"], [])}
        if cls == "Dense":
            x = np_activation(x @ w["kernel"] + w.get("bias", 0.0), cfg.get("activation"))
        elif cls == "Conv2D":
            x = np_conv(x, w["kernel"], w.get("bias"), cfg.get("strides", (1, 1)),
                        cfg.get("dilation_rate", (1, 1)), cfg["padding"])
            x = np_activation(x, cfg.get("activation"))
        elif cls in ("MaxPooling2D", "AveragePooling2D"):
            size = cfg["pool_size"]
            x = np_pool(x, size, cfg.get("strides") or size, cfg["padding"],
                        "max" if cls == "MaxPooling2D" else "avg")
        elif cls == "GlobalAveragePooling2D":
            x = x.mean(axis=(1, 2))
        elif cls == "GlobalMaxPooling2D":
            x = x.max(axis=(1, 2))
        elif cls == "BatchNormalization":
            x = (x - w["moving_mean"]) / np.sqrt(w["moving_variance"] + cfg["epsilon"])
            x = x * w.get("gamma", 1.0) + w.get("beta", 0.0)
        elif cls == "Flatten":
            if x.ndim == 4 and cf and cfg.get("data_format") != "channels_first":
                x = x.transpose(0, 3, 1, 2)  # Keras 2.0 flattens the raw NCHW tensor
            x = x.reshape(len(x), -1)
        elif cls == "Reshape":
            x = x.reshape(len(x), *cfg["target_shape"])
            if cf and x.ndim == 4:
                x = x.transpose(0, 2, 3, 1)
        elif cls == "ZeroPadding2D":
            rows, cols = cfg["padding"]
            x = np.pad(x, ((0, 0), tuple(rows), tuple(cols), (0, 0)))
        elif cls == "Activation":
            x = np_activation(x, cfg["activation"])
        elif cls == "Softmax":
            x = np_activation(x, "softmax")
        elif cls == "LeakyReLU":
            x = np.where(x > 0, x, cfg["alpha"] * x)
        elif cls == "ReLU":
            x = np.clip(x, 0, cfg.get("max_value") or np.inf)
        elif cls == "ELU":
            x = np.where(x > 0, x, cfg["alpha"] * np.expm1(x))
        elif cls != "Dropout":
            raise AssertionError(cls)
    return x


def assert_matches(mf, layers, weights, x, data_format):
    expected = np_forward(layers, weights, x, data_format)
    with torch.no_grad():
        got = mf.model(torch.from_numpy(x.astype(np.float32))).double().numpy()
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)


# --------------------------------------------------------------------------- models


# --------------------------------------------------------------------------- numerics


@pytest.mark.parametrize("as_bytes", [True, False], ids=["bytes", "str"])
@pytest.mark.parametrize("form", ["list", "dict", "dict+input", "functional", "model"])
def test_mlp_matches_numpy_in_every_config_form(tmp_path, form, as_bytes):
    layers, weights, shape = mlp()
    if form in ("functional", "model"):
        config = functional_config(layers, shape, cls="Model" if form == "model" else "Functional")
    else:
        config = sequential_config(layers, shape, form=form)
    mf = load_keras(write_full(tmp_path / "m.h5", config, weights, as_bytes=as_bytes))
    assert_matches(mf, layers, weights, inputs(shape), "channels_last")
    assert mf.output_kind == "probabilities"
    assert mf.arch == "keras"
    assert mf.arch_kwargs == {}
    assert mf.dataset is None
    assert mf.bounds is None
    assert not mf.model.training
    assert mf.meta["input_shape"] == [20]
    assert mf.meta["keras_version"] == "2.2.4"
    assert mf.meta["backend"] == "tensorflow"


@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
def test_convnet_matches_numpy(tmp_path, data_format):
    layers, weights, shape = convnet(data_format, flatten_format=data_format)
    config = sequential_config(layers, shape, form="dict")
    mf = load_keras(write_full(tmp_path / "m.h5", config, weights))
    x = inputs(shape)
    assert_matches(mf, layers, weights, x, data_format)
    assert mf.output_kind == "logits"
    assert mf.meta["input_shape"] == list(shape)
    assert mf.meta["data_format"] == data_format
    names = [n for n, _ in mf.model.named_children()]
    assert "conv2d_2_pad" in names
    assert "conv2d_1_pad" not in names  # only when asymmetric
    # a channels_first model and its channels_last twin with the same weights agree
    if data_format == "channels_first":
        twin_layers, _, twin_shape = convnet("channels_last")
        twin = load_keras(write_full(tmp_path / "twin.h5",
                                     sequential_config(twin_layers, twin_shape, form="dict"),
                                     weights))
        with torch.no_grad():
            torch.testing.assert_close(twin.model(torch.from_numpy(x.transpose(0, 2, 3, 1))),
                                       mf.model(torch.from_numpy(x)))


def test_keras20_flatten_of_channels_first_keeps_the_raw_order(tmp_path):
    """Before Keras 2.1.x Flatten had no data_format and flattened the NCHW tensor as is."""
    layers, weights, shape = convnet("channels_first", flatten_format=None)
    config = sequential_config(layers, shape, form="list")
    mf = load_keras(write_full(tmp_path / "m.h5", config, weights, version="2.0.8"))
    assert_matches(mf, layers, weights, inputs(shape), "channels_first")


@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
def test_misc_layers_match_numpy(tmp_path, data_format):
    layers, weights, shape = misc_net(data_format)
    config = functional_config(layers, shape, single_ends=True)
    mf = load_keras(write_full(tmp_path / "m.h5", config, weights, as_bytes=False))
    assert_matches(mf, layers, weights, inputs(shape), data_format)
    assert mf.output_kind == "probabilities"
    assert mf.meta["input_shape"] == [48]


@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
def test_pooling_layers_match_numpy(tmp_path, data_format):
    layers, weights, shape = pooling_net(data_format)
    mf = load_keras(write_full(tmp_path / "m.h5", sequential_config(layers, shape, form="list"),
                               weights))
    assert_matches(mf, layers, weights, inputs(shape), data_format)


@pytest.mark.parametrize("name", ["linear", "relu", "sigmoid", "tanh", "softmax", "elu", "selu",
                                  "softplus", "softsign", "swish", "Softmax layer"])
def test_activations_match_numpy(tmp_path, name):
    layers, weights, shape = mlp()
    layers = layers[:1] + [layer("Softmax", "act", axis=-1) if name == "Softmax layer"
                           else layer("Activation", "act", activation=name)]
    layers[0]["config"]["activation"] = "linear"
    mf = load_keras(write_full(tmp_path / "m.h5", sequential_config(layers, shape, form="dict"),
                               weights))
    assert_matches(mf, layers, weights, 3 * inputs(shape), "channels_last")
    assert mf.output_kind == ("probabilities" if "oftmax" in name else "logits")
    assert [n for n, _ in mf.model.named_children()] == ["dense_1", "act"]


def test_theano_kernels_are_flipped(tmp_path):
    layers, weights, shape = pooling_net("channels_last")
    mf = load_keras(write_full(tmp_path / "m.h5", sequential_config(layers, shape, form="list"),
                               weights, backend="theano"))
    kernel = dict(weights["conv2d_1"])["kernel"]
    flipped = {**weights, "conv2d_1": [("kernel", kernel[::-1, ::-1]),
                                       weights["conv2d_1"][1]]}
    assert_matches(mf, layers, flipped, inputs(shape), "channels_last")


# --------------------------------------------------------------------------- naming


def test_modules_carry_keras_names_and_dense_captures_pre_activation(tmp_path):
    layers, weights, shape = mlp()
    mf = load_keras(write_full(tmp_path / "m.h5", sequential_config(layers, shape, form="dict"),
                               weights))
    assert [n for n, _ in mf.model.named_children()] == [
        "dense_1", "dense_1_act", "dropout_1", "dense_2", "dense_2_act",
        "batch_normalization_1", "leaky_re_lu_1", "dense_3", "dense_3_act",
    ]
    x = inputs(shape)
    layout, values = activations(mf.model, x, layers=["dense_1", "dense_2_act"])
    k1, b1 = (w for _, w in weights["dense_1"])
    pre = x.astype(np.float64) @ k1 + b1
    np.testing.assert_allclose(values[:, :16].numpy(), pre, atol=1e-5)
    k2, b2 = (w for _, w in weights["dense_2"])
    np.testing.assert_allclose(values[:, 16:].numpy(), np.tanh(np.maximum(pre, 0) @ k2 + b2),
                               atol=1e-5)
    assert layout.names == ("dense_1", "dense_2_act")


def test_conv_outputs_are_captured_per_channel(tmp_path):
    layers, weights, shape = convnet("channels_last")
    mf = load_keras(write_full(tmp_path / "m.h5", sequential_config(layers, shape, form="dict"),
                               weights))
    assert next(iter(mf.model.named_children()))[0] == "conv2d_1_nchw"
    layout, values = activations(mf.model, inputs(shape), layers=["conv2d_1"])
    x = inputs(shape).astype(np.float64)
    k, b = (w for _, w in weights["conv2d_1"])
    expected = np_conv(x, k, b, (1, 1), (1, 1), "same").mean(axis=(1, 2))
    np.testing.assert_allclose(values.numpy(), expected, atol=1e-5)
    assert layout.layers[0].size == 4


def test_dotted_layer_names_are_sanitised(tmp_path):
    layers, weights, shape = mlp()
    layers[0]["config"]["name"] = "block.dense"
    layers[2]["config"]["name"] = "block_dense"  # would clash after sanitising
    weights = {"block.dense": weights["dense_1"], "block_dense": weights["dense_2"],
               **{k: v for k, v in weights.items() if k not in ("dense_1", "dense_2")}}
    mf = load_keras(write_full(tmp_path / "m.h5", sequential_config(layers, shape, form="dict"),
                               weights))
    names = [n for n, _ in mf.model.named_children()]
    assert names[:5] == ["block_dense", "block_dense_act", "dropout_1", "block_dense_",
                         "block_dense__act"]
    assert mf.meta["renamed_layers"] == {"block.dense": "block_dense",
                                         "block_dense": "block_dense_"}
    assert_matches(mf, layers, weights, inputs(shape), "channels_last")


# --------------------------------------------------------------------------- file forms


def test_json_with_weights_and_stem(tmp_path):
    layers, weights, shape = mlp()
    config = sequential_config(layers, shape, form="dict")
    json_path, h5_path = write_pair(tmp_path / "net", config, weights, as_bytes=False)
    for mf in (load_keras(json_path, weights=h5_path), load_keras(tmp_path / "net")):
        assert_matches(mf, layers, weights, inputs(shape), "channels_last")
        assert mf.meta["keras_version"] == "2.3.1"
    assert load_keras(str(tmp_path / "net")).meta["source"] == str(tmp_path / "net")


def test_full_model_with_separate_weights_uses_those_weights(tmp_path):
    layers, weights, shape = mlp(seed=0)
    _, other, _ = mlp(seed=5)
    config = sequential_config(layers, shape, form="dict")
    full = write_full(tmp_path / "m.h5", config, weights)
    _, h5_path = write_pair(tmp_path / "other", config, other)
    assert_matches(load_keras(full, weights=h5_path), layers, other, inputs(shape),
                   "channels_last")


def test_chunked_layer_names_attribute(tmp_path):
    """Keras splits attributes over 64 KiB into layer_names0, layer_names1, ..."""
    layers, weights, shape = mlp()
    path = write_full(tmp_path / "m.h5", sequential_config(layers, shape, form="dict"), weights)
    with h5py.File(path, "a") as f:
        names = f["model_weights"].attrs["layer_names"]
        del f["model_weights"].attrs["layer_names"]
        f["model_weights"].attrs["layer_names0"] = names[:3]
        f["model_weights"].attrs["layer_names1"] = names[3:]
    assert_matches(load_keras(path), layers, weights, inputs(shape), "channels_last")


def test_import_does_not_load_h5py():
    code = ("import sys, deepfault, deepfault.models.keras; "
            "sys.exit('h5py' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


# --------------------------------------------------------------------------- errors


def _error(path, match, **kwargs):
    with pytest.raises(DeepFaultError, match=match) as info:
        load_keras(path, **kwargs)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_functional_model_that_is_not_a_chain(tmp_path):
    layers, weights, shape = mlp()
    config = functional_config(layers, shape)
    items = config["config"]["layers"]
    items.append({**layer("Add", "add_1"), "name": "add_1",
                  "inbound_nodes": [[["dense_1", 0, 0, {}], ["dense_3", 0, 0, {}]]]})
    config["config"]["output_layers"] = [["add_1", 0, 0]]
    _error(write_full(tmp_path / "m.h5", config, weights), r"not a chain.*'add_1' takes 2 inputs")
    # a branch: dense_1 feeds two layers
    config = functional_config(layers, shape)
    config["config"]["layers"][3]["inbound_nodes"] = [[["dense_1", 0, 0, {}]]]
    _error(write_full(tmp_path / "b.h5", config, weights), r"not a chain.*feeds more than one")


def test_unsupported_layer_lists_the_supported_ones(tmp_path):
    layers, weights, shape = mlp()
    layers.insert(1, layer("LSTM", "lstm_1", units=3))
    message = _error(write_full(tmp_path / "m.h5", sequential_config(layers, shape, form="dict"),
                                weights), r"'lstm_1'.*LSTM.*supported layers:")
    for cls in ("Dense", "Conv2D", "BatchNormalization", "MaxPooling2D", "Flatten"):
        assert cls in message
    assert set(list_keras_layers()) >= {
        "InputLayer", "Dense", "Conv2D", "MaxPooling2D", "AveragePooling2D",
        "GlobalAveragePooling2D", "GlobalMaxPooling2D", "Flatten", "Dropout", "Activation",
        "LeakyReLU", "ReLU", "ELU", "BatchNormalization", "ZeroPadding2D", "Reshape"}


@pytest.mark.parametrize(("change", "match"), [
    ({"class_name": "Activation", "config": {"name": "a", "activation": "hard_sigmoid"}},
     r"activation 'hard_sigmoid'.*supported: elu, linear, relu"),
    ({"class_name": "ReLU", "config": {"name": "r", "threshold": 0.5}}, r"'r' \(ReLU\).*threshold"),
    ({"class_name": "ReLU", "config": {"name": "r", "max_value": 6.0, "negative_slope": 0.1}},
     r"max_value together with negative_slope"),
])
def test_unsupported_options(tmp_path, change, match):
    layers, weights, shape = mlp()
    layers.insert(1, change)
    _error(write_full(tmp_path / "m.h5", sequential_config(layers, shape, form="dict"), weights),
           match)


def test_unsupported_conv_padding_and_mixed_formats(tmp_path):
    layers, weights, shape = convnet("channels_last")
    layers[0]["config"]["padding"] = "causal"
    _error(write_full(tmp_path / "a.h5", sequential_config(layers, shape, form="dict"), weights),
           r"'conv2d_1'.*padding='causal'")
    layers, weights, shape = convnet("channels_last")
    layers[4]["config"]["data_format"] = "channels_first"
    _error(write_full(tmp_path / "b.h5", sequential_config(layers, shape, form="dict"), weights),
           r"'max_pooling2d_1'.*one data format")


def test_weight_shape_mismatch_names_layer_and_shapes(tmp_path):
    layers, weights, shape = mlp()
    weights["dense_2"][0] = ("kernel", np.zeros((16, 11), np.float32))
    _error(write_full(tmp_path / "m.h5", sequential_config(layers, shape, form="dict"), weights),
           r"'dense_2'.*'dense_2/kernel:0'.*\(16, 11\).*\(16, 12\)")
    layers, weights, shape = convnet("channels_last")
    weights["conv2d_1"][0] = ("kernel", np.zeros((3, 3, 3, 4), np.float32))
    _error(write_full(tmp_path / "c.h5", sequential_config(layers, shape, form="dict"), weights),
           r"'conv2d_1'.*\(3, 3, 3, 4\).*\(3, 3, 2, 4\)")


def test_weights_that_do_not_belong_to_the_architecture(tmp_path):
    layers, weights, shape = mlp()
    config = sequential_config(layers, shape, form="dict")
    missing_bias = {**weights, "dense_1": weights["dense_1"][:1]}
    _error(write_full(tmp_path / "a.h5", config, missing_bias),
           r"'dense_1' \(Dense\) has weights \['kernel'\].*needs \['kernel', 'bias'\]")
    json_path, h5_path = write_pair(tmp_path / "pair", config, weights)
    with h5py.File(h5_path, "a") as f:
        f.attrs["layer_names"] = np.array([b"dense_1", b"dense_2"])
    _error(json_path, r"no layer 'batch_normalization_1'", weights=h5_path)


def test_missing_files(tmp_path):
    _error(tmp_path / "nope.h5", r"'.*nope\.h5' does not exist; check the path")
    layers, weights, shape = mlp()
    json_path, h5_path = write_pair(tmp_path / "net", sequential_config(layers, shape,
                                                                        form="dict"), weights)
    _error(json_path, r"architecture JSON without weights; pass weights=")
    _error(json_path, r"weights file '.*gone\.h5' does not exist", weights=tmp_path / "gone.h5")
    h5_path.unlink()
    _error(tmp_path / "net", r"found '.*net\.json' but not '.*net\.h5'")


def test_weights_only_file_as_model(tmp_path):
    layers, weights, shape = mlp()
    _, h5_path = write_pair(tmp_path / "net", sequential_config(layers, shape, form="dict"),
                            weights)
    _error(h5_path, r"has no model_config.*pass the architecture JSON")


def test_not_hdf5_truncated_and_foreign_files(tmp_path):
    text = tmp_path / "notes.h5"
    text.write_text("this is not a model")
    _error(text, r"'.*notes\.h5' is neither HDF5 nor JSON")
    binary = tmp_path / "blob.h5"
    binary.write_bytes(bytes(range(256)) * 4)
    _error(binary, r"neither HDF5 nor JSON")
    layers, weights, shape = convnet("channels_last")
    full = write_full(tmp_path / "m.h5", sequential_config(layers, shape, form="dict"), weights)
    truncated = tmp_path / "cut.h5"
    truncated.write_bytes(full.read_bytes()[: full.stat().st_size // 2])
    _error(truncated, r"'.*cut\.h5' cannot be read as HDF5.*truncated or corrupt")
    (tmp_path / "saved_model").mkdir()
    _error(tmp_path / "saved_model", r"is a directory")
    zipped = tmp_path / "m.keras"
    zipped.write_bytes(b"PK\x03\x04" + bytes(100))
    _error(zipped, r"zip archive.*Keras 3")
    with h5py.File(tmp_path / "empty.h5", "w") as f:
        f.attrs["model_config"] = "{not json"
    _error(tmp_path / "empty.h5", r"model_config of '.*empty\.h5' is not valid JSON")
    (tmp_path / "other.json").write_text(json.dumps({"hello": 1}))
    _error(tmp_path / "other.json", r"no 'class_name'", weights=full)


def test_keras1_files_are_refused(tmp_path):
    layers, weights, shape = mlp()
    _error(write_full(tmp_path / "m.h5", sequential_config(layers, shape, form="list"), weights,
                      version="1.2.2"), r"Keras 1\.2\.2; load_keras reads Keras 2 files")


def test_model_without_input_shape(tmp_path):
    layers, weights, _ = mlp()
    config = {"class_name": "Sequential", "config": {"name": "s", "layers": layers}}
    _error(write_full(tmp_path / "m.h5", config, weights), r"records no input shape")


# --------------------------------------------------------------------------- real Keras


def _real_keras():
    try:
        import tf_keras as keras  # Keras 2 for TensorFlow >= 2.16
    except ImportError:
        tf = pytest.importorskip("tensorflow")
        keras = tf.keras
        if not str(getattr(keras, "__version__", "2")).startswith("2"):
            pytest.skip("tensorflow.keras is Keras 3; install tf_keras for a Keras 2 check")
    return keras


def test_real_keras_model_matches(tmp_path):
    keras = _real_keras()
    layers = keras.layers
    model = keras.Sequential([
        layers.Conv2D(3, 3, padding="same", activation="relu", input_shape=(8, 8, 2)),
        layers.Conv2D(4, 2, strides=2, padding="same"),
        layers.BatchNormalization(),
        layers.MaxPooling2D(padding="same"),
        layers.Flatten(),
        layers.Dense(5, activation="softmax"),
    ])
    bn = model.layers[2]
    rng = np.random.default_rng(0)
    bn.set_weights([w + rng.uniform(0.1, 0.5, w.shape).astype(np.float32)
                    for w in bn.get_weights()])
    x = inputs((8, 8, 2))
    expected = model.predict(x, verbose=0)
    model.save(tmp_path / "m.h5")
    (tmp_path / "arch.json").write_text(model.to_json())
    model.save_weights(tmp_path / "w.h5")
    for mf in (load_keras(tmp_path / "m.h5"),
               load_keras(tmp_path / "arch.json", weights=tmp_path / "w.h5")):
        with torch.no_grad():
            got = mf.model(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(got, expected, atol=1e-5)
        assert mf.output_kind == "probabilities"
