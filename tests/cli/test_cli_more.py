"""The CLI with every model format, and the train, data and inspect commands."""

import json

import numpy as np
import pytest
import torch

from deepfault.cli import main
from deepfault.data import load_dataset
from deepfault.models import build_model

h5py = pytest.importorskip("h5py")
from helpers.keras_files import layer, sequential_config, write_full, write_pair  # noqa: E402


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def keras_digits_model(seed=0):
    """A channels_last Keras conv net for 8x8x1 digits ending in a softmax."""
    rng = np.random.default_rng(seed)
    layers = [
        layer("Conv2D", "conv2d_1", filters=4, kernel_size=[3, 3], strides=[1, 1], padding="same",
              dilation_rate=[1, 1], activation="relu", use_bias=True, data_format="channels_last"),
        layer("MaxPooling2D", "max_pooling2d_1", pool_size=[2, 2], strides=[2, 2], padding="valid",
              data_format="channels_last"),
        layer("Flatten", "flatten_1"),
        layer("Dense", "dense_1", units=12, activation="relu", use_bias=True),
        layer("Dense", "dense_2", units=10, activation="softmax", use_bias=True),
    ]
    weights = {
        "conv2d_1": [("kernel", rng.normal(size=(3, 3, 1, 4)).astype("f4")),
                     ("bias", np.zeros(4, "f4"))],
        "dense_1": [("kernel", rng.normal(size=(64, 12)).astype("f4") * 0.3),
                    ("bias", np.zeros(12, "f4"))],
        "dense_2": [("kernel", rng.normal(size=(12, 10)).astype("f4")),
                    ("bias", np.zeros(10, "f4"))],
    }
    return sequential_config(layers, (8, 8, 1), form="dict"), weights


def model_files(tmp_path):
    config, weights = keras_digits_model()
    full = write_full(tmp_path / "full.h5", config, weights)
    json_path, _ = write_pair(tmp_path / "pair", config, weights)
    torch.manual_seed(0)
    torch_model = build_model("digits_mlp").eval()
    ts = tmp_path / "m.ts"
    torch.jit.script(torch_model).save(str(ts))
    files = {"keras-h5": [full], "keras-json+weights": [json_path, "--weights", tmp_path / "pair.h5"],
             "keras-stem": [tmp_path / "pair"], "torchscript": [ts]}
    try:
        import onnx  # noqa: F401

        from deepfault.models.onnx import _onnx2torch

        _onnx2torch()
        onnx_path = tmp_path / "m.onnx"
        torch.onnx.export(torch_model, torch.zeros(1, 1, 8, 8), str(onnx_path), dynamo=False,
                          input_names=["x"], dynamic_axes={"x": {0: "n"}})
        files["onnx"] = [onnx_path]
    except ModuleNotFoundError:
        pass
    return files


def test_every_format_runs_through_deepfault_run(tmp_path, capsys):
    files = model_files(tmp_path)
    assert {"keras-h5", "keras-json+weights", "keras-stem", "torchscript"} <= set(files)
    for name, args in files.items():
        out = tmp_path / f"{name}.json"
        layers = ["--layers", "dense_1"] if name.startswith("keras") else []
        code, text, err = run_cli(capsys, "run", "--model", *args, "--dataset", "digits", "--class", "0",
                                  "-k", "3", *layers, "--out", out)
        assert code == 0, (name, err)
        result = json.loads(out.read_text())
        kind = "probabilities" if name.startswith("keras") else "logits"
        assert result["model"]["output_kind"] == kind, name
        summary = result["classes"][0]["repetitions"][0]["evaluation"]["summary"]
        assert summary["loss"] is None or summary["loss"] >= 0
    # the torch exports give the original's outputs
    from deepfault.models import open_model

    torch.manual_seed(0)
    original = build_model("digits_mlp").eval()
    x = torch.as_tensor(load_dataset("digits").x_test[:50])
    for name in ("torchscript", "onnx"):
        if name in files:
            loaded = open_model(files[name][0]).model
            assert (loaded(x) - original(x)).abs().max() < 1e-5, name
    # the imported Keras model sees the digits in its own (channels_last) layout
    assert json.loads((tmp_path / "keras-h5.json").read_text())["model"]["layout"] == [8, 8, 1]


def test_train_then_run_then_inspect(tmp_path, capsys):
    model_path = tmp_path / "d.pt"
    code, text, err = run_cli(capsys, "train", "--arch", "digits_mlp", "--dataset", "digits",
                              "--epochs", "2", "--no-progress", "--out", model_path)
    assert code == 0, err
    assert "test " in text
    assert model_path.exists()
    code, text, err = run_cli(capsys, "run", "--model", model_path, "--class", "1", "-k", "2",
                              "--out", "-")
    assert code == 0, err and "class 1" in text
    code, text, err = run_cli(capsys, "inspect", model_path)
    assert code == 0, err
    assert "fc4" in text
    assert "neurons: 96 in 4 layers (linear-conv: the default" in text
    assert "3,610 parameters" in text


def test_train_is_seeded(tmp_path, capsys):
    paths = [tmp_path / "a.pt", tmp_path / "b.pt"]
    for p in paths:
        assert run_cli(capsys, "train", "--arch", "digits_mlp", "--dataset", "digits", "--epochs",
                       "1", "--no-progress", "--out", p)[0] == 0
    a, b = (torch.load(p, weights_only=True)["state_dict"] for p in paths)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_train_interrupted_keeps_last_epoch(tmp_path, capsys, monkeypatch):
    import deepfault.models.train as train_mod

    calls = {"n": 0}
    real = train_mod.F.cross_entropy

    def interrupt_in_second_epoch(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 45:  # 40 batches per epoch on digits with batch 32 and val 1/6
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(train_mod.F, "cross_entropy", interrupt_in_second_epoch)
    path = tmp_path / "i.pt"
    code, text, _ = run_cli(capsys, "train", "--arch", "digits_mlp", "--dataset", "digits",
                            "--epochs", "3", "--no-progress", "--out", path)
    assert code == 130
    assert "kept the weights of epoch 1" in text
    assert torch.load(path, weights_only=True)["meta"]["training"]["epochs_completed"] == 1


def test_data_list_and_download(tmp_path, capsys, monkeypatch):
    code, text, _ = run_cli(capsys, "data", "list", "--data-dir", tmp_path)
    assert code == 0
    assert "digits" in text
    assert "bundled" in text
    assert "missing: deepfault data download mnist" in text
    import deepfault.data.download as dl

    def no_network(url, dest, progress=False):
        raise OSError("network unreachable")

    monkeypatch.setattr(dl, "_urllib_transport", no_network)
    code, _, err = run_cli(capsys, "data", "download", "mnist", "--data-dir", tmp_path)
    assert code == 2
    assert err.startswith("deepfault: error:")


def test_inspect_needs_a_shape_for_a_state_dict(tmp_path, capsys):
    torch.save(build_model("lenet1").state_dict(), tmp_path / "sd.pt")
    code, _, err = run_cli(capsys, "inspect", tmp_path / "sd.pt", "--arch", "lenet1")
    assert code == 2
    assert "--input-shape" in err
    code, text, err = run_cli(capsys, "inspect", tmp_path / "sd.pt", "--arch", "lenet1",
                              "--input-shape", "1,28,28")
    assert code == 0, err
    assert "block1_conv1" in text
    assert "4x28x28" in text


def test_run_on_mnist_shaped_npz(tmp_path, capsys):
    """A user data set as .npz, with a model trained on it."""
    digits = load_dataset("digits")
    npz = tmp_path / "mine.npz"
    np.savez(npz, x=digits.x_test, y=digits.y_test, x_train=digits.x_train, y_train=digits.y_train)
    model_path = tmp_path / "m.pt"
    assert run_cli(capsys, "train", "--arch", "digits_mlp", "--dataset", npz, "--epochs", "3",
                   "--no-progress", "--out", model_path)[0] == 0
    code, text, err = run_cli(capsys, "run", "--model", model_path, "--class", "2", "-k", "3",
                              "--out", "-")
    assert code == 0, err


def test_the_top_level_help_names_every_coverage_criterion():
    """The criteria come from the registry, so a new one (NAC was missing) is never left out."""
    from deepfault.cli import build_parser
    from deepfault.coverage import list_criteria

    text = " ".join(build_parser().format_help().split())
    assert all(name.upper() in text for name in list_criteria())
