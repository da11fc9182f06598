"""``deepfault coverage surprise``, ``rank --by`` and ``measure --criteria lsc,dsc,mdsc`` end to end
on the bundled 8x8 digits (no download): outputs, reports, and bad input as one line, exit 2, no file."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from deepfault.cli import main
from deepfault.coverage import apfd, load_surprise
from deepfault.models import ModelFile, build_model, save_model

SCORES = ["gini", "margin", "entropy", "confidence", "lsa", "dsa", "mdsa"]


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _digits_model(path, seed: int, steps: int):
    """A digits MLP trained for a few full-batch steps (seconds): a random one predicts a single
    class for every input, and surprise adequacy needs at least two.
    """
    from deepfault.data import load_dataset

    torch.manual_seed(seed)
    model = build_model("digits_mlp", hidden=[12, 10])
    data = load_dataset("digits")
    x, y = torch.as_tensor(data.x_train), torch.as_tensor(data.y_train).long()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    save_model(path, ModelFile(model.eval(), "digits_mlp", {"hidden": [12, 10]}, dataset="digits",
                               bounds=(0.0, 1.0)))
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """``(model, its surprise state, another model's state)``."""
    folder = tmp_path_factory.mktemp("prioritise")
    model = _digits_model(folder / "m.pt", 0, 40)
    other = _digits_model(folder / "o.pt", 1, 40)
    assert main(["coverage", "surprise", "--model", str(model), "--out", str(folder / "s.npz"),
                 "--no-progress"]) == 0
    assert main(["coverage", "surprise", "--model", str(other), "--out", str(folder / "o.npz"),
                 "--no-progress"]) == 0
    return model, folder / "s.npz", folder / "o.npz"


def test_surprise_fits_and_prints_the_classes(tmp_path, capsys, trained):
    model, _, _ = trained
    out = tmp_path / "s.npz"
    code, text, err = run_cli(capsys, "coverage", "surprise", "--model", model, "--layers", "fc1",
                              "--classes", "labels", "--var-threshold", "0", "--max-features", "5",
                              "--no-progress", "--out", out)
    assert code == 0, err
    assert "layers: fc1 (12); 12 neurons" in text
    assert "inputs per class (by labels" in text
    assert "keeps at most 5" in text
    state = load_surprise(out)
    assert state.layers == ("fc1",)
    assert state.grouping == "labels"
    assert state.max_features == 5
    assert state.num_inputs == int(state.class_counts().sum()) > 1000
    code, text, err = run_cli(capsys, "coverage", "surprise", "--model", model, "--out", "-", "--no-progress")
    assert code == 0, err
    assert "layers: fc2 (10)" in text  # the deepest layer before the logits
    assert "wrote" not in text


def test_rank_by_everything_with_a_report(tmp_path, capsys, trained):
    model, state, _ = trained
    out, report = tmp_path / "r.json", tmp_path / "rep"
    code, text, err = run_cli(capsys, "coverage", "rank", "--model", model, "--by", "all", "--surprise",
                              state, "--criteria", "nc,tknc", "--out", out, "--report", report,
                              "--no-progress")
    assert code == 0, err
    assert "earliest: " in text
    assert "surprise state " in text
    data = json.loads(out.read_text())
    assert data["tool"] == "deepfault coverage rank"
    assert data["config"]["by"] == [*SCORES, "cam", "ctm"]
    names = [r["name"] for r in data["rankings"]]
    assert names == [*SCORES, "cam:nc(threshold=0)", "cam:tknc(top_k=1)", "ctm:nc(threshold=0)",
                     "ctm:tknc(top_k=1)"]
    n = data["num_inputs"]
    failing = np.zeros(n, dtype=bool)
    failing[data["failing"]] = True
    assert data["num_failing"] == int(failing.sum()) > 0
    for r in data["rankings"]:
        assert sorted(r["order"]) == list(range(n))
        assert r["apfd"] == pytest.approx(apfd(r["order"], failing))
        assert r["seconds"] >= 0
        assert ("scores" in r) == (r["prioritiser"] != "cam")
    assert data["surprise"]["source"] == str(state)
    assert data["surprise"]["layers"] == [{"name": "fc2", "size": 10}]
    assert sorted(p.name for p in report.iterdir()) == [".deepfault-report.json", "rank_curves.png",
                                                         "rank_scores.png", "report.html"]
    page = (report / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 2
    answer = page.index("Which prioritiser finds the misclassified inputs earliest")
    assert answer < page.index("Ranking curves")
    assert "The first inputs to look at" in page
    assert "Provenance" in page


def test_rank_by_default_and_a_fit_on_the_fly(tmp_path, capsys, trained):
    model, _, _ = trained
    out = tmp_path / "r.json"
    code, text, err = run_cli(capsys, "coverage", "rank", "--model", model, "--out", out, "--no-progress")
    assert code == 0, err
    assert [r["name"] for r in json.loads(out.read_text())["rankings"]] == [
        "gini", "margin", "entropy", "confidence", "cam:nc(threshold=0)", "ctm:nc(threshold=0)"]
    assert "fitted surprise" not in text
    code, text, err = run_cli(capsys, "coverage", "rank", "--model", model, "--by", "lsa,gini",
                              "--out", out, "--no-progress")
    assert code == 0, err
    assert "no --surprise given: fitted surprise adequacy on digits train (1257 inputs, layers fc2" in text
    data = json.loads(out.read_text())
    assert data["layers"] is None
    assert data["surprise"]["source"] == "fitted on digits train"
    assert data["surprise"]["fit_seconds"] >= 0


def test_rank_an_npz_split_fits_on_the_models_own_training_split(tmp_path, capsys, trained):
    from deepfault.data import load_dataset

    model, _, _ = trained
    digits = load_dataset("digits")
    split = tmp_path / "few.npz"
    np.savez(split, x=digits.x_test[:30], y=digits.y_test[:30], bounds=np.array(digits.bounds))
    code, text, err = run_cli(capsys, "coverage", "rank", "--model", model, "--split", split,
                              "--by", "dsa", "--out", tmp_path / "r.json", "--no-progress")
    assert code == 0, err
    assert "fitted surprise adequacy on digits train" in text
    assert json.loads((tmp_path / "r.json").read_text())["num_inputs"] == 30


def test_measure_surprise_coverage(tmp_path, capsys, trained):
    model, state, _ = trained
    out, plots = tmp_path / "c.json", tmp_path / "plots"
    code, text, err = run_cli(capsys, "coverage", "measure", "--model", model,
                              "--criteria", "nc,lsc,dsc,mdsc", "--surprise", state, "--sa-upper", "2",
                              "--sa-sections", "50", "--out", out, "--plot", plots, "--no-progress")
    assert code == 0, err
    assert "surprise coverage (equal buckets of [0, U))" in text
    assert "not comparable" not in text  # U was given
    data = json.loads(out.read_text())
    assert [r["label"] for r in data["results"]] == ["nc(threshold=0)", "lsc(sections=50, upper=2)",
                                                    "dsc(sections=50, upper=2)", "mdsc(sections=50, upper=2)"]
    assert data["surprise"]["criteria"]["dsc"]["upper_from"] == "given"
    assert data["surprise"]["state"]["source"] == str(state)
    assert data["config"]["sa_sections"] == 50
    assert "coverage_surprise.png" in {p.name for p in plots.iterdir()}
    page = (plots / "report.html").read_text()
    assert "Surprise coverage" in page
    code, text, err = run_cli(capsys, "coverage", "measure", "--model", model, "--criteria", "dsc",
                              "--out", out, "--no-progress")
    assert code == 0, err
    assert "no --surprise given: fitted" in text
    assert "largest score here" in text
    assert "not comparable between input sets" in text
    data = json.loads(out.read_text())
    assert data["results"][0]["total"] == 1000  # Kim et al.'s buckets by default
    assert [la["name"] for la in data["layers"]] == ["fc2"]


BAD = [
    ("rank", ["--by", "gini,bogus"], "unknown prioritiser 'bogus'; known: gini, margin, entropy, confidence"),
    ("rank", ["--by", ","], "no prioritiser given"),
    ("rank", ["--by", "lsa", "--surprise", "MISSING"], "does not exist; fit one with 'deepfault coverage"),
    ("rank", ["--by", "dsa", "--surprise", "OTHER"], "the surprise state was fitted for another model"),
    ("rank", ["--by", "cam", "--criteria", "nc,lsc"], "lsc cover one score per input and give no coverage"),
    ("rank", ["--by", "mdsa", "--surprise", "STATE", "--split", "BADSHAPE"], "cannot take inputs of shape"),
    ("measure", ["--criteria", "lsc", "--sa-upper", "0"], "--sa-upper must be a number > 0; got 0.0"),
    ("measure", ["--criteria", "lsc", "--sa-sections", "0"],
     "--sa-sections must be an integer from 1 to 100,000; got 0"),
    ("measure", ["--criteria", "dsc", "--sa-sections", "200000", "--surprise", "STATE"],
     "--sa-sections must be an integer from 1 to 100,000; got 200000"),
    ("measure", ["--criteria", "nc,lsx"], "known: kmnc, nac, nbc, nc, snac, tknc, tknp; surprise coverage: "),
    ("measure", ["--criteria", "mdsc", "--surprise", "OTHER"], "the surprise state was fitted for another"),
]


@pytest.mark.parametrize(("command", "args", "message"), BAD, ids=[m[:30] for _, _, m in BAD])
def test_bad_input_is_one_line_exit_2_and_no_file(tmp_path, capsys, trained, command, args, message):
    model, state, other = trained
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=np.zeros((4, 5), np.float32), y=np.zeros(4, int))
    swap = {"STATE": state, "OTHER": other, "MISSING": tmp_path / "nope.npz", "BADSHAPE": bad}
    out = tmp_path / "out.json"
    code, _, err = run_cli(capsys, "coverage", command, "--model", model, *[swap.get(a, a) for a in args],
                           "--out", out, "--no-progress")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("deepfault: error: "), err
    assert message in lines[0], err
    assert not out.exists()


def test_surprise_of_a_model_that_predicts_one_class(tmp_path, capsys):
    torch.manual_seed(0)
    model = build_model("digits_mlp", hidden=[12, 10])
    logits = list(model.modules())[-1]
    with torch.no_grad():  # every input is class 3
        logits.weight.zero_()
        logits.bias.copy_(torch.arange(10) == 3)
    path = tmp_path / "m.pt"
    save_model(path, ModelFile(model, "digits_mlp", {"hidden": [12, 10]}, dataset="digits",
                               bounds=(0.0, 1.0)))
    out = tmp_path / "s.npz"
    code, _, err = run_cli(capsys, "coverage", "surprise", "--model", path, "--out", out, "--no-progress")
    assert code == 2
    assert "fit it on inputs of at least two classes" in err
    assert not out.exists()
