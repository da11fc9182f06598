"""A model from the user's own code (issue 26): --arch file.py:Class and module:factory with
--arch-args, torchvision:/timm: names, .safetensors, scripted and traced TorchScript, pickled
modules whose class lies beside the file, and model files the tool writes read back without
--trust-pickle.
"""

import importlib
import json
import sys
import textwrap

import pytest
import torch

from deepfault import DeepFaultError
from deepfault.cli import main
from deepfault.models import ModelFile, build_model, load_model, open_model, save_model

NET = textwrap.dedent('''
    import torch
    from torch import nn

    from helper import WIDTH  # a sibling module: the file's folder is importable


    class Net(nn.Module):
        """A small ResNet-like block: compiled forward code when scripted or traced."""

        def __init__(self, num_classes=3, width=WIDTH):
            super().__init__()
            self.conv = nn.Conv2d(1, width, 3, padding=1)
            self.bn = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, padding=1)
            self.fc = nn.Linear(width, num_classes)

        def forward(self, x):
            h = torch.relu(self.bn(self.conv(x)))
            h = h + torch.relu(self.conv2(h))  # a residual connection
            return self.fc(h.mean(dim=(2, 3)))


    def make(num_classes=3):
        return Net(num_classes=num_classes)


    NOT_A_MODEL = 3
''')


@pytest.fixture
def code(tmp_path):
    """A folder with the user's class (mynet.py) and the sibling module it imports."""
    folder = tmp_path / "code"
    folder.mkdir()
    (folder / "mynet.py").write_text(NET)
    (folder / "helper.py").write_text("WIDTH = 4\n")
    yield folder
    sys.modules.pop("helper", None)


def _net(code, num_classes=10):
    torch.manual_seed(0)
    return build_model(f"{code / 'mynet.py'}:Net", num_classes=num_classes).eval()


X = torch.rand(5, 1, 8, 8, generator=torch.Generator().manual_seed(1))


# --------------------------------------------------------------------------- --arch forms


def test_file_class_and_state_dict(code, tmp_path):
    net = _net(code)
    torch.save(net.state_dict(), tmp_path / "sd.pt")
    mf = open_model(tmp_path / "sd.pt", arch=f"{code}/mynet.py:Net", arch_kwargs={"num_classes": 10})
    torch.testing.assert_close(mf.model(X), net(X))
    assert mf.arch == f"{code.resolve()}/mynet.py:Net"  # recorded with its absolute path
    assert mf.arch_kwargs == {"num_classes": 10}
    assert mf.read["format"] == "torch"


def test_relative_file_path_and_factory(code, tmp_path, monkeypatch):
    net = _net(code, num_classes=3)
    torch.save(net.state_dict(), tmp_path / "sd.pt")
    monkeypatch.chdir(code.parent)
    mf = open_model(tmp_path / "sd.pt", arch="code/mynet.py:make")
    torch.testing.assert_close(mf.model(X), net(X))
    assert mf.arch == f"{code.resolve()}/mynet.py:make"


def test_package_module_factory(code, tmp_path, monkeypatch):
    net = _net(code, num_classes=3)
    torch.save(net.state_dict(), tmp_path / "sd.pt")
    monkeypatch.chdir(code)  # the current directory is importable, as with python -m
    try:
        mf = open_model(tmp_path / "sd.pt", arch="mynet:make")
        torch.testing.assert_close(mf.model(X), net(X))
        assert mf.arch == "mynet:make"
    finally:
        sys.modules.pop("mynet", None)


@pytest.mark.parametrize(("arch", "kwargs", "match"), [
    ("nothere.py:Net", {}, "file 'nothere.py' does not exist"),
    ("{code}/mynet.py:Nett", {}, "has no 'Nett'; its nn.Module classes: Net"),
    ("{code}/mynet.py:NOT_A_MODEL", {}, "not a class or function"),
    ("{code}/mynet.py:Net", {"classes": 10}, "cannot be built with --arch-args.*classes"),
    ("{code}/mynet.py:", {}, "must name a class or function"),
    ("no_such_module_xyz:Net", {}, "no module named 'no_such_module_xyz'"),
    ("lenet99", {}, "unknown architecture 'lenet99'; known: .*lenet1.*file.py:ClassName"),
])
def test_arch_errors_are_one_line(code, tmp_path, arch, kwargs, match):
    torch.save(_net(code).state_dict(), tmp_path / "sd.pt")
    with pytest.raises(DeepFaultError, match=match) as err:
        open_model(tmp_path / "sd.pt", arch=arch.format(code=code), arch_kwargs=kwargs)
    assert "\n" not in str(err.value)


def test_a_file_that_fails_to_run_is_one_line(tmp_path):
    (tmp_path / "bad.py").write_text("import torch\nraise ValueError('boom')\n")
    with pytest.raises(DeepFaultError, match=r"running .*bad.py' failed: ValueError: boom"):
        build_model(f"{tmp_path}/bad.py:Net")
    (tmp_path / "other.py").write_text("def f():\n    return 3\n")
    with pytest.raises(DeepFaultError, match="returned a int, not a torch.nn.Module"):
        build_model(f"{tmp_path}/other.py:f")


def test_state_dict_without_arch_names_every_form(tmp_path):
    torch.save(build_model("lenet1").state_dict(), tmp_path / "sd.pt")
    with pytest.raises(DeepFaultError, match=r"--arch path/to/file.py:ClassName.*--arch-args.*lenet1"):
        open_model(tmp_path / "sd.pt")


# --------------------------------------------------------------------------- written files record the arch


def test_model_file_of_user_code_needs_the_code_named_again(code, tmp_path):
    net = _net(code)
    save_model(tmp_path / "m.pt", ModelFile(net, f"{code}/mynet.py:Net", {"num_classes": 10}, dataset="digits"))
    # a model file alone never makes deepfault run code it names
    with pytest.raises(DeepFaultError, match=r"built from your code .*mynet.py:Net.*confirm with --arch"):
        open_model(tmp_path / "m.pt")
    mf = open_model(tmp_path / "m.pt", arch=f"{code}/mynet.py:Net")
    torch.testing.assert_close(mf.model(X), net(X))
    assert mf.arch_kwargs == {"num_classes": 10} and mf.dataset == "digits"
    # the code moved: the same file and class name, another folder
    moved = tmp_path / "moved"
    code.rename(moved)
    mf = open_model(tmp_path / "m.pt", arch=f"{moved}/mynet.py:Net")
    torch.testing.assert_close(mf.model(X), net(X))
    with pytest.raises(DeepFaultError, match="names other code"):
        open_model(tmp_path / "m.pt", arch=f"{moved}/mynet.py:make")
    with pytest.raises(DeepFaultError, match="names other code"):
        open_model(tmp_path / "m.pt", arch="lenet1")
    with pytest.raises(DeepFaultError, match="contradicts them"):
        open_model(tmp_path / "m.pt", arch=f"{moved}/mynet.py:Net", arch_kwargs={"num_classes": 3})
    with pytest.raises(DeepFaultError, match="contradicts it"):  # a zoo file still refuses another --arch
        save_model(tmp_path / "z.pt", ModelFile(build_model("lenet1"), "lenet1"))
        open_model(tmp_path / "z.pt", arch="lenet4")


def test_a_tampered_model_file_cannot_call_any_function(tmp_path):
    """An arch naming a module's function (os:system) is code: never built without --arch."""
    payload = {"format": "deepfault-model/1", "arch": "os:system", "arch_kwargs": {"command": "true"},
               "state_dict": {"w": torch.zeros(1)}, "meta": {}}
    torch.save(payload, tmp_path / "evil.pt")
    with pytest.raises(DeepFaultError, match="reading it runs that code; confirm with --arch"):
        open_model(tmp_path / "evil.pt")


def test_save_model_refuses_what_it_cannot_build_again(tmp_path):
    with pytest.raises(DeepFaultError, match="cannot write a deepfault model file for architecture 'torchscript'"):
        save_model(tmp_path / "m.pt", ModelFile(build_model("lenet1"), "torchscript"))


# --------------------------------------------------------------------------- safetensors


def test_safetensors_state_dict(code, tmp_path):
    st = pytest.importorskip("safetensors.torch")
    net = _net(code)
    st.save_file(net.state_dict(), str(tmp_path / "w.safetensors"))
    with pytest.raises(DeepFaultError, match=r"\.safetensors state_dict.*--arch"):
        open_model(tmp_path / "w.safetensors")
    mf = open_model(tmp_path / "w.safetensors", arch=f"{code}/mynet.py:Net", arch_kwargs={"num_classes": 10})
    torch.testing.assert_close(mf.model(X), net(X))
    assert mf.read["format"] == "safetensors"
    (tmp_path / "bad.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{junk}")
    with pytest.raises(DeepFaultError, match="not a readable .safetensors file"):
        open_model(tmp_path / "bad.safetensors", arch="lenet1")


def test_safetensors_missing_names_the_extra(tmp_path, monkeypatch):
    (tmp_path / "w.safetensors").write_bytes(b"x")
    monkeypatch.setitem(sys.modules, "safetensors", None)
    with pytest.raises(DeepFaultError, match=r"needs the safetensors package; pip install 'deepfault\[models\]'"):
        open_model(tmp_path / "w.safetensors", arch="lenet1")


# --------------------------------------------------------------------------- torchvision / timm


def _importable(name):
    try:
        importlib.import_module(name)
    except Exception:  # noqa: BLE001 - torchvision built for another torch raises RuntimeError
        return False
    return True


@pytest.mark.skipif(not _importable("torchvision"), reason="torchvision does not import here")
def test_torchvision_arch_without_weights(tmp_path):
    torch.manual_seed(0)
    net = build_model("torchvision:resnet18", num_classes=10).eval()
    torch.save(net.state_dict(), tmp_path / "r18.pt")
    mf = open_model(tmp_path / "r18.pt", arch="torchvision:resnet18", arch_kwargs={"num_classes": 10})
    x = torch.rand(1, 3, 32, 32)
    torch.testing.assert_close(mf.model(x), net(x))


@pytest.mark.skipif(not _importable("timm"), reason="timm does not import here")
def test_timm_arch_without_weights():
    net = build_model("timm:vit_tiny_patch16_224", num_classes=10, img_size=32, patch_size=8)
    assert net(torch.rand(1, 3, 32, 32)).shape == (1, 10)


class _FakeModels:
    @staticmethod
    def list_models():
        return ["tiny"]

    @staticmethod
    def get_model(name, *, weights, num_classes=2):
        assert weights is None  # never downloads
        return torch.nn.Linear(3, num_classes)


def test_library_forms_dispatch_and_explain(monkeypatch):
    fake = type(sys)("torchvision")
    fake.models = _FakeModels
    monkeypatch.setitem(sys.modules, "torchvision", fake)
    assert build_model("torchvision:tiny", num_classes=4).out_features == 4
    with pytest.raises(DeepFaultError, match="torchvision has no model 'huge'; known: tiny"):
        build_model("torchvision:huge")
    with pytest.raises(DeepFaultError, match="cannot be built with --arch-args"):
        build_model("torchvision:tiny", depth=3)
    monkeypatch.setitem(sys.modules, "timm", None)
    with pytest.raises(DeepFaultError, match=r"needs timm, and it is not installed; pip install 'deepfault\[vision\]'"):
        build_model("timm:vit_tiny_patch16_224")


def test_a_torchvision_that_does_not_import_is_one_line(monkeypatch):
    import builtins

    real = builtins.__import__

    def broken(name, *args, **kwargs):
        if name == "torchvision":
            raise RuntimeError("operator torchvision::nms does not exist")
        return real(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "torchvision", raising=False)
    monkeypatch.setattr(builtins, "__import__", broken)
    monkeypatch.setattr(importlib, "import_module", lambda name: broken(name))
    with pytest.raises(DeepFaultError, match=r"does not import beside torch here \(RuntimeError: operator "
                       r"torchvision::nms does not exist; .*deepfault\[vision\]") as err:
        build_model("torchvision:resnet18")
    assert "\n" not in str(err.value)


# --------------------------------------------------------------------------- TorchScript


@pytest.mark.parametrize("how", ["script", "trace"])
def test_compiled_torchscript_runs_for_outputs_and_gradients(code, tmp_path, how):
    net = _net(code)
    compiled = torch.jit.script(net) if how == "script" else torch.jit.trace(net, X[:1])
    compiled.save(str(tmp_path / "m.ts"))
    mf = open_model(tmp_path / "m.ts")
    assert mf.arch == "torchscript" and "run compiled" in mf.read["loader"]
    torch.testing.assert_close(mf.model(X), net(X))
    x = X.clone().requires_grad_(True)  # gradients flow to inputs and parameters
    mf.model(x).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    assert all(p.grad is not None for p in mf.model.parameters())


def test_compiled_torchscript_neuron_methods_list_the_routes(code, tmp_path):
    from deepfault import activations

    torch.jit.script(_net(code)).save(str(tmp_path / "m.ts"))
    mf = open_model(tmp_path / "m.ts")
    with pytest.raises(DeepFaultError, match=r"compiled code.*--arch path/to/file.py:ClassName.*ONNX.*regress") as err:
        activations(mf.model, X)
    assert "\n" not in str(err.value)


def test_traced_sequential_runs_compiled(tmp_path):
    """A traced module keeps weights, not its layers' constructor arguments: it runs compiled."""
    model = build_model("lenet1").eval()
    torch.jit.trace(model, torch.rand(1, 1, 28, 28)).save(str(tmp_path / "t.ts"))
    mf = open_model(tmp_path / "t.ts")
    assert "keeps no constructor arguments (a traced module)" in mf.read["loader"]
    x = torch.rand(2, 1, 28, 28)
    torch.testing.assert_close(mf.model(x), model(x))


# --------------------------------------------------------------------------- pickled modules


def test_pickled_module_imports_its_class_from_the_files_folder(code, tmp_path):
    sys.path.insert(0, str(code))
    try:
        mynet = importlib.import_module("mynet")
        torch.manual_seed(0)
        net = mynet.Net(num_classes=10).eval()
        torch.save(net, code / "whole.pt")
        expected = net(X)
    finally:
        sys.path.remove(str(code))
        sys.modules.pop("mynet", None)
        sys.modules.pop("helper", None)
    path_before = list(sys.path)
    mf = open_model(code / "whole.pt", trust_pickle=True)
    torch.testing.assert_close(mf.model(X), expected)
    assert sys.path == path_before  # the folder was importable only while unpickling
    assert "unpickled" in mf.read["loader"]
    sys.modules.pop("mynet", None)


def test_pickled_module_whose_code_is_missing_says_which_module(code, tmp_path):
    sys.path.insert(0, str(code))
    try:
        torch.save(importlib.import_module("mynet").Net(), tmp_path / "whole.pt")  # saved apart from its code
    finally:
        sys.path.remove(str(code))
        sys.modules.pop("mynet", None)
        sys.modules.pop("helper", None)
    with pytest.raises(DeepFaultError, match=r"needs module 'mynet'.*put mynet there or on PYTHONPATH.*--arch") as err:
        open_model(tmp_path / "whole.pt", trust_pickle=True)
    assert "\n" not in str(err.value)


# --------------------------------------------------------------------------- the CLI


def test_cli_arch_args_and_inspect(code, tmp_path, capsys):
    torch.save(_net(code).state_dict(), tmp_path / "sd.pt")
    argv = ["inspect", str(tmp_path / "sd.pt"), "--arch", f"{code}/mynet.py:Net", "--input-shape", "1,8,8"]
    assert main(argv + ["--arch-args", json.dumps({"num_classes": 10})]) == 0
    out = capsys.readouterr().out
    assert "mynet.py:Net {'num_classes': 10}" in out and "neuron hooks" in out and "yes" in out
    assert "conv2" in out
    assert main(argv + ["--arch-args", "{num_classes: 10}"]) == 2
    err = capsys.readouterr().err
    assert "--arch-args must be a JSON object" in err and err.count("\n") == 1
    assert main(argv + ["--arch-args", "[10]"]) == 2
    assert "got a list" in capsys.readouterr().err
    assert main(argv + ["--arch-args", '{"classes": 10}']) == 2
    assert "cannot be built with --arch-args" in capsys.readouterr().err


def test_cli_inspect_compiled(code, tmp_path, capsys):
    torch.jit.trace(_net(code), X[:1]).save(str(tmp_path / "m.ts"))
    assert main(["inspect", str(tmp_path / "m.ts"), "--input-shape", "1,8,8"]) == 0
    out = capsys.readouterr().out
    assert "no: compiled TorchScript" in out and "its forward is compiled" in out


def test_cli_run_on_a_users_class(code, tmp_path, capsys):
    net = _net(code)
    torch.save(net.state_dict(), tmp_path / "sd.pt")
    out = tmp_path / "r.json"
    code_ = main(["run", "--model", str(tmp_path / "sd.pt"), "--arch", f"{code}/mynet.py:Net",
                  "--arch-args", '{"num_classes": 10}', "--dataset", "digits", "--class", "0", "-k", "2",
                  "--measure", "ochiai", "--threads", "1", "--out", str(out), "--no-progress"])
    text, err = capsys.readouterr()
    assert code_ == 0, err
    assert "conv2" in text  # the user's layers are ranked
    assert json.loads(out.read_text())["classes"][0]["spectrum"]


# --------------------------------------------------------------------------- written files read back


def test_load_model_of_library_arch_needs_no_confirmation(tmp_path, monkeypatch):
    fake = type(sys)("torchvision")
    fake.models = _FakeModels
    monkeypatch.setitem(sys.modules, "torchvision", fake)
    save_model(tmp_path / "m.pt", ModelFile(build_model("torchvision:tiny", num_classes=2),
                                            "torchvision:tiny", {"num_classes": 2}))
    mf = load_model(tmp_path / "m.pt")
    assert mf.arch == "torchvision:tiny"
