"""Opening every supported model file, and the zoo."""

import importlib.util
import sys

import numpy as np
import pytest
import torch

from deepfault import DeepFaultError
from deepfault.data import Dataset
from deepfault.models import ModelFile, build_model, list_architectures, load_model, open_model, save_model

PARAMS = {"mnist_1": 27_420, "mnist_2": 22_975, "mnist_3": 18_680,
          "cifar_1": 411_434, "cifar_2": 724_010, "cifar_3": 1_250_858}
INPUT = {"cifar": (3, 32, 32), "digits": (1, 8, 8), "mnist": (1, 28, 28), "lenet": (1, 28, 28),
         "dcgan_discriminator": (1, 28, 28), "dcgan_generator": (100,), "alexnet": (1, 28, 28)}
#: Architectures that are not 10-class classifiers: their output shape per input.
OUTPUT = {"dcgan_discriminator": (1,), "dcgan_generator": (1, 28, 28)}


def _input_shape(arch):
    return next(v for k, v in INPUT.items() if arch.startswith(k))


@pytest.mark.parametrize("arch", sorted(PARAMS))
def test_paper_models_have_the_spec_parameter_counts(arch):
    model = build_model(arch)
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == PARAMS[arch]


@pytest.mark.parametrize("arch", list_architectures())
def test_every_architecture_runs_and_round_trips(arch, tmp_path):
    torch.manual_seed(0)
    model = build_model(arch).eval()
    x = torch.rand(2, *_input_shape(arch))
    assert model(x).shape == (2, *OUTPUT.get(arch, (10,)))
    save_model(tmp_path / "m.pt", ModelFile(model, arch, dataset="digits", meta={"test_accuracy": 0.5}))
    mf = load_model(tmp_path / "m.pt")
    assert torch.equal(mf.model(x), model(x))
    assert mf.meta["test_accuracy"] == 0.5


def test_state_dict_needs_arch(tmp_path):
    model = build_model("lenet1").eval()
    torch.save(model.state_dict(), tmp_path / "sd.pt")
    with pytest.raises(DeepFaultError, match="plain state_dict.*--arch.*lenet1"):
        open_model(tmp_path / "sd.pt")
    mf = open_model(tmp_path / "sd.pt", arch="lenet1")
    x = torch.rand(3, 1, 28, 28)
    assert torch.equal(mf.model(x), model(x))
    with pytest.raises(DeepFaultError, match="does not fit architecture 'lenet4'") as err:
        open_model(tmp_path / "sd.pt", arch="lenet4")
    _whole_keys(str(err.value), model.state_dict(), build_model("lenet4").state_dict())


def _whole_keys(message: str, have: dict, want: dict) -> None:
    """A state_dict mismatch names whole keys (never cut mid-word), each kind at most three."""
    detail = message.split(": ", 1)[1]
    for part in detail.split("; "):
        kind, _, listed = part.partition("keys ") if "keys " in part else ("", "", "")
        if not kind:
            continue
        for key in listed.split(" and ")[0].split(", "):
            assert key in have or key in want, (key, message)
        assert len(listed.split(" and ")[0].split(", ")) <= 3
    assert "missing keys " in detail or "unexpected keys " in detail or "shapes differ: " in detail


def test_a_mismatch_names_missing_unexpected_and_resized_keys(tmp_path):
    model = build_model("digits_mlp").eval()
    state = dict(model.state_dict())
    first = next(iter(state))
    state[first] = torch.zeros(3, 3)  # resized
    state.update({f"extra.layer{i}.weight": torch.zeros(1) for i in range(5)})  # unexpected
    del state[list(state)[1]]  # missing
    torch.save(state, tmp_path / "sd.pt")
    with pytest.raises(DeepFaultError) as err:
        open_model(tmp_path / "sd.pt", arch="digits_mlp")
    text = str(err.value)
    assert "missing keys " in text
    assert "unexpected keys extra.layer0.weight, extra.layer1.weight, extra.layer2.weight and 2 more" in text
    assert f"shapes differ: {first} 3x3 in the file but " in text
    _whole_keys(text, state, model.state_dict())


def test_torchscript(tmp_path):
    model = build_model("lenet4").eval()
    torch.jit.script(model).save(str(tmp_path / "m.ts"))
    mf = open_model(tmp_path / "m.ts")
    x = torch.rand(2, 1, 28, 28)
    assert (mf.model(x) - model(x)).abs().max() < 1e-6
    assert mf.arch == "torchscript"
    assert not isinstance(mf.model, torch.jit.ScriptModule)
    from deepfault import activations

    layout, _ = activations(mf.model, x)
    assert layout.names == ("block1_conv1", "block2_conv1", "fc1")


class _Doubled(torch.nn.Module):
    """A module with its own forward: TorchScript runs it compiled (no layers to rebuild)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(2, 2)

    def forward(self, x):
        return self.a(x) * 2


def test_torchscript_with_custom_forward_is_explained(tmp_path):
    torch.jit.script(_Doubled()).save(str(tmp_path / "c.ts"))
    mf = open_model(tmp_path / "c.ts")  # runs compiled: outputs and gradients, no hooks
    from deepfault import activations

    with pytest.raises(DeepFaultError, match="compiled code, where forward hooks cannot run.*state_dict"):
        activations(mf.model, torch.rand(2, 2))


def test_a_torchscript_load_warns_nothing_when_it_succeeds(tmp_path):
    """Issue 43: every load printed torch's "`torch.jit.load` is deprecated" notice (and a compiled
    model's copy, repair's, two more); exactly that notice is silenced, any other warning passes."""
    import copy
    import warnings

    from deepfault.models.torchscript import jit_quietly

    torch.jit.script(_Doubled()).save(str(tmp_path / "c.ts"))
    torch.jit.script(build_model("digits_mlp").eval()).save(str(tmp_path / "m.ts"))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        compiled = open_model(tmp_path / "c.ts").model
        copy.deepcopy(compiled)
        open_model(tmp_path / "m.ts")
        with jit_quietly():
            warnings.warn("another deprecation", DeprecationWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["another deprecation"]


def test_pickled_module_needs_trust(tmp_path):
    torch.save(build_model("digits_mlp"), tmp_path / "whole.pt")
    with pytest.raises(DeepFaultError, match="unpickling can run arbitrary code.*--trust-pickle"):
        open_model(tmp_path / "whole.pt")
    mf = open_model(tmp_path / "whole.pt", trust_pickle=True)
    assert isinstance(mf.model, torch.nn.Sequential)
    assert mf.meta["pickled"]


@pytest.mark.parametrize(
    ("content", "match"),
    [(b"junk", "corrupt or truncated"), (None, "does not exist")],
)
def test_bad_files(tmp_path, content, match):
    path = tmp_path / "m.pt"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(DeepFaultError, match=match):
        open_model(path)


def test_truncated_model_file(tmp_path):
    save_model(tmp_path / "m.pt", ModelFile(build_model("mnist_1"), "mnist_1"))
    data = (tmp_path / "m.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(DeepFaultError, match="not a model file deepfault can read"):
        open_model(tmp_path / "cut.pt")
    torch.save({"format": "deepfault-model/1", "arch": "mnist_1", "arch_kwargs": {},
                "state_dict": build_model("mnist_2").state_dict()}, tmp_path / "other.pt")
    with pytest.raises(DeepFaultError, match="do not fit architecture 'mnist_1'"):
        open_model(tmp_path / "other.pt")


def test_onnx_round_trip(tmp_path):
    pytest.importorskip("onnx")
    for arch in ("mnist_1", "lenet5"):
        model = build_model(arch).eval()
        x = torch.rand(4, 1, 28, 28)
        path = tmp_path / f"{arch}.onnx"
        torch.onnx.export(model, x[:1], str(path), dynamo=False, input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": {0: "n"}, "y": {0: "n"}})
        try:
            mf = open_model(path)
        except ModuleNotFoundError as err:
            pytest.skip(str(err))
        assert (mf.model(x) - model(x)).abs().max() < 1e-5
        assert mf.meta["input_shape"] == [1, 28, 28]
        assert mf.output_kind == "logits"
    assert "torchvision" not in sys.modules or hasattr(sys.modules["torchvision"], "__file__")


def test_onnx_errors(tmp_path, monkeypatch):
    (tmp_path / "bad.onnx").write_bytes(b"\x00garbage")
    pytest.importorskip("onnx")
    try:
        import deepfault.models.onnx as onnx_mod

        onnx_mod._onnx2torch()
    except ModuleNotFoundError:
        pytest.skip("onnx2torch not installed")
    with pytest.raises(DeepFaultError, match="is not a valid ONNX model"):
        open_model(tmp_path / "bad.onnx")
    monkeypatch.setitem(sys.modules, "onnx2torch", None)
    if importlib.util.find_spec("onnxruntime") is not None:  # --runtime auto falls back to ONNX Runtime
        with pytest.raises(DeepFaultError, match="ONNX Runtime cannot open"):
            open_model(tmp_path / "bad.onnx")
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install -e '\.\[onnx\]'"):
        open_model(tmp_path / "bad.onnx")


def _data(shape):
    x = np.arange(2 * int(np.prod(shape)), dtype=np.float32).reshape(2, *shape)
    return Dataset("t", x, np.zeros(2, int), x, np.zeros(2, int), (0.0, 1e9), ("a",))


def test_data_layout_follows_the_model():
    d = _data((2, 3, 4))
    assert d.for_input_shape((2, 3, 4)) is d
    nhwc = d.for_input_shape((3, 4, 2))
    np.testing.assert_array_equal(nhwc.x_test, d.x_test.transpose(0, 2, 3, 1))
    flat = d.for_input_shape((24,))
    np.testing.assert_array_equal(flat.x_test, d.x_test.reshape(2, 24))
    assert d.for_input_shape((None, 4, 2)).x_test.shape == (2, 3, 4, 2)
    one = _data((1, 3, 4))
    assert one.for_input_shape((3, 4)).x_test.shape == (2, 3, 4)
    with pytest.raises(DeepFaultError, match=r"has inputs of shape \(2, 3, 4\) but the model takes \(5,\)"):
        d.for_input_shape((5,))


def test_load_cached_takes_a_fitting_file_and_warns_of_an_unreadable_one(tmp_path, caplog):
    import logging

    from deepfault.models.io import load_cached

    log = logging.getLogger("deepfault.test_cache")
    path = tmp_path / "m.pt"
    fits = lambda mf: mf.meta.get("recipe") == 2  # noqa: E731
    assert load_cached(path, fits, log, "cached %s unreadable (%s)", path) is None  # missing
    save_model(path, ModelFile(build_model("mnist_1"), "mnist_1", meta={"recipe": 1}))
    assert load_cached(path, fits, log, "cached %s unreadable (%s)", path) is None  # another recipe
    save_model(path, ModelFile(build_model("mnist_1"), "mnist_1", meta={"recipe": 2}))
    assert load_cached(path, fits, log, "cached %s unreadable (%s)", path).meta["recipe"] == 2
    path.write_bytes(b"not a model")
    with caplog.at_level(logging.WARNING, logger="deepfault.test_cache"):
        assert load_cached(path, fits, log, "cached %s unreadable (%s)", path) is None
    assert f"cached {path} unreadable (" in caplog.text
