import json
import subprocess
import sys

import pytest
import torch

from deepfault.cli import main
from deepfault.models import ModelFile, build_model, save_model


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_default_run_all_classes_writes_json(tmp_path, capsys):
    out = tmp_path / "r.json"
    code, text, err = run_cli(capsys, "run", "--class", "all", "--measure", "ochiai", "-k", "5",
                              "--out", str(out))
    assert code == 0, err
    assert "rank  layer  unit  score" in text
    assert "evaluation of synthesized inputs" in text
    data = json.loads(out.read_text())
    assert data["config"]["approach"] == "ochiai"
    assert data["config"]["k"] == 5
    assert {"deepfault", "torch", "python", "device"} <= set(data["provenance"])
    assert [c["class"] for c in data["classes"]] == list(range(10))
    for c in data["classes"]:
        rep = c["repetitions"][0]
        assert len(rep["selection"]["neurons"]) == 5
        summary = rep["evaluation"]["summary"]
        assert summary["inputs"] == c["num_correct"]
        assert summary["linf"] <= 0.1 + 1e-6
    # the default model makes mistakes, so DeepFault has something to localise
    assert sum(c["spectrum"]["num_failed"] for c in data["classes"]) > 0
    assert 0.9 < data["test_accuracy"] < 1.0


def _without_times(obj):
    if isinstance(obj, dict):
        return {k: _without_times(v) for k, v in obj.items() if "seconds" not in k}
    if isinstance(obj, list):
        return [_without_times(v) for v in obj]
    return obj


def test_same_seed_same_result(tmp_path, capsys):
    paths = []
    for name in ("a.json", "b.json"):
        paths.append(tmp_path / name)
        code, _, _ = run_cli(capsys, "run", "--class", "3", "--measure", "random", "-k", "4",
                             "--repeat", "2", "--inputs", "5", "--seed", "7", "--threads", "1",
                             "--out", str(paths[-1]))  # --threads auto follows the load: floats may differ
        assert code == 0
    a, b = (_without_times(json.loads(p.read_text())["classes"]) for p in paths)
    assert a == b
    r0, r1 = a[0]["repetitions"]
    assert r0["selection"]["neurons"] != r1["selection"]["neurons"]
    assert len(r0["input_indices"]) == 5


def test_class_without_failures_is_reported_not_an_error(tmp_path, capsys):
    model = build_model("digits_mlp")
    with torch.no_grad():  # a model that always says 0: class 0 never fails
        for p in model.parameters():
            p.zero_()
        model.logits.bias[0] = 1.0
    path = tmp_path / "zero.pt"
    save_model(path, ModelFile(model, "digits_mlp", dataset="digits"))
    code, text, err = run_cli(capsys, "run", "--model", str(path), "--class", "0,1", "-k", "2",
                              "--out", str(tmp_path / "r.json"))
    assert code == 0, err
    assert "classes with no failing test input: 0" in text
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["classes"][0]["no_failures"]
    assert not data["classes"][1]["no_failures"]
    assert data["classes"][1]["num_correct"] == 0


def test_measures_lists_every_measure_with_formula(capsys):
    from deepfault import list_measures

    code, text, _ = run_cli(capsys, "measures")
    assert code == 0
    for name in list_measures() + ["random", "uniform"]:
        assert f"\n{name} " in text
    assert "af / sqrt((af+nf) * (af+as))" in text


def test_help_documents_every_option_with_default(capsys):
    code, text, _ = run_cli(capsys, "run", "--help")
    assert code == 0
    for option in ("--model", "--dataset", "--class", "--measure", "-k", "--threads", "--no-progress",
                   "--step-size", "--distance", "--seed", "--star", "--repeat", "--log", "--layers",
                   "--threshold", "--iterations", "--device", "--out"):
        assert option in text
    assert "(default: 0.1)" in text
    assert "(default: tarantula)" in text


def _model_file(tmp_path, name, **arch_kwargs):
    model = build_model("digits_mlp", **arch_kwargs)
    path = tmp_path / name
    save_model(path, ModelFile(model, "digits_mlp", arch_kwargs, dataset="digits"))
    return path, model


BAD = [
    (["--measure", "tarntula"],
     r"--measure must be one of ample, .*; got 'tarntula' \(did you mean 'tarantula'\?\)"),
    (["--layers", "fc9"], r"unknown layer name\(s\) 'fc9'"
                          r" \(did you mean [^;]*'fc1'[^;]*\?\); valid: flatten, fc1"),
    (["-k", "0"], r"-k must be an integer from 1 to 16,777,216; got 0"),
    (["-k", "97"], r"k=97 is larger than the 96 analysed neurons"),
    (["--class", "10"], r"class 10 is outside the 10 classes of 'digits' \(0..9\)"),
    (["--star", "0.5"], r"--star must be a number >= 1; got 0.5"),
    (["--step-size", "-1"], r"--step-size must be a number from 0 to 3.40282e\+38; got -1.0"),
    (["--distance", "-0.1"], r"--distance must be a number from 0 to 3.40282e\+38; got -0.1"),
    (["--dataset", "imagenet"], r"--dataset imagenet needs a model trained on it"),
    (["--model", "missing.pt"], r"model file 'missing.pt' does not exist"),
]


@pytest.mark.parametrize(("args", "message"), BAD)
def test_bad_input_exits_2_with_one_line_and_no_file(tmp_path, capsys, args, message):
    import re

    out = tmp_path / "r.json"
    code, text, err = run_cli(capsys, "run", *args, "--out", str(out))
    assert code == 2
    assert err.startswith("deepfault: error: "), err
    assert err.count("\n") == 1, err
    assert re.search(message, err), err
    assert not out.exists()


def test_model_that_does_not_fit_the_inputs(tmp_path, capsys):
    path, _ = _model_file(tmp_path, "wide.pt", in_features=30)
    code, _, err = run_cli(capsys, "run", "--model", str(path), "--out", str(tmp_path / "r.json"))
    assert code == 2
    assert "cannot take inputs of shape (1, 8, 8)" in err
    assert not (tmp_path / "r.json").exists()


def test_nan_activations(tmp_path, capsys):
    model = build_model("digits_mlp")
    with torch.no_grad():
        model.fc2.weight[3, 0] = float("nan")
    path = tmp_path / "nan.pt"
    save_model(path, ModelFile(model, "digits_mlp", dataset="digits"))
    code, _, err = run_cli(capsys, "run", "--model", str(path), "--out", str(tmp_path / "r.json"))
    assert code == 2
    assert "NaN or infinite" in err
    assert "fc2" in err
    assert not (tmp_path / "r.json").exists()


def test_corrupt_model_file(tmp_path, capsys):
    path = tmp_path / "junk.pt"
    path.write_bytes(b"not a model")
    code, _, err = run_cli(capsys, "run", "--model", str(path), "--out", "-")
    assert code == 2
    assert "is not a model file deepfault can read" in err


def test_unwritable_output_path(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, _, err = run_cli(capsys, "run", "--out", str(blocker / "r.json"))
    assert code == 2
    assert "cannot write output file" in err
    code, _, err = run_cli(capsys, "run", "--out", str(tmp_path))
    assert code == 2
    assert "is a directory" in err


def test_argparse_errors_exit_2(capsys):
    code, _, err = run_cli(capsys, "run", "-k", "three")
    assert code == 2
    assert "-k must be an integer from 1 to 16,777,216; got 'three'" in err
    code, _, _ = run_cli(capsys, "nonsense")
    assert code == 2


def test_log_file_appends_summary(tmp_path, capsys):
    log = tmp_path / "result.log"
    for _ in range(2):
        assert run_cli(capsys, "run", "--class", "1", "-k", "2", "--out", "-", "--log", str(log))[0] == 0
    assert log.read_text().count("evaluation of synthesized inputs") == 2


def test_python_dash_m_entry_point():
    proc = subprocess.run([sys.executable, "-m", "deepfault", "measures"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0
    assert "tarantula" in proc.stdout


def test_version_verbosity_and_completion(capsys):
    import logging

    import deepfault

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"deepfault {deepfault.__version__}"
    assert main(["--print-completion", "bash"]) == 0
    assert "complete" in capsys.readouterr().out
    assert main(["-qq", "measures"]) == 0
    assert logging.getLogger().level == logging.ERROR
    assert main(["-v", "measures"]) == 0
    assert logging.getLogger().level == logging.DEBUG
    assert main(["measures"]) == 0
    assert logging.getLogger().level == logging.INFO
    assert main(["-v", "-q", "measures"]) == 2  # one or the other
