"""Keras 2 files written with h5py in Keras's own layout (what ``model.save`` and
``model.to_json`` + ``save_weights`` write), for tests that need Keras model files.

Copied from ``tests/test_keras_import.py`` (tests do not import each other), plus
:func:`lenet_like`, a small channels-last LeNet whose geometric mutation rules apply.
"""

from __future__ import annotations

import json

import h5py
import numpy as np


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
