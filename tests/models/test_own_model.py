"""A model from the user's own code (issue 26): --arch file.py:Class and module:factory with
--arch-args, torchvision:/timm: names, .safetensors, scripted and traced TorchScript, pickled
modules whose class lies beside the file, and model files the tool writes read back without
--trust-pickle.
"""

import importlib
import importlib.util
import json
import sys
import textwrap

import numpy as np
import pytest
import torch

from deepfault import DeepFaultError
from deepfault.cli import main
from deepfault.models import ModelFile, build_model, load_model, open_model, save_model
from deepfault.models._api import vision_install

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
    ("lenet99", {}, "unknown architecture 'lenet99'; did you mean 'lenet1'.*file.py:ClassName"),
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
    arch = f"{code}/mynet.py:Net"
    save_model(tmp_path / "m.pt", ModelFile(net, arch, {"num_classes": 10}, dataset="digits"))
    # a model file alone never makes deepfault run code it names
    with pytest.raises(DeepFaultError, match=r"built from your code .*mynet.py:Net.*confirm with --arch"):
        open_model(tmp_path / "m.pt")
    mf = open_model(tmp_path / "m.pt", arch=f"{code}/mynet.py:Net")
    torch.testing.assert_close(mf.model(X), net(X))
    assert mf.arch_kwargs == {"num_classes": 10}
    assert mf.dataset == "digits"
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
    save_model(tmp_path / "z.pt", ModelFile(build_model("lenet1"), "lenet1"))
    with pytest.raises(DeepFaultError, match="contradicts it"):  # a zoo file still refuses another --arch
        open_model(tmp_path / "z.pt", arch="lenet4")


def test_a_tampered_model_file_cannot_call_any_function(tmp_path):
    """An arch naming a module's function (os:system) is code: never built without --arch."""
    payload = {"format": "deepfault-model/1", "arch": "os:system", "arch_kwargs": {"command": "true"},
               "state_dict": {"w": torch.zeros(1)}, "meta": {}}
    torch.save(payload, tmp_path / "evil.pt")
    with pytest.raises(DeepFaultError, match="reading it runs that code; confirm with --arch"):
        open_model(tmp_path / "evil.pt")


def test_save_model_refuses_what_it_cannot_build_again(tmp_path):
    with pytest.raises(DeepFaultError, match="cannot write a deepfault model file for architecture 'tor"):
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
    with pytest.raises(DeepFaultError, match=r"needs the safetensors package; pip install -e '.\[models"):
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
    with pytest.raises(DeepFaultError, match=r"needs timm, and it is not installed; "
                                              r".*pip install -e '.\[vision"):
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
    with pytest.raises(DeepFaultError, match=r"does not import beside torch \S+ here \(RuntimeError: "
                       r"operator torchvision::nms does not exist; .*-e '\.\[vision\]'") as err:
        build_model("torchvision:resnet18")
    assert "\n" not in str(err.value)
    assert vision_install() in str(err.value)  # a command that works beside this torch


def test_the_vision_command_installs_the_torchvision_of_the_torch_there_is():
    """Beside a torch from PyTorch's index (``+cpu``) the extra alone gives PyPI's torchvision, which
    does not import: the command installs the same build's torchvision first, torch pinned."""
    assert vision_install("2.13.0+cpu") == (
        "pip install torchvision 'torch==2.13.0+cpu' --index-url https://download.pytorch.org/whl/cpu, "
        "then pip install -e '.[vision]'")
    assert "whl/cu121" in vision_install("2.3.1+cu121")
    assert vision_install("2.14.1") == "pip install -e '.[vision]'"  # PyPI's torch: PyPI's torchvision fits


# --------------------------------------------------------------------------- TorchScript


@pytest.mark.parametrize("how", ["script", "trace"])
def test_compiled_torchscript_runs_for_outputs_and_gradients(code, tmp_path, how):
    net = _net(code)
    compiled = torch.jit.script(net) if how == "script" else torch.jit.trace(net, X[:1])
    compiled.save(str(tmp_path / "m.ts"))
    mf = open_model(tmp_path / "m.ts")
    assert mf.arch == "torchscript"
    assert "run compiled" in mf.read["loader"]
    torch.testing.assert_close(mf.model(X), net(X))
    x = X.clone().requires_grad_(True)  # gradients flow to inputs and parameters
    mf.model(x).sum().backward()
    assert x.grad is not None
    assert x.grad.abs().sum() > 0
    assert all(p.grad is not None for p in mf.model.parameters())


def test_compiled_torchscript_neuron_methods_list_the_routes(code, tmp_path):
    from deepfault import activations

    torch.jit.script(_net(code)).save(str(tmp_path / "m.ts"))
    mf = open_model(tmp_path / "m.ts")
    routes = r"compiled code.*--arch path/to/file.py:ClassName.*ONNX.*regress"
    with pytest.raises(DeepFaultError, match=routes) as err:
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
    fix = r"needs module 'mynet'.*put mynet there or on PYTHONPATH.*--arch"
    with pytest.raises(DeepFaultError, match=fix) as err:
        open_model(tmp_path / "whole.pt", trust_pickle=True)
    assert "\n" not in str(err.value)


# --------------------------------------------------------------------------- the CLI


def test_cli_arch_args_and_inspect(code, tmp_path, capsys):
    torch.save(_net(code).state_dict(), tmp_path / "sd.pt")
    argv = ["inspect", str(tmp_path / "sd.pt"), "--arch", f"{code}/mynet.py:Net", "--input-shape", "1,8,8"]
    assert main(argv + ["--arch-args", json.dumps({"num_classes": 10})]) == 0
    out = capsys.readouterr().out
    assert "mynet.py:Net {'num_classes': 10}" in out
    assert "neuron hooks  yes" in out
    assert "conv2" in out
    assert main(argv + ["--arch-args", "{num_classes: 10}"]) == 2
    err = capsys.readouterr().err
    assert "--arch-args must be a JSON object" in err
    assert err.count("\n") == 1
    assert main(argv + ["--arch-args", "[10]"]) == 2
    assert "got a list" in capsys.readouterr().err
    assert main(argv + ["--arch-args", '{"classes": 10}']) == 2
    assert "cannot be built with --arch-args" in capsys.readouterr().err


def test_cli_inspect_compiled(code, tmp_path, capsys):
    torch.jit.trace(_net(code), X[:1]).save(str(tmp_path / "m.ts"))
    assert main(["inspect", str(tmp_path / "m.ts"), "--input-shape", "1,8,8"]) == 0
    out = capsys.readouterr().out
    assert "no: compiled TorchScript" in out
    assert "its forward is compiled" in out


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


# --------------------------------------------------------------------------- every writer, read back


MLP = textwrap.dedent('''
    import torch
    from torch import nn


    class Mlp(nn.Module):
        def __init__(self, hidden=8):
            super().__init__()
            self.fc1 = nn.Linear(2, hidden)
            self.fc2 = nn.Linear(hidden, 3)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))


    class Unscriptable(Mlp):
        def forward(self, x, *extra):  # *args: torch.jit.script refuses it, tracing does not
            return super().forward(x)
''')


@pytest.fixture
def plane(tmp_path):
    """A 2-feature, 3-class task, the user's MLP class and one found-inputs file."""
    from deepfault.data import Dataset

    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (300, 2)).astype(np.float32)
    y = np.where(x[:, 1] > 0.8, 2, (x[:, 0] > 0.5).astype(int))
    data = Dataset("plane", x[:200], y[:200], x[200:], y[200:], (0.0, 1.0), ("0", "1", "2"))
    (tmp_path / "mlp.py").write_text(MLP)
    seeds = np.arange(12)
    np.savez(tmp_path / "run.npz", synthesized=data.x_test[seeds], originals=data.x_test[seeds],
             labels=data.y_test[seeds], test_index=seeds, pred_original=np.zeros(12, int),
             pred_synthesized=np.zeros(12, int), target_class=data.y_test[seeds],
             repetition=np.zeros(12, int))
    return tmp_path, data


def _repair(model, d, data, out):
    from deepfault.repair import repair

    return repair(model, d / "run.npz", dataset=data, epochs=1, baselines=(), save_model=out)


@pytest.mark.usefixtures("one_torch_thread")
def test_repair_of_a_users_class_records_its_arch(plane):
    d, data = plane
    torch.manual_seed(0)
    torch.save(build_model(f"{d}/mlp.py:Mlp", hidden=8).state_dict(), d / "sd.pt")
    mf = open_model(d / "sd.pt", arch=f"{d}/mlp.py:Mlp", arch_kwargs={"hidden": 8})
    r = _repair(mf, d, data, d / "repaired.pt")
    back = open_model(d / "repaired.pt", arch=f"{d}/mlp.py:Mlp")  # no --trust-pickle
    assert back.arch == f"{d.resolve()}/mlp.py:Mlp"
    assert back.arch_kwargs == {"hidden": 8}
    x = torch.as_tensor(data.x_test[:20])
    with torch.no_grad():
        torch.testing.assert_close(back.model(x), r.model(x))


@pytest.mark.usefixtures("one_torch_thread")
def test_repair_of_a_pickled_unscriptable_module_writes_it_traced(plane):
    d, data = plane
    sys.path.insert(0, str(d))
    try:
        torch.manual_seed(0)
        torch.save(importlib.import_module("mlp").Unscriptable(), d / "whole.pt")
    finally:
        sys.path.remove(str(d))
        sys.modules.pop("mlp", None)
    mf = open_model(d / "whole.pt", trust_pickle=True)
    r = _repair(mf, d, data, d / "repaired.pt")
    back = open_model(d / "repaired.pt")  # TorchScript, never a pickle
    assert back.read["format"] == "torchscript"
    x = torch.as_tensor(data.x_test[:20])
    with torch.no_grad():
        torch.testing.assert_close(back.model(x), r.model(x))
    sys.modules.pop("mlp", None)


@pytest.mark.usefixtures("one_torch_thread")
def test_repair_of_compiled_torchscript_fine_tunes_it(plane):
    d, data = plane
    spec = importlib.util.spec_from_file_location("mlp_for_script", d / "mlp.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    torch.jit.script(mod.Mlp()).save(str(d / "m.ts"))
    r = _repair(open_model(d / "m.ts"), d, data, d / "repaired.ts")
    back = open_model(d / "repaired.ts")
    assert "run compiled" in back.read["loader"]
    x = torch.as_tensor(data.x_test[:20])
    with torch.no_grad():
        torch.testing.assert_close(back.model(x), r.model(x))
        assert not torch.equal(back.model(x), open_model(d / "m.ts").model(x))  # it was fine-tuned


def test_no_writer_pickles_a_model():
    """Every model file deepfault writes is read back without trust_pickle: models are written by
    save_model (tensors and plain values) or as TorchScript, never by torch.save of a module.
    """
    from pathlib import Path

    import deepfault

    root = Path(deepfault.__file__).parent
    texts = {f"{p.relative_to(root)}": p.read_text() for p in root.rglob("*.py")}
    assert sorted(f for f, t in texts.items() if "torch.save(" in t or "torch.save " in t) == ["_io.py"]
    pickled = sorted(f for f, t in texts.items() for line in t.splitlines()
                     if "write_torch(" in line and "def write_torch" not in line
                     and "torch.jit.save" not in line)
    # save_model's payload dict, and a spread pass's shard state (read back by torch's weights-only
    # reader, deepfault's classes and NumPy's arrays only); the rest write TorchScript
    assert pickled == ["core/shards.py", "models/io.py"]


@pytest.mark.usefixtures("one_torch_thread")
def test_regress_runs_a_compiled_m2_and_refuses_its_neurons(tmp_path):
    """DRFuzz needs M2's outputs only: a traced M2 equal to M1 finds what M1 against itself finds."""
    from deepfault.data import Dataset
    from deepfault.fuzz import regress

    torch.manual_seed(0)
    m1 = build_model("digits_mlp", hidden=(8, 8), num_classes=3).eval()
    x = torch.rand(30, 1, 8, 8, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        y = m1(x).argmax(1).numpy()
    data = Dataset("tiny", x.numpy(), y, x.numpy(), y, (0.0, 1.0), ("a", "b", "c"))
    torch.jit.trace(m1, x[:1]).save(str(tmp_path / "m2.ts"))
    settings = {"budget": "20it", "inputs_per_step": 4, "seed": 0, "fidelity": "linf:0.3", "dataset": data}
    same = regress(m1, m1, **settings)
    compiled = regress(m1, tmp_path / "m2.ts", **settings)
    assert compiled.result.iterations == same.result.iterations == 20
    assert compiled.result.metrics.rf == same.result.metrics.rf == 0
    with pytest.raises(DeepFaultError, match="M2 is a black box.*compiled TorchScript.*drfuzz"):
        regress(m1, tmp_path / "m2.ts", **{**settings, "strategy": "deephunter"})


@pytest.mark.usefixtures("one_torch_thread")
def test_cli_coverage_and_xplore_on_users_classes(code, tmp_path, capsys):
    paths = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        net = build_model(f"{code}/mynet.py:Net", num_classes=10)
        paths.append(tmp_path / f"n{seed}.pt")
        torch.save(net.state_dict(), paths[-1])
    own = ["--arch", f"{code}/mynet.py:Net", "--arch-args", '{"num_classes": 10}', "--dataset", "digits"]
    prof = tmp_path / "p.npz"
    assert main(["coverage", "profile", "--model", str(paths[0]), *own, "--out", str(prof)]) == 0, \
        capsys.readouterr().err
    out = tmp_path / "x.json"
    assert main(["xplore", "--no-progress", "--model", ",".join(map(str, paths)), *own, "--num-seeds", "10",
                 "--iterations", "2", "--threads", "1", "--out", str(out)]) == 0, capsys.readouterr().err
    assert json.loads(out.read_text())["seeds"] == 10


def test_pickled_module_from_a_package_beside_the_file(tmp_path):
    pkg = tmp_path / "proj" / "mypkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "nets.py").write_text(MLP)
    sys.path.insert(0, str(pkg.parent))
    try:
        torch.manual_seed(0)
        net = importlib.import_module("mypkg.nets").Mlp().eval()
        torch.save(net, pkg.parent / "whole.pt")
        x = torch.rand(4, 2)
        expected = net(x)
    finally:
        sys.path.remove(str(pkg.parent))
        for name in ("mypkg.nets", "mypkg"):
            sys.modules.pop(name, None)
    try:
        mf = open_model(pkg.parent / "whole.pt", trust_pickle=True)
        torch.testing.assert_close(mf.model(x), expected)
    finally:
        for name in ("mypkg.nets", "mypkg"):
            sys.modules.pop(name, None)
