"""Keras import of hostile or damaged configs: only DeepFaultError may come out, fast.

Explicit regression tests for each crash found in review, then a seeded fuzzer that
mutates one value of a real config at a time and loads the result.
"""

from __future__ import annotations

import copy
import json
import random
import shutil
import time
import traceback

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")

from deepfault.errors import DeepFaultError  # noqa: E402
from deepfault.models.keras import load_keras  # noqa: E402
from helpers.keras_files import (  # noqa: E402
    convnet,
    functional_config,
    layer,
    misc_net,
    mlp,
    sequential_config,
    write_full,
    write_pair,
)

# --------------------------------------------------------------------------- fixtures

#: A JSON string that :func:`dump` replaces by a list nested this deep.
DEEP, NESTING = "__deep_list__", 2000
#: The same, nested deeper than the importer's limit but shallow enough for json to parse.
DEEPISH, NESTING_ISH = "__deepish_list__", 200


def dump(config: dict) -> str:
    """``json.dumps`` that also writes lists nested deeper than ``json.dumps`` can."""
    return (json.dumps(config)
            .replace(json.dumps(DEEP), "[" * NESTING + "]" * NESTING)
            .replace(json.dumps(DEEPISH), "[" * NESTING_ISH + "]" * NESTING_ISH))


def models() -> dict[str, tuple[dict, dict]]:
    """Name -> (config, weights): a Sequential dense model, a Sequential conv model, and a
    functional chain of misc layers (Reshape, ZeroPadding2D, pooling, ReLU, ...)."""
    dense_layers, dense_weights, dense_shape = mlp()
    conv_layers, conv_weights, conv_shape = convnet("channels_last")
    misc_layers, misc_weights, misc_shape = misc_net("channels_last")
    return {
        "dense": (sequential_config(dense_layers, dense_shape, form="dict+input"), dense_weights),
        "conv": (sequential_config(conv_layers, conv_shape, form="dict"), conv_weights),
        "functional": (functional_config(misc_layers, misc_shape), misc_weights),
    }


class Files(dict):
    """Name -> (config, JSON path, weights path, full .h5 path); each lookup gives a fresh
    copy of the config to change."""

    def __getitem__(self, name):
        text, *paths = super().__getitem__(name)
        return (json.loads(text), *paths)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Files:
    """The files of :func:`models`, each checked to load cleanly."""
    root = tmp_path_factory.mktemp("keras_hostile")
    out = Files()
    for name, (config, weights) in models().items():
        json_path, h5_path = write_pair(root / name, config, weights)
        full = write_full(root / f"{name}_full.h5", config, weights)
        load_keras(json_path, weights=h5_path)
        load_keras(full)
        out[name] = (json_path.read_text(), json_path, h5_path, full)
    return out


def load_text(tmp_path, text: str, weights):
    path = tmp_path / "mutant.json"
    path.write_text(text)
    return load_keras(path, weights=weights)


def error(tmp_path, config, weights, match: str) -> str:
    """The one-line DeepFaultError that loading ``config`` (a dict or JSON text) raises."""
    text = config if isinstance(config, str) else dump(config)
    with pytest.raises(DeepFaultError, match=match) as info:
        load_text(tmp_path, text, weights)
    assert "\n" not in str(info.value)
    return str(info.value)


def layer_cfg(config: dict, name: str) -> dict:
    inner = config["config"]
    items = inner if isinstance(inner, list) else inner["layers"]
    return next(item for item in items if (item.get("name") or item["config"]["name"]) == name)


# --------------------------------------------------------------------------- regressions


def test_cycle_through_the_input_is_refused_fast(tmp_path, files):
    config, _, h5, _ = files["functional"]
    # the chain input_1 -> reshape_1 -> ... -> activation_2, closed into a loop that the
    # input refers into: the old loader followed it until memory ran out
    config["config"]["input_layers"] = [["reshape_1", 0, 0]]
    layer_cfg(config, "reshape_1")["inbound_nodes"] = [[["activation_2", 0, 0, {}]]]
    start = time.perf_counter()
    error(tmp_path, config, h5, r"has a cycle: each layer of 'reshape_1' -> \.\.\. -> 'reshape_1' takes")
    assert time.perf_counter() - start < 2


def test_layer_that_takes_its_own_output(tmp_path, files):
    config, _, h5, _ = files["functional"]
    layer_cfg(config, "dense_1")["inbound_nodes"] = [[["dense_1", 0, 0, {}]]]
    error(tmp_path, config, h5, r"has a cycle: each layer of 'dense_1' -> 'dense_1' takes its input")


@pytest.mark.parametrize(("model", "layer_name", "key", "value", "match"), [
    ("dense", "dense_1", "units", 10**12, r"'dense_1' \(Dense\).*units=1000000000000; expected an "
     r"integer from 1 to 16777216"),
    ("dense", "dense_1", "units", -5, r"units=-5; expected an integer from 1"),
    ("dense", "dense_1", "units", True, r"units=True; expected an integer"),
    ("dense", "dense_1", "units", "16", r"units='16'"),
    ("conv", "conv2d_1", "filters", 2**40, r"'conv2d_1' \(Conv2D\).*filters=1099511627776"),
    ("conv", "conv2d_1", "strides", [0, 0], r"'conv2d_1'.*strides=\[0, 0\]; expected an integer "
     r"from 1 to 16777216 or a list of two"),
    ("conv", "conv2d_1", "kernel_size", [3], r"kernel_size=\[3\]"),
    ("conv", "max_pooling2d_1", "pool_size", 0, r"'max_pooling2d_1'.*pool_size=0"),
    ("conv", "max_pooling2d_1", "strides", [2, 0], r"strides=\[2, 0\]"),
    ("dense", "dense_1", "activation", ["relu"], r"activation=\['relu'\]; expected an activation"),
    ("dense", "dropout_1", "rate", 7, r"'dropout_1'.*rate=7; expected a number from 0 to 1"),
    ("dense", "dense_1", "use_bias", "false", r"use_bias='false'; expected true or false"),
    ("functional", "zero_padding2d_1", "padding", [[1, -1], [0, 2]], r"padding=\[\[1, -1\], \[0, 2\]\]"),
    ("functional", "reshape_1", "target_shape", [-1, -1, 3], r"target_shape=\[-1, -1, 3\]"),
    ("functional", "re_lu_1", "max_value", float("inf"), r"max_value=inf; expected null or a finite"),
    ("functional", "re_lu_1", "max_value", -1, r"max_value=-1; expected null or a finite number >= 0"),
    ("functional", "re_lu_1", "max_value", 0, r"'re_lu_1' \(ReLU\) uses max_value=0 \(an output of zeros\)"),
])
def test_out_of_range_and_mistyped_options(tmp_path, files, model, layer_name, key, value, match):
    config, _, h5, _ = files[model]
    layer_cfg(config, layer_name)["config"][key] = value
    error(tmp_path, config, h5, match)


def test_required_option_missing(tmp_path, files):
    config, _, h5, _ = files["dense"]
    del layer_cfg(config, "dense_2")["config"]["units"]
    error(tmp_path, config, h5, r"'dense_2' \(Dense\).*has no 'units' option")


def test_a_layer_too_large_for_its_input_is_refused_before_allocating(tmp_path, files):
    config, _, h5, _ = files["conv"]
    # every option in range, but 2**24 * 2**24 * 2 * 4 weights
    layer_cfg(config, "conv2d_1")["config"]["kernel_size"] = [2**24, 2**24]
    error(tmp_path, config, h5, r"'conv2d_1' \(Conv2D\) would have \d+ weights.*more than")
    config, _, h5, _ = files["dense"]
    layer_cfg(config, "dense_1")["config"]["units"] = 2**24
    layer_cfg(config, "dense_2")["config"]["units"] = 2**24  # 2**48 weights
    error(tmp_path, config, h5, r"'dense_2' \(Dense\) would have")
    config, _, h5, _ = files["functional"]
    layer_cfg(config, "zero_padding2d_1")["config"]["padding"] = [[2**24, 2**24], [2**24, 0]]
    error(tmp_path, config, h5, r"'zero_padding2d_1'.*values per input, more than")


def test_sizes_that_fit_the_limits_but_not_the_weights(tmp_path, files):
    config, _, h5, _ = files["dense"]
    layer_cfg(config, "dense_1")["config"]["units"] = 2**20  # 20 * 2**20 weights: fine
    layer_cfg(config, "dense_2")["config"]["units"] = 8192  # 2**33 weights: refused
    error(tmp_path, config, h5, r"'dense_2' \(Dense\) would have 8589934592 weights")
    layer_cfg(config, "dense_2")["config"]["units"] = 12
    # 4 * 2**24 weights checked against the file's (20, 16) kernel before any allocation
    error(tmp_path, config, h5, r"'dense_1/kernel:0'.*\(20, 16\) but the model needs \(20, 1048576\)")


@pytest.mark.parametrize(("shape", "match"), [
    ("(None, 20)", r"batch_input_shape='\(None, 20\)'; expected a list of 2 to 9 entries"),
    ([None, 10**12], r"batch_input_shape=\[None, 1000000000000\]"),
    ([None, "20"], r"batch_input_shape=\[None, '20'\]"),
    ([None, 0], r"batch_input_shape=\[None, 0\]"),
    ([None], r"batch_input_shape=\[None\]"),
    ([None, 2**16, 2**16, 2**16], r"values per input, more than load_keras accepts"),
])
def test_bad_batch_input_shape(tmp_path, files, shape, match):
    config, _, h5, _ = files["dense"]
    layer_cfg(config, "input_1")["config"]["batch_input_shape"] = shape
    error(tmp_path, config, h5, match)


def test_keras_version_and_backend_must_be_strings(tmp_path, files):
    config, _, h5, _ = files["dense"]
    error(tmp_path, {**config, "keras_version": 2}, h5, r"keras_version=2, not a string")
    error(tmp_path, {**config, "backend": ["tensorflow"]}, h5, r"backend=\['tensorflow'\], not a string")


@pytest.mark.parametrize("model", ["dense", "functional"])
def test_layers_given_as_a_string(tmp_path, files, model):
    config, _, h5, _ = files[model]
    config["config"]["layers"] = "dense_1, dense_2"
    error(tmp_path, config, h5, r"the 'layers' of the Keras model .* is 'dense_1, dense_2', not a list")


@pytest.mark.parametrize("model", ["dense", "functional"])
def test_model_config_is_garbage(tmp_path, files, model):
    config, _, h5, _ = files[model]
    error(tmp_path, {**config, "config": "garbage"}, h5, r"the 'config' .* is 'garbage', not a dict")


@pytest.mark.parametrize(("item", "match"), [
    ("dense_1", r"layer 1 of the Keras model .* is 'dense_1', not a dict"),
    ({"class_name": "Dense", "config": "garbage"}, r"layer 1 .* has no name"),
    ({"class_name": "Dense", "name": "d", "config": "garbage"},
     r"'d' \(Dense\).*config 'garbage', not a dict"),
    ({"class_name": ["Dense"], "config": {"name": "d"}}, r"'d'.*class_name \['Dense'\], not a string"),
    ({"class_name": "Dense", "config": {"name": "input_1", "units": 3}}, r"two layers .* named 'input_1'"),
])
def test_malformed_layer_entries(tmp_path, files, item, match):
    config, _, h5, _ = files["dense"]
    config["config"]["layers"].insert(1, item)
    error(tmp_path, config, h5, match)


@pytest.mark.parametrize(("nodes", "match"), [
    ("dense_1", r"inbound_nodes of Keras layer 'dense_1' .* is 'dense_1'; expected a list of nodes"),
    ([["reshape_1", 0, 0, {}]], r"inbound_nodes of Keras layer 'dense_1' .* expected a list of \[layer"),
    ([[["reshape_1"]]], r"\[\['reshape_1'\]\]; expected a list of \[layer name, node index"),
    ([[["reshape_1", "0", 0, {}]]], r"expected a list of \[layer name"),
    ([[[7, 0, 0, {}]]], r"expected a list of \[layer name"),
    ([[["nowhere", 0, 0, {}]]], r"'dense_1' of the functional .* refers to layer 'nowhere', which the "
     r"model does not have"),
    ([[["elu_1", 0, 0, {}]]], r"cycle: each layer of 'dense_1' -> 'elu_1' -> 'dense_1' takes"),
    ([[["global_max_pooling2d_1", 1, 0, {}]]], r"not a chain .*call 1 of layer 'global_max_pooling2d_1'"),
    ([], r"not a chain \(layer 'dense_1' is called 0 times\)"),
])
def test_malformed_inbound_nodes(tmp_path, files, nodes, match):
    config, _, h5, _ = files["functional"]
    layer_cfg(config, "dense_1")["inbound_nodes"] = nodes
    error(tmp_path, config, h5, match)


@pytest.mark.parametrize("key", ["input_layers", "output_layers"])
@pytest.mark.parametrize(("ends", "match"), [
    ("input_1", r"is 'input_1'; expected a list of \[layer name, node index, tensor index\]"),
    ([["input_1", 0]], r"expected a list of \[layer name"),
    ([[None, 0, 0]], r"expected a list of \[layer name"),
    ({"input_1": 0}, r"expected a list of \[layer name"),
    ([], r"not a chain \(\d inputs and \d outputs\)"),
    ([["nowhere", 0, 0]], r"refers to layer 'nowhere', which the model does not have"),
])
def test_malformed_input_and_output_layers(tmp_path, files, key, ends, match):
    config, _, h5, _ = files["functional"]
    config["config"][key] = ends
    error(tmp_path, config, h5, match)


@pytest.mark.parametrize("nesting", [NESTING_ISH, NESTING, 100_000])
def test_deeply_nested_json(tmp_path, files, nesting):
    config, _, h5, _ = files["dense"]
    text = json.dumps(config)[:-1] + ', "extra": ' + "[" * nesting + "]" * nesting + "}"
    error(tmp_path, text, h5, r"nested (more than 64 levels deep|too deeply)")


def test_deeply_nested_model_config_in_hdf5(tmp_path, files):
    *_, full = files["dense"]
    path = shutil.copy(full, tmp_path / "deep.h5")
    with h5py.File(path, "a") as f:
        f.attrs["model_config"] = "[" * 5000 + "]" * 5000
    with pytest.raises(DeepFaultError, match=r"model_config of .* nested too deeply"):
        load_keras(path)


def test_huge_integer_literal(tmp_path, files):
    config, _, h5, _ = files["dense"]
    text = dump(config).replace('"units": 16', '"units": 1' + "0" * 5000)
    error(tmp_path, text, h5, r"neither HDF5 nor JSON \(Exceeds the limit")


def test_plain_hdf5_file_is_not_called_weights_only(tmp_path, files):
    path = tmp_path / "data.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(10))
        f.attrs["note"] = "no Keras here"
    config, *_ = files["dense"]
    message = error(tmp_path, config, path, r"'.*data\.h5' holds no Keras weights")  # as weights
    assert "--weights FILE" in message
    assert "weights only" not in message
    with pytest.raises(DeepFaultError) as info:
        load_keras(path)
    message = str(info.value)
    assert "is an HDF5 file with no Keras model config or weights in it" in message
    assert "save_weights" not in message.split(";")[0]
    assert "weights only" not in message
    assert "--weights FILE" in message
    assert "weights= in Python" in message


def test_messages_speak_to_command_line_users(tmp_path, files):
    config, json_path, h5, _ = files["dense"]
    with pytest.raises(DeepFaultError) as info:
        load_keras(json_path)
    assert "--weights FILE on the command line" in str(info.value)
    assert "weights= in Python" in str(info.value)
    with pytest.raises(DeepFaultError) as info:
        load_keras(h5)  # weights only, given as the model
    assert "weights only" in str(info.value)
    assert "--model ARCH.json --weights FILE" in str(info.value)
    (tmp_path / "stem.json").write_text(dump(config))
    with pytest.raises(DeepFaultError, match=r"--model DIR/NAME on the command line"):
        load_keras(tmp_path / "stem")
    with h5py.File(tmp_path / "bare.h5", "w") as f:
        f.attrs["model_config"] = dump(config)
    with pytest.raises(DeepFaultError, match=r"holds no Keras weights.*--weights FILE"):
        load_keras(tmp_path / "bare.h5")


def test_unsupported_layer_is_still_named_after_validation(tmp_path, files):
    config, _, h5, _ = files["dense"]
    config["config"]["layers"].append(layer("LSTM", "lstm_1", units=-3))
    error(tmp_path, config, h5, r"'lstm_1'.*is a LSTM, which load_keras does not support")


# --------------------------------------------------------------------------- fuzzing

#: What a mutated value becomes: wrong types, out-of-range numbers, deep nesting.
REPLACEMENTS = ["garbage", "", -5, -1, 0, 1, 10**12, 2**40, 10**400, -(10**12), 2.5, float("nan"),
                float("inf"), 1e308, True, False, None, [], [0, 0], [None], [1, 2, 3], [[1, 1], [1]],
                {}, {"x": 1}, {"class_name": "Dense"}, DEEP, DEEPISH, "channels_first", "same",
                "softmax", "InputLayer", "input_1", ["input_1", 0, 0]]
MUTATIONS_PER_MODEL = 1000
SEED = 20240607


def _paths(value, path=()):
    """Every path into a JSON value (dict keys and list indices), the root left out."""
    children = (value.items() if isinstance(value, dict)
                else enumerate(value) if isinstance(value, list) else ())
    for key, child in children:
        yield (*path, key)
        yield from _paths(child, (*path, key))


def _at(value, path):
    for key in path:
        value = value[key]
    return value


def _layer_items(config):
    inner = config.get("config")
    items = inner if isinstance(inner, list) else inner.get("layers") if isinstance(inner, dict) else None
    return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []


def _name(item):
    cfg = item.get("config")
    return item.get("name") or (cfg.get("name") if isinstance(cfg, dict) else None)


def mutate(config: dict, rng: random.Random) -> str:
    """Change one thing in ``config`` in place; return what was done, for failure reports."""
    items = _layer_items(config)
    op = rng.random()
    if op < 0.06 and len(items) > 2:  # two layers with one name
        a, b = rng.sample(items, 2)
        b["name"] = _name(a)
        if isinstance(b.get("config"), dict):
            b["config"]["name"] = _name(a)
        return f"duplicate name {_name(a)!r}"
    if op < 0.14 and len(items) > 2 and "inbound_nodes" in items[1]:  # a loop or a forward edge
        i = rng.randrange(1, len(items))
        j = rng.randrange(i, len(items))
        items[i]["inbound_nodes"] = [[[_name(items[j]), 0, 0, {}]]]
        return f"layer {_name(items[i])!r} takes its input from later layer {_name(items[j])!r}"
    path = rng.choice(list(_paths(config)))
    parent = _at(config, path[:-1])
    if op < 0.24:
        del parent[path[-1]]
        return f"delete {list(path)}"
    value = rng.choice(REPLACEMENTS)
    parent[path[-1]] = copy.deepcopy(value)
    return f"set {list(path)} = {value!r:.40}"


def check_load(tmp_path, text: str, weights, full=None) -> tuple[str, str | None]:
    """Load a mutant (through a full-model .h5 copy of ``full`` when given); return the
    outcome (``"loaded"``, ``"refused"`` or ``"crashed"``) and what went wrong, if anything."""
    try:
        if full is not None:
            path = shutil.copy(full, tmp_path / "mutant.h5")
            with h5py.File(path, "a") as f:
                f.attrs["model_config"] = text
            load_keras(path)
        else:
            load_text(tmp_path, text, weights)
    except DeepFaultError as err:
        return "refused", f"multi-line message {str(err)!r:.200}" if "\n" in str(err) else None
    except Exception as err:  # noqa: BLE001 - any other exception is the bug being hunted
        frame = traceback.extract_tb(err.__traceback__)[-1]
        return "crashed", (f"{type(err).__name__}: {str(err)[:120]} at "
                           f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno}")
    return "loaded", None


#: What every option of every layer is set to in turn by the sweep.
BOUNDARY = [0, -1, 10**12, 0.5, "x", None, [0, 0], True]


@pytest.mark.parametrize("model", ["dense", "conv", "functional"])
def test_every_layer_option_at_boundary_values(tmp_path, files, model):
    """The systematic half of the fuzzer: each option of each layer, one at a time, set
    to each of ``BOUNDARY`` (random picks reach only some of these pairs)."""
    base, _, h5, _ = files[model]
    failures, count = [], 0
    for item in _layer_items(base):
        for key in item.get("config", {}):
            if key == "name":
                continue
            for value in BOUNDARY:
                config = json.loads(json.dumps(base))
                next(i for i in _layer_items(config) if _name(i) == _name(item))["config"][key] = value
                outcome, problem = check_load(tmp_path, dump(config), h5)
                count += 1
                if problem:
                    failures.append(f"{_name(item)}.{key} = {value!r}: {problem}")
    assert not failures, f"{len(failures)} of {count} changes crashed:\n" + "\n".join(failures[:20])


@pytest.mark.parametrize("model", ["dense", "conv", "functional"])
def test_fuzzed_configs_raise_only_deepfault_errors(tmp_path, files, model):
    """Seeded one-change mutations of a real config: a clean load or a one-line
    DeepFaultError, never another exception, never a slow load. One in ten goes through a
    full-model .h5 file instead of JSON + weights."""
    base, _, h5, full = files[model]
    rng = random.Random(f"{SEED}-{model}")
    failures, outcomes, slowest = [], {"loaded": 0, "refused": 0, "crashed": 0}, (0.0, "")
    for n in range(MUTATIONS_PER_MODEL):
        config = json.loads(json.dumps(base))
        what = mutate(config, rng)
        text = dump(config)
        via_h5 = n % 10 == 0 and len(text) < 60_000  # HDF5 attributes hold up to 64 KiB
        start = time.perf_counter()
        outcome, problem = check_load(tmp_path, text, h5, full if via_h5 else None)
        slowest = max(slowest, (time.perf_counter() - start, what))
        outcomes[outcome] += 1
        if problem:
            failures.append(f"{what}: {problem}")
    assert not failures, f"{len(failures)} of {MUTATIONS_PER_MODEL} mutations crashed:\n" + "\n".join(
        failures[:20])
    assert slowest[0] < 2.0, f"slowest load took {slowest[0]:.2f} s: {slowest[1]}"
    assert outcomes["refused"] > MUTATIONS_PER_MODEL // 2  # the mutations do bite
