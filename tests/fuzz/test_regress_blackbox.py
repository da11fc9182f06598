"""``regress`` with black-box models (issue 29): an ONNX Runtime M2 (float, and int8 from the
deployment scenario), M1 in ONNX Runtime too, a LiteRT M2, a callable M2 through the API, and the
one-line refusal of what needs a black box's insides."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from deepfault.cli import main
from deepfault.data import Dataset
from deepfault.errors import DeepFaultError
from deepfault.fuzz import regress
from deepfault.models import ModelFile, open_model, save_model
from deepfault.models.blackbox import black_box
from helpers.hardening import lenet
from helpers.tflite_files import write_dense_tflite

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

SETTINGS = {"budget": "40it", "inputs_per_step": 5, "seed": 0, "fidelity": "ssim:0.5"}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """LeNet-1 M1 (a .pt file), a 60-input data set it labels, and its deployment files."""
    from deepfault.models.deploy import make_deployment

    d = tmp_path_factory.mktemp("blackbox")
    m1 = lenet(0)
    x = torch.rand(60, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y = m1(x).argmax(1).numpy()
    np.savez(d / "data.npz", x=x.numpy(), y=y, class_names=np.array([str(i) for i in range(10)]))
    save_model(d / "m1.pt", ModelFile(m1, "lenet1", {"num_classes": 10}, None, (0.0, 1.0),
                                      meta={"input_shape": [1, 28, 28]}))
    r = make_deployment(d / "m1.pt", str(d / "data.npz"), out_dir=d, formats=["onnx", "onnx-int8"],
                        calibration=16)
    return d, r


def _faults(out):
    return out.result.fault_arrays()


def test_an_onnxruntime_m2_equal_to_m1_finds_no_regression(files):
    """The float export computes M1's function up to float rounding (about 1e-6 here); an argmax
    flips only on a near tie, so the same seed finds no regression fault, as M1 against itself does.

    The campaigns still differ: DRFuzz keeps a candidate that raises M2's tendency ``p2 - p1``,
    which is exactly 0 for M1 against itself (the queue never grows) and rounding noise for ONNX
    Runtime against torch (candidates join the queue on noise); so the faults that both models
    share (M1 wrong too, #GF) differ in number, with the same prediction from both.
    """
    d, r = files
    same = regress(d / "m1.pt", d / "m1.pt", dataset=str(d / "data.npz"), **SETTINGS)
    out = regress(d / "m1.pt", r.files["onnx"], dataset=str(d / "data.npz"), runtime="onnxruntime",
                  **SETTINGS)
    assert out.names == ("m1.pt", r.files["onnx"].name)
    assert out.result.iterations == same.result.iterations == 40
    assert out.result.metrics.rf == same.result.metrics.rf == 0
    assert out.result.metrics.urf == 0
    assert same.result.corpus == same.result.queued_seeds  # identical models: nothing raises the tendency
    faults = _faults(out)
    np.testing.assert_array_equal(faults["m1_pred"], faults["m2_pred"])  # both wrong, alike


def test_an_int8_m2_from_the_deployment_scenario_through_the_cli(files, capsys):
    d, r = files
    store = d / "int8.sqlite"
    args = ["regress", "--m1", str(d / "m1.pt"), "--m2", str(r.files["onnx-int8"]), "--dataset",
            str(d / "data.npz"), "--budget", "60it", "--inputs-per-step", "5", "--store", str(store),
            "--no-progress", "--fidelity", "none"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "M2: " in out
    assert "runs in onnxruntime as a black box" in out
    with np.load(d / "int8-drfuzz-seed0-faults.npz") as f:
        inputs, label, m2_pred = f["inputs"], f["label"], f["m2_pred"]
        assert (f["m1_pred"] == label).all()
    assert (m2_pred != label).all()
    assert len(inputs)
    # every fault is one: a fresh ONNX Runtime session, one input at a time as deployed, predicts the
    # recorded class (dynamic int8 scales activations over the whole batch: batched, it would not)
    import onnxruntime as ort

    sess = ort.InferenceSession(str(r.files["onnx-int8"]), providers=["CPUExecutionProvider"])
    again = [int(sess.run(None, {"input": x[None].astype(np.float32)})[0].argmax(1)[0]) for x in inputs]
    np.testing.assert_array_equal(again, m2_pred)


def test_m1_may_run_in_onnxruntime_too(files):
    d, r = files
    out = regress(r.files["onnx"], r.files["onnx-int8"], dataset=str(d / "data.npz"), runtime="onnxruntime",
                  **SETTINGS)
    assert out.result.iterations == 40
    faults = _faults(out)
    assert (faults["m1_pred"] == faults["label"]).all()
    assert (faults["m2_pred"] != faults["label"]).all()


def test_a_callable_m2_finds_what_the_same_torch_m2_finds():
    """A callable running M2's weights in NumPy, against M2 itself: same seeds, same faults."""
    torch.manual_seed(0)
    m1 = nn.Sequential(nn.Flatten(), nn.Linear(64, 8), nn.ReLU(), nn.Linear(8, 3)).eval()
    m2 = nn.Sequential(nn.Flatten(), nn.Linear(64, 8), nn.ReLU(), nn.Linear(8, 3)).eval()
    m2.load_state_dict(m1.state_dict())
    with torch.no_grad():
        m2[3].weight.add_(0.3 * torch.randn_like(m2[3].weight))
    x = torch.rand(40, 1, 8, 8, generator=torch.Generator().manual_seed(2)).numpy()
    with torch.no_grad():
        y = m1(torch.as_tensor(x)).argmax(1).numpy()
    data = Dataset("tiny", x, y, x, y, (0.0, 1.0), ("a", "b", "c"))
    w1, b1, w2, b2 = (t.detach().numpy() for t in (m2[1].weight, m2[1].bias, m2[3].weight, m2[3].bias))

    def predict(batch):  # M2 in NumPy: agrees with torch up to rounding
        hidden = np.maximum(batch.reshape(len(batch), -1) @ w1.T + b1, 0)
        return hidden @ w2.T + b2

    settings = {**SETTINGS, "budget": "30it", "fidelity": "ssim:0.3"}
    white = regress(m1, m2, dataset=data, **settings)
    black = regress(m1, predict, dataset=data, **settings)
    assert black.names[1] == "test_a_callable_m2_finds_what_the_same_torch_m2_finds.<locals>.predict"
    assert white.result.metrics.rf > 0
    timed = {"seconds_to_first_rf", "urf_per_minute"}  # wall time differs; the rest may not
    def counts(out):
        return {k: v for k, v in out.result.metrics.to_dict().items() if k not in timed}

    assert counts(black) == counts(white)
    np.testing.assert_array_equal(_faults(black)["inputs"], _faults(white)["inputs"])
    wrapped = regress(m1, black_box(predict, name="m2-numpy"), dataset=data, **settings)
    assert wrapped.names[1] == "m2-numpy"
    assert wrapped.result.metrics.rf == white.result.metrics.rf


def test_a_litert_m2(tmp_path):
    pytest.importorskip("ai_edge_litert")
    torch.manual_seed(0)
    m1 = nn.Sequential(nn.Flatten(), nn.Linear(64, 3)).eval()
    w, b = m1[1].weight.detach().numpy(), m1[1].bias.detach().numpy()
    write_dense_tflite(tmp_path / "m2.tflite", w, b, int8=True, input_shape=(1, 8, 8))
    x = torch.rand(40, 1, 8, 8, generator=torch.Generator().manual_seed(3)).numpy()
    with torch.no_grad():
        y = m1(torch.as_tensor(x)).argmax(1).numpy()
    data = Dataset("tiny", x, y, x, y, (0.0, 1.0), ("a", "b", "c"))
    out = regress(m1, tmp_path / "m2.tflite", dataset=data, **{**SETTINGS, "fidelity": "none"})
    assert out.result.iterations == 40
    faults = _faults(out)
    generated = out.result.faults.kind == 0
    if generated.any():  # the recorded M2 prediction is LiteRT's
        again = open_model(tmp_path / "m2.tflite").model(torch.as_tensor(faults["inputs"][generated]))
        np.testing.assert_array_equal(again.argmax(1).numpy(), faults["m2_pred"][generated])


def test_what_needs_a_black_boxs_insides_is_refused_first(files, capsys):
    d, r = files
    with pytest.raises(DeepFaultError, match="M2 is a black box.*deephunter needs M2's neurons.*drfuzz"):
        regress(d / "m1.pt", r.files["onnx-int8"], dataset=str(d / "data.npz"),
                **{**SETTINGS, "strategy": "deephunter"})
    with pytest.raises(DeepFaultError, match="M1 is a black box.*no activations.*'mdsa'"):
        regress(r.files["onnx-int8"], d / "m1.pt", dataset=str(d / "data.npz"),
                **{**SETTINGS, "fidelity": "mdsa"})
    store = d / "refused.sqlite"
    args = ["regress", "--m1", str(d / "m1.pt"), "--m2", str(r.files["onnx"]), "--runtime", "onnxruntime",
            "--dataset", str(d / "data.npz"), "--budget", "10it", "--store", str(store), "--no-progress",
            "--strategy", "both"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "--strategy drfuzz" in err[0]
    assert not store.exists()  # nothing was written


def test_scenario_deploy_through_the_cli(files, capsys, tmp_path):
    d, _ = files
    base = ["scenario", "deploy", "--model", str(d / "m1.pt"), "--dataset", str(d / "data.npz")]
    assert main([*base, "--formats", "onnx-fp16", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "onnx-fp16" in out
    assert "regressions" in out
    assert (tmp_path / "out" / "deploy-m1-fp16.onnx").is_file()
    assert (tmp_path / "out" / "deploy-m1-m1.pt").is_file()
    assert main([*base, "--formats", "onnx,tensorrt", "--out", str(tmp_path / "bad")]) == 2
    assert "unknown deployment format(s) tensorrt" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
