"""Keras files written with h5py in Keras's own layouts, and small models to write (shared by the tests).

- ``write_full`` (``model.save``), ``write_pair`` (``to_json`` + ``save_weights``) and
  ``write_save_weights`` (a bare ``save_weights`` file, as DeepXplore published);
- ``sequential_config`` / ``functional_config`` in every Keras 2 form, and ``layer``;
- ``mlp``, ``convnet``, ``misc_net``, ``pooling_net``: configs with seeded weights;
- ``keras_arrays``: a torch model's weights laid out as Keras stores them;
- ``lenet_like`` / ``write_lenet``: a 28x28x1 channels-last LeNet-like Keras model ending in a softmax.
"""

from __future__ import annotations

import json

import numpy as np
import torch

try:
    import h5py
except ModuleNotFoundError:  # the tests that write Keras files skip without it
    h5py = None


def layer(cls: str, name: str, **config) -> dict:
    return {"class_name": cls, "config": {"name": name, **config}}


def sequential_config(layers: list[dict], input_shape, *, form: str) -> dict:
    """``form``: 'list' (Keras 2.0-2.2), 'dict' (Keras 2.2.3+), 'dict+input' (tf.keras 2)."""
    layers = json.loads(json.dumps(layers))
    if form == "dict+input":
        inp = layer("InputLayer", "input_1", batch_input_shape=[None, *input_shape])
        return {"class_name": "Sequential", "config": {"name": "seq", "layers": [inp, *layers]}}
    layers[0]["config"]["batch_input_shape"] = [None, *input_shape]
    if form == "list":
        return {"class_name": "Sequential", "config": layers}
    return {"class_name": "Sequential", "config": {"name": "seq", "layers": layers}}


def functional_config(layers: list[dict], input_shape, *, cls: str = "Functional",
                      single_ends: bool = False) -> dict:
    """``single_ends``: one input/output written as ``["name", 0, 0]`` (tf.keras 2.4+)."""
    inp = layer("InputLayer", "input_1", batch_input_shape=[None, *input_shape])
    items = [{**inp, "name": "input_1", "inbound_nodes": []}]
    for prev, item in zip([inp, *layers], layers, strict=False):
        name = item["config"]["name"]
        items.append({**item, "name": name,
                      "inbound_nodes": [[[prev["config"]["name"], 0, 0, {}]]]})
    ends = [["input_1", 0, 0], [items[-1]["name"], 0, 0]]
    if not single_ends:
        ends = [[end] for end in ends]
    return {"class_name": cls, "config": {"name": "model", "layers": items,
                                          "input_layers": ends[0], "output_layers": ends[1]}}


def _strings(values: list[str], as_bytes: bool):
    if not values:
        return np.zeros(0)  # what Keras writes for a layer without weights
    if as_bytes:
        return np.array([v.encode("utf8") for v in values])
    return np.array(values, dtype=h5py.string_dtype())


def _text(value: str, as_bytes: bool):
    return value.encode("utf8") if as_bytes else value


def write_weights(group, names: list[str], weights: dict, *, as_bytes: bool) -> None:
    """``weights``: layer name -> [(short weight name, array)], in Keras's order."""
    group.attrs["layer_names"] = _strings(names, as_bytes)
    group.attrs["backend"] = _text("tensorflow", as_bytes)
    group.attrs["keras_version"] = _text("2.2.4", as_bytes)
    for name in names:
        g = group.create_group(name)
        full = [f"{name}/{w}:0" for w, _ in weights.get(name, [])]
        g.attrs["weight_names"] = _strings(full, as_bytes)
        for w, (_, array) in zip(full, weights.get(name, []), strict=True):
            g.create_dataset(w, data=array)


def config_names(config: dict) -> list[str]:
    inner = config["config"]
    items = inner if isinstance(inner, list) else inner["layers"]
    names = [i.get("name") or i["config"]["name"] for i in items]
    if config["class_name"] == "Sequential":  # Sequential.layers leaves the InputLayer out
        names = [n for n, i in zip(names, items, strict=True) if i["class_name"] != "InputLayer"]
    return names


def write_full(path, config: dict, weights: dict, *, as_bytes: bool = True,
               version: str = "2.2.4", backend: str = "tensorflow"):
    """What ``model.save(path)`` writes."""
    with h5py.File(path, "w") as f:
        f.attrs["keras_version"] = _text(version, as_bytes)
        f.attrs["backend"] = _text(backend, as_bytes)
        f.attrs["model_config"] = _text(json.dumps(config), as_bytes)
        f.attrs["training_config"] = _text("{}", as_bytes)
        write_weights(f.create_group("model_weights"), config_names(config), weights,
                      as_bytes=as_bytes)
    return path


def write_pair(stem, config: dict, weights: dict, *, as_bytes: bool = True):
    """What ``model.to_json()`` and ``model.save_weights(stem.h5)`` write."""
    json_path, h5_path = stem.with_suffix(".json"), stem.with_suffix(".h5")
    json_path.write_text(json.dumps({**config, "keras_version": "2.3.1",
                                     "backend": "tensorflow"}))
    with h5py.File(h5_path, "w") as f:
        write_weights(f, config_names(config), weights, as_bytes=as_bytes)
    return json_path, h5_path


def _init(rng, *shape, scale=None):
    fan_in = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    return (rng.standard_normal(shape) * (scale or fan_in ** -0.5)).astype(np.float32)


def _bn_weights(rng, n, *, scale=True, center=True):
    out = []
    if scale:
        out.append(("gamma", (1 + 0.3 * rng.standard_normal(n)).astype(np.float32)))
    if center:
        out.append(("beta", _init(rng, n, scale=0.3)))
    out.append(("moving_mean", _init(rng, n, scale=0.3)))
    out.append(("moving_variance", rng.uniform(0.5, 2.0, n).astype(np.float32)))
    return out


def mlp(seed=0):
    rng = np.random.default_rng(seed)
    layers = [
        layer("Dense", "dense_1", units=16, activation="relu", use_bias=True),
        layer("Dropout", "dropout_1", rate=0.5),
        layer("Dense", "dense_2", units=12, activation="tanh", use_bias=True),
        layer("BatchNormalization", "batch_normalization_1", axis=-1, epsilon=1e-3,
              center=True, scale=True),
        layer("LeakyReLU", "leaky_re_lu_1", alpha=0.2),
        layer("Dense", "dense_3", units=10, activation="softmax", use_bias=True),
    ]
    weights = {
        "dense_1": [("kernel", _init(rng, 20, 16)), ("bias", _init(rng, 16, scale=0.1))],
        "dense_2": [("kernel", _init(rng, 16, 12)), ("bias", _init(rng, 12, scale=0.1))],
        "batch_normalization_1": _bn_weights(rng, 12),
        "dense_3": [("kernel", _init(rng, 12, 10)), ("bias", _init(rng, 10, scale=0.1))],
    }
    return layers, weights, (20,)


def convnet(data_format: str, *, flatten_format: str | None = None, seed=1):
    """Conv 'same' (odd kernel), conv 'same' with an even kernel and stride 2, BN, conv
    'valid' with dilation, max pooling 'same', Flatten, Dense."""
    rng = np.random.default_rng(seed)
    fmt = {"data_format": data_format}
    flat = {} if flatten_format is None else {"data_format": flatten_format}
    layers = [
        layer("Conv2D", "conv2d_1", filters=4, kernel_size=[3, 3], strides=[1, 1],
              padding="same", dilation_rate=[1, 1], activation="relu", use_bias=True, **fmt),
        layer("Conv2D", "conv2d_2", filters=5, kernel_size=[2, 2], strides=[2, 2],
              padding="same", dilation_rate=[1, 1], activation="linear", use_bias=False, **fmt),
        layer("BatchNormalization", "batch_normalization_1",
              axis=-1 if data_format == "channels_last" else 1, epsilon=1e-3,
              center=True, scale=False),
        layer("Conv2D", "conv2d_3", filters=6, kernel_size=[2, 2], strides=[1, 1],
              padding="valid", dilation_rate=[2, 2], activation="relu", use_bias=True, **fmt),
        layer("MaxPooling2D", "max_pooling2d_1", pool_size=[2, 2], strides=[2, 2],
              padding="same", **fmt),
        layer("Flatten", "flatten_1", **flat),
        layer("Dense", "dense_1", units=7, activation="linear", use_bias=True),
    ]
    weights = {
        "conv2d_1": [("kernel", _init(rng, 3, 3, 2, 4)), ("bias", _init(rng, 4, scale=0.1))],
        "conv2d_2": [("kernel", _init(rng, 2, 2, 4, 5))],
        "batch_normalization_1": _bn_weights(rng, 5, scale=False),
        "conv2d_3": [("kernel", _init(rng, 2, 2, 5, 6)), ("bias", _init(rng, 6, scale=0.1))],
        "dense_1": [("kernel", _init(rng, 24, 7)), ("bias", _init(rng, 7, scale=0.1))],
    }
    # 9x9 -> same 9x9 -> same/2 5x5 -> valid dilated 3x3 -> pool same 2x2 -> 2*2*6 = 24
    shape = (9, 9, 2) if data_format == "channels_last" else (2, 9, 9)
    return layers, weights, shape


def misc_net(data_format: str, seed=2):
    """Flat input, Reshape, ZeroPadding2D, ELU conv, ReLU(max_value), average pooling
    'same', 1x1 conv, global max pooling, ELU, Activation layers."""
    rng = np.random.default_rng(seed)
    fmt = {"data_format": data_format}
    image = [4, 4, 3] if data_format == "channels_last" else [3, 4, 4]
    layers = [
        layer("Reshape", "reshape_1", target_shape=image),
        layer("ZeroPadding2D", "zero_padding2d_1", padding=[[1, 0], [0, 2]], **fmt),
        layer("Conv2D", "conv2d_1", filters=3, kernel_size=[3, 3], strides=[1, 1],
              padding="valid", activation="elu", use_bias=True, **fmt),
        layer("ReLU", "re_lu_1", max_value=0.5, negative_slope=0.0, threshold=0.0),
        layer("AveragePooling2D", "average_pooling2d_1", pool_size=[2, 2], strides=[2, 2],
              padding="same", **fmt),
        layer("Conv2D", "conv2d_2", filters=4, kernel_size=[1, 1], strides=[1, 1],
              padding="valid", activation="selu", use_bias=True, **fmt),
        layer("GlobalMaxPooling2D", "global_max_pooling2d_1", **fmt),
        layer("Dense", "dense_1", units=5, activation="softplus", use_bias=True),
        layer("ELU", "elu_1", alpha=0.7),
        layer("Activation", "activation_1", activation="sigmoid"),
        layer("Dense", "dense_2", units=3, activation="linear", use_bias=True),
        layer("Activation", "activation_2", activation="softmax"),
    ]
    weights = {
        "conv2d_1": [("kernel", _init(rng, 3, 3, 3, 3)), ("bias", _init(rng, 3, scale=0.1))],
        "conv2d_2": [("kernel", _init(rng, 1, 1, 3, 4)), ("bias", _init(rng, 4, scale=0.1))],
        "dense_1": [("kernel", _init(rng, 4, 5)), ("bias", _init(rng, 5, scale=0.1))],
        "dense_2": [("kernel", _init(rng, 5, 3)), ("bias", _init(rng, 3, scale=0.1))],
    }
    return layers, weights, (48,)


def pooling_net(data_format: str, seed=3):
    """Strided 'valid' conv, average pooling 'valid', global average pooling."""
    rng = np.random.default_rng(seed)
    fmt = {"data_format": data_format}
    layers = [
        layer("Conv2D", "conv2d_1", filters=3, kernel_size=[3, 3], strides=[2, 2],
              padding="valid", activation="tanh", use_bias=True, **fmt),
        layer("AveragePooling2D", "average_pooling2d_1", pool_size=[2, 2], strides=[1, 1],
              padding="valid", **fmt),
        layer("GlobalAveragePooling2D", "global_average_pooling2d_1", **fmt),
        layer("Dense", "dense_1", units=2, activation="linear", use_bias=True),
    ]
    weights = {
        "conv2d_1": [("kernel", _init(rng, 3, 3, 1, 3)), ("bias", _init(rng, 3, scale=0.1))],
        "dense_1": [("kernel", _init(rng, 3, 2)), ("bias", _init(rng, 2, scale=0.1))],
    }
    return layers, weights, ((11, 11, 1) if data_format == "channels_last" else (1, 11, 11))


def inputs(shape, n=6, seed=9):
    return np.random.default_rng(seed).standard_normal((n, *shape)).astype(np.float32)


def keras_arrays(model: torch.nn.Module, hwc=(7, 7)) -> list[tuple[str, list[tuple[str, np.ndarray]]]]:
    """Each Conv2d/Linear's weights laid out as Keras stores them, written from the formulas:
    conv kernel[kh, kw, i, o] = W[o, i, kh, kw]; dense kernel[i, o] = W[o, i], where for the
    dense layer after Flatten the Keras row of (h, w, c) is (h * W + w) * C + c and the torch
    column is c * H * W + h * W + w."""
    out = []
    first_dense = True
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Conv2d):
            w = m.weight.detach().numpy()
            k = np.zeros((w.shape[2], w.shape[3], w.shape[1], w.shape[0]), np.float32)
            for o in range(w.shape[0]):
                for i in range(w.shape[1]):
                    k[:, :, i, o] = w[o, i]
            out.append((name, [("kernel", k), ("bias", m.bias.detach().numpy())]))
        elif isinstance(m, torch.nn.Linear):
            w = m.weight.detach().numpy()
            k = w.T.copy()
            if first_dense:
                hh, ww = hwc
                c = w.shape[1] // (hh * ww)
                k = np.zeros_like(k)
                for h in range(hh):
                    for x in range(ww):
                        for ch in range(c):
                            k[(h * ww + x) * c + ch] = w[:, ch * hh * ww + h * ww + x]
                first_dense = False
            out.append((name, [("kernel", k), ("bias", m.bias.detach().numpy())]))
    return out


def write_save_weights(path, layers, *, extra_layers=("block1_pool1", "flatten"), full_model=False):
    """An HDF5 file in Keras 2's save_weights layout (layer groups with nested datasets)."""
    with h5py.File(path, "w") as f:
        root = f.create_group("model_weights") if full_model else f
        names = [n for n, _ in layers] + list(extra_layers)
        root.attrs["layer_names"] = np.array([n.encode() for n in names])
        root.attrs["backend"] = b"tensorflow"
        root.attrs["keras_version"] = b"2.0.8"
        for name, weights in layers:
            g = root.create_group(name)
            wn = [f"{name}/{w}:0".encode() for w, _ in weights]
            g.attrs["weight_names"] = np.array(wn)
            for (_, a), full in zip(weights, wn, strict=True):
                g.create_dataset(full.decode(), data=a)
        for name in extra_layers:
            root.create_group(name).attrs["weight_names"] = np.array([], dtype="S1")
        if full_model:
            f.attrs["model_config"] = b"{}"
    return path


def lenet_like(seed: int = 0, *, filters: int = 4, classes: int = 10, softmax: str = "activation"):
    """A channels-last 28x28x1 LeNet-like net (conv, pool, conv, pool, flatten, dense, dense):
    ``(layers, weights, input_shape)``. ``softmax``: ``"activation"`` (``Dense(activation=
    'softmax')``, as DeepXplore's LeNet-5 ends), ``"layer"`` (a separate ``Activation``), or
    ``"none"`` (logits)."""
    rng = np.random.default_rng(seed)
    fmt = {"data_format": "channels_last"}

    def init(*shape, scale=None):
        scale = scale or 1.0 / np.sqrt(np.prod(shape[:-1]))
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    act = "softmax" if softmax == "activation" else "linear"
    layers = [
        layer("Conv2D", "block1_conv1", filters=filters, kernel_size=[5, 5], strides=[1, 1], padding="same",
              dilation_rate=[1, 1], activation="relu", use_bias=True, **fmt),
        layer("MaxPooling2D", "block1_pool1", pool_size=[2, 2], strides=[2, 2], padding="valid", **fmt),
        layer("Conv2D", "block2_conv1", filters=2 * filters, kernel_size=[5, 5], strides=[1, 1],
              padding="valid", dilation_rate=[1, 1], activation="relu", use_bias=True, **fmt),
        layer("MaxPooling2D", "block2_pool1", pool_size=[2, 2], strides=[2, 2], padding="valid", **fmt),
        layer("Flatten", "flatten"),
        layer("Dense", "fc1", units=16, activation="relu", use_bias=True),
        layer("Dense", "before_softmax", units=classes, activation=act, use_bias=True),
    ]
    if softmax == "layer":
        layers.append(layer("Activation", "predictions", activation="softmax"))
    # 28 -> same 28 -> pool 14 -> valid 10 -> pool 5: 5*5*2f features
    weights = {
        "block1_conv1": [("kernel", init(5, 5, 1, filters)), ("bias", init(filters, scale=0.1))],
        "block2_conv1": [("kernel", init(5, 5, filters, 2 * filters)),
                         ("bias", init(2 * filters, scale=0.1))],
        "fc1": [("kernel", init(50 * filters, 16)), ("bias", init(16, scale=0.1))],
        "before_softmax": [("kernel", init(16, classes)), ("bias", init(classes, scale=0.1))],
    }
    return layers, weights, (28, 28, 1)


def write_lenet(path, seed: int = 0, **kwargs):
    """:func:`lenet_like` written as a full Keras model file at ``path``."""
    layers, weights, shape = lenet_like(seed, **kwargs)
    return write_full(path, sequential_config(layers, shape, form="dict"), weights)
