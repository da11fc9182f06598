"""``deepfault coverage profile|measure|rank``: outputs, and bad input as one line, exit 2, no file.

``coverage surprise``, ``rank --by`` and the surprise coverages: tests/coverage/test_prioritise_cli.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from deepfault.cli import main
from deepfault.coverage import load_profile
from deepfault.models import ModelFile, build_model, save_model


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def digits_model(tmp_path):
    """A random digits MLP (the bundled 8x8 digits, no download)."""
    torch.manual_seed(0)
    path = tmp_path / "m.pt"
    save_model(path, ModelFile(build_model("digits_mlp", hidden=[12, 10]), "digits_mlp",
                               {"hidden": [12, 10]}, dataset="digits", bounds=(0.0, 1.0)))
    return path


def test_profile_measure_rank(tmp_path, capsys, digits_model):
    prof, out, rank, plots = (tmp_path / n for n in ("p.npz", "c.json", "r.json", "plots"))
    code, text, err = run_cli(capsys, "coverage", "profile", "--model", digits_model, "--out", prof)
    assert code == 0, err
    assert "digits train" in text
    assert "mean std" in text
    assert load_profile(prof).count > 1000

    code, text, err = run_cli(capsys, "coverage", "measure", "--model", digits_model, "--profile", prof,
                              "--criteria", "all", "--threshold", "0,0.5", "1", "--threshold", "0.5",
                              "--sections", "4", "--top-k", "2", "--scale", "0.5", "--out", out,
                              "--plot", plots)
    assert code == 0, err
    for head in ("nc (covered/items)", "kmnc (covered/items)", "tknp (distinct top-k sets",
                 "threshold=0.5", "sections=4"):
        assert head in text
    data = json.loads(out.read_text())
    assert data["tool"] == "deepfault coverage measure"
    assert "argv" in data["provenance"]
    labels = [r["label"] for r in data["results"]]
    assert labels[:3] == ["nc(threshold=0)", "nc(threshold=0.5)", "nc(threshold=1)"]
    assert "kmnc(sections=4)" in labels
    assert "tknp(top_k=2)" in labels
    assert data["num_inputs"] > 300
    assert data["dataset"]["split"] == "digits test"
    assert data["profile"]["model_sha256"] == data["model"]["weights_sha256"]
    assert sorted(p.name for p in plots.iterdir()) == ["coverage_growth.png", "coverage_layers.png",
                                                       "coverage_threshold.png", "report.html"]
    page = (plots / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 3
    assert "kmnc" in page
    assert "Provenance" in page

    code, text, err = run_cli(capsys, "coverage", "rank", "--model", digits_model, "--profile", prof,
                              "--criteria", "nc,kmnc", "--by", "cam", "--out", rank)
    assert code == 0, err
    assert "cam under kmnc(sections=10): the set covers" in text
    data = json.loads(rank.read_text())
    assert [r["criterion"] for r in data["rankings"]] == ["nc(threshold=0)", "kmnc(sections=10)"]
    assert [r["name"] for r in data["rankings"]] == ["cam:nc(threshold=0)", "cam:kmnc(sections=10)"]
    assert all(0 <= r["apfd"] <= 1 and 0 <= r["apfd_total"] <= 1 for r in data["rankings"])
    assert sorted(data["rankings"][0]["order"]) == list(range(data["num_inputs"]))


def test_deepxplore_layers_and_an_npz_split(tmp_path, capsys, digits_model):
    from deepfault.data import load_dataset

    digits = load_dataset("digits")
    split = tmp_path / "few.npz"
    np.savez(split, x=digits.x_test[:10], y=digits.y_test[:10], bounds=np.array(digits.bounds))
    out = tmp_path / "c.json"
    code, text, err = run_cli(capsys, "coverage", "measure", "--model", digits_model, "--split", split,
                              "--layers", "deepxplore", "--transform", "layer-minmax",
                              "--threshold", "0,0.25,0.5,0.75", "--out", out)
    assert code == 0, err
    data = json.loads(out.read_text())
    assert data["num_inputs"] == 10
    assert data["transform"] == "layer-minmax"
    assert data["layers"][-1]["name"] == "softmax(output)"


BAD = [
    (["--criteria", "nc,bogus"], "unknown coverage criterion 'bogus'; known: kmnc, nac, nbc"),
    (["--criteria", "tknc", "--top-k", "0"], "--top-k must be an integer from 1 to 16,777,216; got 0"),
    (["--criteria", "kmnc", "--sections", "0", "--profile", "PROFILE"],
     "--sections must be an integer from 1 to 100,000; got 0"),
    (["--threshold", "0,abc"],
     "argument --threshold: expected a finite number or comma-separated numbers such as 0,0.25,0.5; "
     "got '0,abc'"),
    (["--criteria", "kmnc"], "kmnc needs a profile"),
    (["--criteria", "kmnc", "--profile", "OTHER"], "the profile was computed for another model"),
    (["--criteria", "kmnc", "--profile", "PROFILE", "--layers", "fc1"], "computed for other layers"),
    (["--criteria", "kmnc", "--profile", "PROFILE", "--transform", "layer-minmax"],
     "computed on 'raw' values but coverage is measured on 'layer-minmax'"),
    (["--split", "BADSHAPE"], "cannot take inputs of shape (5,)"),
    (["--layers", "nosuch"], "unknown layer name(s) 'nosuch'"),
]


@pytest.mark.parametrize("command", ["measure", "rank"])
@pytest.mark.parametrize(("args", "message"), BAD, ids=[m[:30] for _, m in BAD])
def test_bad_input_is_one_line_exit_2_and_no_file(tmp_path, capsys, digits_model, command, args, message):
    prof, other = tmp_path / "p.npz", tmp_path / "o.npz"
    if "PROFILE" in args or "OTHER" in args:
        assert run_cli(capsys, "coverage", "profile", "--model", digits_model, "--out", prof)[0] == 0
        torch.manual_seed(1)
        model2 = tmp_path / "m2.pt"
        save_model(model2, ModelFile(build_model("digits_mlp", hidden=[12, 10]), "digits_mlp",
                                     {"hidden": [12, 10]}, dataset="digits", bounds=(0.0, 1.0)))
        assert run_cli(capsys, "coverage", "profile", "--model", model2, "--out", other)[0] == 0
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=np.zeros((4, 5), np.float32), y=np.zeros(4, int))
    table = {"PROFILE": prof, "OTHER": other, "BADSHAPE": bad}
    args = [table.get(a, a) for a in args]
    out = tmp_path / "out.json"
    code, text, err = run_cli(capsys, "coverage", command, "--model", digits_model, *args, "--out", out)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("deepfault: error: "), err
    assert message in lines[0], err
    assert not out.exists()
    assert not list(tmp_path.glob(".out.json*"))


def test_profile_bad_input(tmp_path, capsys, digits_model):
    out = tmp_path / "p.npz"
    empty = tmp_path / "e.npz"
    np.savez(empty, x=np.zeros((3, 64), np.float32), y=np.zeros(3, int))
    code, _, err = run_cli(capsys, "coverage", "profile", "--model", digits_model, "--split", empty,
                           "--layers", "nosuch", "--out", out)
    assert code == 2
    assert "unknown layer name(s) 'nosuch'" in err
    assert not out.exists()


keras = pytest.importorskip("h5py")


def test_on_an_imported_keras_model(tmp_path, capsys):
    from helpers.keras_files import convnet, sequential_config, write_full

    layers, weights, shape = convnet("channels_last")
    model = write_full(tmp_path / "k.h5", sequential_config(layers, shape, form="dict"), weights)
    rng = np.random.default_rng(0)
    data = tmp_path / "d.npz"
    # channels first on disk: reconciled to the Keras model's channels-last input
    np.savez(data, x=rng.uniform(0, 1, (40, 2, 9, 9)).astype(np.float32), y=rng.integers(0, 7, 40),
             x_train=rng.uniform(0, 1, (60, 2, 9, 9)).astype(np.float32), y_train=rng.integers(0, 7, 60))
    prof = tmp_path / "p.npz"
    base = ["--model", model, "--dataset", data]
    code, text, err = run_cli(capsys, "coverage", "profile", *base, "--out", prof)
    assert code == 0, err
    out = tmp_path / "c.json"
    code, text, err = run_cli(capsys, "coverage", "measure", *base, "--profile", prof, "--criteria", "all",
                              "--out", out)
    assert code == 0, err
    names = [la["name"] for la in json.loads(out.read_text())["layers"]]
    assert names == ["conv2d_1", "conv2d_2", "conv2d_3"]
    code, text, err = run_cli(capsys, "coverage", "measure", *base, "--layers", "deepxplore",
                              "--transform", "layer-minmax", "--threshold", "0,0.5", "--out", out)
    assert code == 0, err
    assert "softmax(output)" in text
    code, text, err = run_cli(capsys, "coverage", "rank", *base, "--criteria", "nc,tknc",
                              "--out", tmp_path / "r.json")
    assert code == 0, err
