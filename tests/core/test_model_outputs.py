"""Model outputs checked (issue 30): finite (naming the layer), one per class, a trailing softmax
split off or refused, and the same for an input alone and in a batch; each case once through
``prepare_model`` (every command's one route) and, where the issue saw it, through the CLI."""

from __future__ import annotations

import json
from collections import OrderedDict

import numpy as np
import pytest
import torch
from torch import nn

from deepfault.cli import main
from deepfault.core.batches import predict
from deepfault.core.outputs import check_model_outputs, nonfinite_layer
from deepfault.data import Dataset
from deepfault.errors import DeepFaultError
from deepfault.models import ModelFile, build_model, save_model
from deepfault.models.prepare import prepare_model
from helpers.tiny_models import has_hooks
from helpers.xplore_models import mlp


def _data(n=24, classes=3, names=True) -> Dataset:
    x = np.random.default_rng(0).random((n, 4), dtype=np.float32)
    y = np.arange(n) % classes
    return Dataset("tiny", x, y, x, y, (0.0, 1.0), tuple(str(c) for c in range(classes)),
                   meta={"class_names_given": names})


def _net(classes=3) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(OrderedDict(fc1=nn.Linear(4, 5), relu=nn.ReLU(), logits=nn.Linear(5, classes)))


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# --- finite outputs ----------------------------------------------------------------------------


def test_nan_only_in_the_logits_is_refused_naming_the_layer():
    net = _net()
    with torch.no_grad():
        net.logits.weight[1, 0] = float("nan")
    with pytest.raises(DeepFaultError,
                       match=r"NaN or infinite outputs for input 0 \(first in layer 'logits', a Linear"):
        prepare_model(net, _data())
    assert not has_hooks(net)


def test_a_batchnorm_with_negative_running_var_is_refused_naming_it():
    net = nn.Sequential(OrderedDict(fc1=nn.Linear(4, 5), bn=nn.BatchNorm1d(5), logits=nn.Linear(5, 3)))
    net[1].running_var[2] = -1.0
    with pytest.raises(DeepFaultError,
                       match=r"first in layer 'bn', a BatchNorm1d with a negative running_var"):
        prepare_model(net, _data())


class _NanAbove(nn.Module):
    """NaN for inputs whose first feature exceeds 0.9 (none of the first batch's)."""

    def forward(self, x):
        return torch.where(x[:, :1] > 0.9, torch.full_like(x, float("nan")), x)


def test_every_batch_is_checked_not_only_the_first():
    net = nn.Sequential(OrderedDict(odd=_NanAbove(), fc=nn.Linear(4, 3)))
    x = torch.rand(10, 4) * 0.5
    x[7, 0] = 0.95
    assert nonfinite_layer(net, x[:4]) is None
    with pytest.raises(DeepFaultError, match=r"for input 7 \(first in layer 'odd', a _NanAbove\)"):
        predict(net, x, batch_size=3)
    assert not has_hooks(net)


def test_a_nan_from_forward_code_after_the_last_layer_is_named_so():
    class Divide(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x):
            return self.fc(x) / 0.0 * 0.0

    with pytest.raises(DeepFaultError, match=r"its forward, after its last layer"):
        prepare_model(Divide(), _data())


def test_a_keras_final_dense_with_a_nan_weight_is_refused(tmp_path):
    pytest.importorskip("h5py")
    from helpers.keras_files import mlp as keras_mlp
    from helpers.keras_files import sequential_config, write_full

    layers, weights, shape = keras_mlp()
    weights["dense_3"][0][1][3, 2] = np.nan
    path = write_full(tmp_path / "m.h5", sequential_config(layers, shape, form="dict"), weights)
    x = np.random.default_rng(0).random((12, 20), dtype=np.float32)
    y = np.arange(12) % 10
    data = Dataset("k", x, y, x, y, (0.0, 1.0), tuple(str(c) for c in range(10)))
    with pytest.raises(DeepFaultError, match=r"NaN or infinite outputs .*first in layer 'dense_3"):
        prepare_model(path, data)


@pytest.mark.parametrize("by", ["gini", "lsa"])
def test_coverage_rank_refuses_a_model_whose_logits_are_nan(tmp_path, capsys, by):
    """Today: '485 of 540 inputs misclassified' as a normal result (the issue), a refusal that does
    not say where (gini) or a misleading one (lsa: 'all inputs are in one class')."""
    torch.manual_seed(0)
    model = build_model("digits_mlp", hidden=[12, 10])
    with torch.no_grad():
        model.logits.weight[3, 0] = float("nan")
    path = save_model(tmp_path / "m.pt", ModelFile(model.eval(), "digits_mlp", {"hidden": [12, 10]},
                                                    dataset="digits", bounds=(0.0, 1.0)))
    out = tmp_path / "r.json"
    code, text, err = run_cli(capsys, "coverage", "rank", "--model", path, "--by", by, "--out", out,
                              "--no-progress")
    assert code == 2, text
    assert err.count("\n") == 1
    assert "Traceback" not in err
    assert "first in layer 'logits'" in err
    assert not out.exists()


# --- one output per class ----------------------------------------------------------------------


@pytest.mark.parametrize(("outputs", "word"), [(4, "4 outputs per input but data set 'tiny' has 3 classes"),
                                               (2, "2 outputs per input but data set 'tiny' has 3 classes")])
def test_outputs_other_than_the_classes_are_refused(outputs, word):
    with pytest.raises(DeepFaultError, match=word):
        prepare_model(_net(outputs), _data())


def test_an_npz_without_class_names_takes_a_wider_models_classes(tmp_path):
    """Its classes are only the labels seen: a 5-output model on labels 0..2 is fine (and its
    class names grow), a 2-output model is not."""
    path = tmp_path / "d.npz"
    x = np.random.default_rng(0).random((9, 4), dtype=np.float32)
    np.savez(path, x=x, y=np.arange(9) % 3)
    pm = prepare_model(_net(5), str(path))
    assert pm.num_classes == 5
    assert pm.data is not None
    assert pm.data.num_classes == 5
    with pytest.raises(DeepFaultError, match="2 outputs per input"):
        prepare_model(_net(2), str(path))
    np.savez(path, x=x, y=np.arange(9) % 3, class_names=np.array(["a", "b", "c"]))
    with pytest.raises(DeepFaultError, match="5 outputs per input but data set 'd' has 3 classes"):
        prepare_model(_net(5), str(path))


def test_repair_with_a_model_of_fewer_outputs_is_one_line(tmp_path, capsys):
    """Today: IndexError in repair."""
    torch.manual_seed(0)
    small = nn.Sequential(OrderedDict(flat=nn.Flatten(), fc1=nn.Linear(64, 12), relu=nn.ReLU(),
                                      logits=nn.Linear(12, 6)))
    path = tmp_path / "small.pt"
    torch.save(small, path)
    inputs = tmp_path / "x.npz"
    from deepfault.data import load_dataset

    data = load_dataset("digits")
    np.savez(inputs, synthesized=data.x_test[:6], originals=data.x_test[:6], labels=data.y_test[:6],
             test_index=np.arange(6))
    code, text, err = run_cli(capsys, "repair", inputs, "--model", path, "--dataset", "digits",
                              "--trust-pickle", "--out", tmp_path / "r.json", "--epochs", "1",
                              "--no-progress")
    assert code == 2, text
    assert "6 outputs per input but data set 'digits' has 10 classes" in err
    assert err.count("\n") == 1


# --- a trailing softmax ------------------------------------------------------------------------


def _npz(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (60, 4)).astype(np.float32)
    path = tmp_path / "d.npz"
    np.savez(path, x=x, y=np.zeros(60, np.int64), class_names=np.array(["a", "b", "c"]))
    return path


def _save(module, path, how):
    if how == "torchscript":
        torch.jit.save(torch.jit.script(module), str(path))
    else:
        torch.save(module, path)
    return path


@pytest.mark.filterwarnings("ignore:.*hardly images:UserWarning", "ignore::DeprecationWarning")
@pytest.mark.parametrize("how", ["torchscript", "pickle"])
def test_models_ending_in_nn_softmax_find_what_their_logits_find(tmp_path, capsys, how):
    """Today: the softmax is taken for logits and xplore finds other (fewer) inputs."""
    data = _npz(tmp_path)
    found = {}
    for kind in ("logits", "softmax"):
        paths = []
        for i, shift in enumerate((0.0, 0.3, -0.3)):
            net = mlp(shift)
            if kind == "softmax":
                net = nn.Sequential(OrderedDict([*net.named_children(), ("softmax", nn.Softmax(dim=1))]))
            paths.append(str(_save(net, tmp_path / f"{kind}{i}.pt", how)))
        out = tmp_path / f"{kind}.json"
        code, text, err = run_cli(capsys, "xplore", "--model", ",".join(paths), "--dataset", data,
                                  "--trust-pickle", "--num-seeds", "40", "--step-size", "0.5", "--iterations",
                                  "10", "--constraint", "none", "--out", out, "--no-progress")
        assert code == 0, err
        found[kind] = np.load(out.with_suffix(".npz"))["inputs"]
    assert len(found["logits"]) > 0
    np.testing.assert_allclose(found["softmax"], found["logits"], atol=1e-5)


def test_a_softmax_inside_forward_is_refused_when_taken_for_logits():
    class Probabilities(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = _net()

        def forward(self, x):
            return torch.nn.functional.softmax(self.net(x), dim=1)

    with pytest.raises(DeepFaultError, match="every output row is a probability distribution"):
        prepare_model(Probabilities(), _data())
    assert prepare_model(Probabilities(), _data(), output_kind="probabilities").output_kind == "probabilities"


# --- batch independence ------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("how", ["module", "torchscript"])
def test_a_softmax_over_the_batch_axis_is_refused(tmp_path, how):
    net = nn.Sequential(OrderedDict(fc1=nn.Linear(4, 3), softmax=nn.Softmax(dim=0)))
    model = net if how == "module" else str(_save(net, tmp_path / "m.pt", "torchscript"))
    with pytest.raises(DeepFaultError, match="other outputs alone than in a batch"):
        prepare_model(model, _data())


def test_the_check_is_one_call_and_gives_the_width():
    x = torch.rand(8, 4)
    assert check_model_outputs(_net(), x, num_classes=3) == 3
    assert check_model_outputs(_net(), x[:1], num_classes=3) == 3  # one input: run as a batch of two
    # without data, zeros of the model's shape
    pm = prepare_model(_net(7), None, input_shape=(4,))
    assert pm.num_classes == 7


def test_the_result_json_of_a_good_model_is_unchanged(tmp_path, capsys):
    """The checks add nothing to results: a sound model runs as before."""
    torch.manual_seed(0)
    model = build_model("digits_mlp", hidden=[12, 10])
    path = save_model(tmp_path / "m.pt", ModelFile(model.eval(), "digits_mlp", {"hidden": [12, 10]},
                                                    dataset="digits", bounds=(0.0, 1.0)))
    out = tmp_path / "r.json"
    code, _, err = run_cli(capsys, "coverage", "rank", "--model", path, "--by", "gini", "--out", out,
                           "--no-progress")
    assert code == 0, err
    assert json.loads(out.read_text())["rankings"]


# --- one input ---------------------------------------------------------------------------------


def test_a_two_input_onnx_model_is_one_line(tmp_path, capsys):
    """Today: TypeError: forward() missing 1 required positional argument."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    try:
        from deepfault.models.onnx import _onnx2torch

        _onnx2torch()
    except ModuleNotFoundError:
        pytest.skip("onnx2torch not installed")
    a, b, y = (helper.make_tensor_value_info(n, TensorProto.FLOAT, [None, 4]) for n in "aby")
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "g", [a, b], [y])
    path = tmp_path / "two.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    data = tmp_path / "d.npz"
    np.savez(data, x=np.random.default_rng(0).random((8, 4), dtype=np.float32), y=np.arange(8) % 4)
    code, text, err = run_cli(capsys, "run", "--model", path, "--dataset", data, "--out", tmp_path / "r.json")
    assert code == 2, text
    assert "has 2 inputs (a, b) and 1 outputs; deepfault needs a single-input classifier" in err
    assert err.count("\n") == 1
