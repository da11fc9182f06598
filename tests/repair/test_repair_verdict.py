"""The repair's verdict (which fine-tuning to keep) on hand-built results, and the page that
``deepfault repair --report DIR`` writes through the shared page shell, verdict first."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from deepfault.cli import main
from deepfault.data import Dataset
from deepfault.models import ModelFile, build_model, save_model
from deepfault.models.train import TrainConfig, fit
from deepfault.repair import repair
from deepfault.repair.figures import zoomed_range
from deepfault.repair.results import ApproachResult, RepairEvaluation, repair_verdict

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _a(name: str, change: float, fixed: int, broken: int = 0, max_drop: float = 1.0) -> ApproachResult:
    return ApproachResult(name, 10, RepairEvaluation(0.9, 0.9), change, change < -max_drop, 0.1, 1.0, fixed,
                          broken)


def test_the_found_inputs_win_and_the_saved_model_is_named():
    v = repair_verdict([_a("found", -0.4, 12, 2), _a("random-test", 0.1, 5), _a("fgsm", -0.2, 9)],
                       faults=30, max_drop=1.0, saved_to="m.pt")
    assert (v.best, v.fixed, v.faults) == ("found", 10, 30)
    assert v.text.startswith("fine-tuning on the found inputs fixed the most held-out faults within the "
                             "1-point accuracy budget: 10 (12 fixed, 2 newly wrong) of 30, at -0.40 points")
    assert "random-test 5; fgsm 9" in v.text
    assert v.text.endswith("Saved it as m.pt.")


def test_a_baseline_that_fixes_more_wins_and_the_saved_model_is_still_found():
    v = repair_verdict([_a("found", -0.4, 6), _a("random-test", 0.1, 8)], faults=20, max_drop=1.0,
                       saved_to="m.pt")
    assert v.best == "random-test"
    assert v.fixed == 8
    assert "fine-tuning on random-test inputs fixed the most" in v.text
    assert "The model saved as m.pt is the one fine-tuned on the found inputs, not random-test's." in v.text


def test_a_repair_over_budget_does_not_win():
    v = repair_verdict([_a("found", -2.5, 15), _a("random-test", 0.0, 3)], faults=20, max_drop=1.0)
    assert v.best == "random-test"
    assert "found 15 but lost 2.50 points" in v.text
    assert v.text.endswith("No model was saved.")


def test_ties_go_to_the_larger_accuracy_change_then_to_found():
    assert repair_verdict([_a("found", -0.5, 4), _a("fgsm", 0.2, 4)], faults=9, max_drop=1).best == "fgsm"
    assert repair_verdict([_a("found", 0.2, 4), _a("fgsm", 0.2, 4)], faults=9, max_drop=1).best == "found"


def test_none_helped_says_why():
    v = repair_verdict([_a("found", -3.0, 7), _a("random-train", 0.0, 0), _a("fgsm", -1.5, 0),
                        _a("bim", 0.3, 2, 2)], faults=25, max_drop=1.0, saved_to="out.pt")
    assert v.best is None
    assert v.fixed == 0
    assert v.faults == 25
    assert v.text == ("no fine-tuning fixed a held-out fault within the 1-point accuracy budget (25 held-out "
                      "faults): found fixed 7 but lost 3.00 points; random-train fixed none; fgsm fixed none "
                      "and lost 1.50 points; bim fixed 0 (2 fixed, 2 newly wrong). The model fine-tuned on "
                      "the found inputs was saved as out.pt all the same: no repair.")


def test_no_held_out_fault_means_no_verdict():
    v = repair_verdict([_a("found", 0.0, 0)], faults=0, max_drop=1.0)
    assert v.best is None
    assert v.text.startswith("no verdict: no held-out input was wrong")


def test_zoomed_axis_shows_a_point_or_two():
    lo, hi = zoomed_range([97.1, 98.3, 96.9])
    assert 90 < lo < 96.9
    assert 98.3 < hi <= 100
    assert hi - lo <= 6
    assert zoomed_range([99.9, 100.0])[1] == 100.0
    assert zoomed_range([0.0, 0.5])[0] == 0.0


# --- a planted weakness, end to end --------------------------------------------------------------


def _labels(x: np.ndarray) -> np.ndarray:
    return np.where(x[:, 1] > 0.8, 2, (x[:, 0] > 0.5).astype(int))


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """A 2-D task whose top band (class 2) the model never saw, and synthesized inputs from it."""
    rng = np.random.default_rng(0)
    x_train = rng.uniform(0, 1, (1500, 2)).astype(np.float32)
    x_train = x_train[x_train[:, 1] <= 0.8]
    x_test = rng.uniform(0, 1, (600, 2)).astype(np.float32)
    data = Dataset("plane", x_train, _labels(x_train), x_test, _labels(x_test), (0.0, 1.0), ("0", "1", "2"))
    torch.manual_seed(0)
    model = build_model("digits_mlp", hidden=(32, 32), in_features=2, num_classes=3)
    threads = torch.get_num_threads()  # a module fixture runs before the function's one_torch_thread
    torch.set_num_threads(1)
    try:
        fit(model, data.x_train, data.y_train, TrainConfig(epochs=10, lr=1e-2, val_fraction=0.0))
    finally:
        torch.set_num_threads(threads)
    d = tmp_path_factory.mktemp("verdict")
    save_model(d / "m.pt", ModelFile(model.eval(), "digits_mlp", {"hidden": (32, 32), "in_features": 2,
                                                                   "num_classes": 3}, None, (0.0, 1.0),
                                     meta={"input_shape": [2]}))
    np.savez(d / "data.npz", x=x_test, y=data.y_test, x_train=x_train, y_train=data.y_train,
             class_names=np.array(["0", "1", "2"]))
    seeds = np.repeat(np.flatnonzero(x_test[:, 1] > 0.8), 3)
    synth = np.clip(x_test[seeds] + rng.uniform(-0.02, 0.02, (len(seeds), 2)), 0, 1).astype(np.float32)
    synth[:, 1] = np.maximum(synth[:, 1], 0.81)
    np.savez(d / "run.npz", synthesized=synth, originals=x_test[seeds], labels=data.y_test[seeds],
             test_index=seeds, pred_original=np.zeros(len(seeds), int),
             pred_synthesized=np.zeros(len(seeds), int), target_class=data.y_test[seeds],
             repetition=np.zeros(len(seeds), int))
    return d, data


def test_fixed_counts_equal_a_naive_count(planted):
    d, data = planted
    r = repair(d / "m.pt", d / "run.npz", dataset=data, epochs=10, lr=1e-2, baselines=("random-train",),
               save_model=d / "repaired.pt")
    _, held = r.splits["run.npz"]
    with np.load(d / "run.npz") as z:
        x, y = torch.as_tensor(z["synthesized"][held]), z["labels"][held]
    from deepfault.models import open_model

    with torch.no_grad():
        before = open_model(d / "m.pt").model(x).argmax(1).numpy() == y
        after = r.model(x).argmax(1).numpy() == y
    assert r.held_out_faults == int((~before).sum()) > 0
    assert (r.found.fixed, r.found.broken) == (int((~before & after).sum()), int((before & ~after).sum()))
    v = r.verdict()
    assert v.best == "found"
    assert v.saved_to == str(d / "repaired.pt")
    assert r.to_dict()["verdict"] == v.to_dict()


def test_cli_report_page_leads_with_the_verdict(planted, tmp_path, capsys):
    d, _ = planted
    out, report = tmp_path / "rep.json", tmp_path / "page"
    code = main(["repair", str(d / "run.npz"), "--model", str(d / "m.pt"), "--dataset", str(d / "data.npz"),
                 "--epochs", "10", "--lr", "0.01", "--baselines", "random-train", "--out", str(out),
                 "--report", str(report), "--no-progress", "--device", "cpu"])
    text = capsys.readouterr().out
    assert code == 0, text
    payload = json.loads(out.read_text())
    verdict = payload["verdict"]
    assert verdict["best"] == "found"
    assert verdict["saved_to"] == str(tmp_path / "rep.pt")
    assert f"verdict: {verdict['text']}" in text
    assert text.index("verdict:") > text.index("  found ")  # after the table, where the eye lands
    assert (tmp_path / "rep.pt").is_file()
    assert not (tmp_path / "rep.html").exists()
    page = (report / "report.html").read_text(encoding="utf-8")
    from deepfault.experiment.report import render_page

    shell = render_page("x", "")
    assert page[:page.index("<title>")] == shell[:shell.index("<title>")]  # the shared shell, its style
    head = slice(page.index("</title>"), page.index("<body>"))
    assert page[head] == shell[shell.index("</title>"):shell.index("<body>")]
    main_part = page[page.index("<main>"):]
    first = re.search(r"<(p|h2|figure|table)\b[^>]*>", main_part)
    assert first is not None
    assert first.group(0) == "<p class='verdict'>"
    import html

    assert html.escape(verdict["text"]) in main_part[:main_part.index("</p>")]
    assert main_part.index("verdict") < main_part.index("<figure>") < main_part.index("Before and after")
    assert "data:image/png;base64," in page
