"""Black-box models (issue 29): ONNX Runtime and LiteRT files and plain callables, opened as
layerless modules; the deployment scenario's files; how ``deepfault inspect`` shows them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import deepfault
from deepfault.cli import main
from deepfault.data import Dataset
from deepfault.errors import DeepFaultError
from deepfault.models import open_model
from deepfault.models.blackbox import black_box, describe_black_box, is_black_box
from deepfault.models.fingerprint import fingerprint
from helpers.hardening import lenet
from helpers.tflite_files import write_dense_tflite

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    """LeNet-1 (M1) and its four deployment files, from the deployment scenario."""
    from deepfault.models.deploy import make_deployment

    d = tmp_path_factory.mktemp("deploy")
    m1 = lenet(0)
    g = torch.Generator().manual_seed(1)
    x = torch.rand(40, 1, 28, 28, generator=g).numpy()
    with torch.no_grad():
        y = m1(torch.as_tensor(x)).argmax(1).numpy()
    data = Dataset("tiny", x, y, x, y, (0.0, 1.0), tuple(str(i) for i in range(10)))
    result = make_deployment(m1, data, out_dir=d, calibration=16, name="lenet1")
    return m1, x, result


def test_the_deployment_scenario_writes_four_files_that_run_in_onnxruntime(deployed):
    m1, x, r = deployed
    assert set(r.files) == {"onnx", "onnx-int8", "onnx-int8-static", "onnx-fp16"}
    assert r.m1_path is None  # a caller's module has no zoo architecture to be saved under
    assert r.agreement["onnx"] == 1.0
    assert r.max_abs_diff["onnx"] < 1e-4
    # dynamic quantisation quantises LeNet-1's two convolutions and its linear layer
    assert r.details["onnx-int8"]["quantised_convs"] == 2
    assert r.details["onnx-int8"]["quantised_matmuls"] == 1
    assert "QuantizeLinear" in r.details["onnx-int8-static"]["ops"]
    for path in r.files.values():
        assert path.is_file()
    assert not list(r.files["onnx"].parent.glob("*.pre.onnx"))  # the pre-processed copies are removed
    assert (r.files["onnx"].parent / "deploy-lenet1.json").is_file()


def test_onnxruntime_float_matches_torch_and_says_how_it_reads_the_file(deployed):
    m1, x, r = deployed
    mf = open_model(r.files["onnx"], runtime="onnxruntime")
    assert is_black_box(mf)
    assert mf.arch == "onnxruntime"
    assert mf.output_kind == "logits"
    assert not list(mf.model.parameters())
    assert len(list(mf.model.modules())) == 1
    with torch.no_grad():
        ref = m1(torch.as_tensor(x)).numpy()
    np.testing.assert_allclose(mf.model(torch.as_tensor(x)).numpy(), ref, atol=1e-4)
    d = describe_black_box(mf.model)
    assert d["runtime"] == "onnxruntime"
    assert d["input"] == {"name": "input", "shape": ["N", 1, 28, 28], "dtype": "float32"}
    # the results store tells two files apart by their bytes
    other = open_model(r.files["onnx-int8"])
    assert fingerprint(other.model) != fingerprint(mf.model)
    assert fingerprint(open_model(r.files["onnx"], runtime="onnxruntime").model) == fingerprint(mf.model)


def test_auto_runs_what_onnx2torch_cannot_convert_in_onnxruntime(deployed, caplog):
    _, x, r = deployed
    for fmt in ("onnx-int8", "onnx-fp16"):
        mf = open_model(r.files[fmt])  # auto
        assert is_black_box(mf), fmt
        assert mf.meta["runtime_fallback"]
        assert mf.model(torch.as_tensor(x[:3])).dtype == torch.float32
    assert "ConvInteger" in open_model(r.files["onnx-int8"]).meta["graph_ops"]
    assert describe_black_box(open_model(r.files["onnx-fp16"]).model)["input"]["dtype"] == "float16"
    assert not is_black_box(open_model(r.files["onnx"]))  # a float graph still converts (white box)
    with pytest.raises(DeepFaultError, match="onnx2torch"):
        open_model(r.files["onnx-int8"], runtime="torch")
    with pytest.raises(DeepFaultError, match="unknown runtime"):
        open_model(r.files["onnx"], runtime="tensorrt")


def test_a_callable_is_a_black_box_that_batches_and_warns_about_probabilities():
    calls = []

    def predict(x):
        calls.append(len(x))
        return x.reshape(len(x), -1)[:, :3]

    mf = black_box(predict, input_shape=(1, 2, 2), max_batch=4)
    out = mf.model(torch.ones(10, 1, 2, 2))
    assert out.shape == (10, 3)
    assert calls == [4, 4, 2]
    probs = black_box(lambda x: np.full((len(x), 4), 0.25), name="uniform")
    with pytest.warns(UserWarning, match="sum to 1"):
        probs.model(torch.ones(2, 3))
    assert fingerprint(black_box(predict, key="v1").model) != fingerprint(black_box(predict, key="v2").model)
    with pytest.raises(DeepFaultError, match="output_kind"):
        black_box(predict, output_kind="scores")
    with pytest.raises(DeepFaultError, match="callable"):
        black_box(3)


def test_litert_float_int8_softmax_and_fixed_batch_files(tmp_path):
    pytest.importorskip("ai_edge_litert")
    rng = np.random.default_rng(0)
    w, b = rng.normal(size=(3, 16)).astype(np.float32), rng.normal(size=3).astype(np.float32)
    x = rng.random((7, 1, 4, 4)).astype(np.float32)
    ref = x.reshape(7, -1) @ w.T + b
    for kw in ({}, {"batch": 4}, {"int8": True}, {"softmax": True}):
        path = tmp_path / "m.tflite"
        scale = write_dense_tflite(path, w, b, input_shape=(1, 4, 4), **kw)
        mf = open_model(path)
        assert is_black_box(mf)
        assert describe_black_box(mf.model)["runtime"] == "litert"
        out = mf.model(torch.as_tensor(x)).numpy()
        if kw.get("softmax"):
            assert mf.output_kind == "probabilities"
            np.testing.assert_allclose(out, torch.softmax(torch.as_tensor(ref), 1).numpy(), atol=1e-5)
        elif kw.get("int8"):  # hybrid kernel: int8 weights, inputs quantised per batch
            assert 0 < np.abs(out - ref).max() < 40 * scale
        else:
            np.testing.assert_allclose(out, ref, atol=1e-5)
    (tmp_path / "bad.tflite").write_bytes(b"not a flatbuffer")
    with pytest.raises(DeepFaultError, match="LiteRT cannot open"):
        open_model(tmp_path / "bad.tflite")


def test_litert_delegate_notice_is_dropped_and_other_native_output_kept(capfd):
    """Issue 43: LiteRT's C++ logger printed "INFO: Created TensorFlow Lite XNNPACK delegate for
    CPU." before each one-line error; exactly that line is dropped from file descriptor 2."""
    from deepfault.models.blackbox import _litert_quietly

    with _litert_quietly():
        os.write(2, b"INFO: Created TensorFlow Lite XNNPACK delegate for CPU.\n")
        os.write(2, b"ERROR: something else\n")
    assert capfd.readouterr().err == "ERROR: something else\n"


def test_a_litert_refusal_is_one_line_in_a_fresh_process(tmp_path):
    """The notice prints once per process: a subprocess shows what a user sees."""
    pytest.importorskip("ai_edge_litert")
    rng = np.random.default_rng(0)
    write_dense_tflite(tmp_path / "m.tflite", rng.normal(size=(5, 64)).astype(np.float32),
                       np.zeros(5, np.float32), input_shape=(1, 8, 8))
    argv = ["regress", "--m1", "m.tflite", "--m2", "m.tflite", "--dataset", "digits", "--budget", "5it",
            "--fidelity", "none", "--no-progress"]
    run = subprocess.run([sys.executable, "-m", "deepfault", *argv],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(Path(deepfault.__file__).parents[1])})
    assert run.returncode == 2, run.stderr
    assert run.stderr.count("\n") == 1, run.stderr
    assert "5 outputs per input" in run.stderr


def test_inspect_shows_the_runtime_tensors_and_dtypes(deployed, capsys):
    _, _, r = deployed
    assert main(["inspect", str(r.files["onnx-fp16"])]) == 0
    out = capsys.readouterr().out
    assert "onnxruntime as a black box" in out
    assert "1x28x28 float16" in out
    assert main(["inspect", str(r.files["onnx"]), "--runtime", "onnxruntime"]) == 0
    assert "Nx1x28x28 float32" in capsys.readouterr().out


def test_import_deepfault_imports_no_runtime():
    code = ("import sys, deepfault, deepfault.fuzz.regress, deepfault.models.blackbox; "
            "sys.exit(any(m.split('.')[0] in ('onnxruntime', 'ai_edge_litert') for m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_a_black_box_is_not_a_torch_layer_model():
    assert not is_black_box(nn.Linear(2, 2))
