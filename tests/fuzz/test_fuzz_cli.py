"""``deepfault regress`` and ``deepfault report`` on tiny LeNet-1 files, the library entry point
with its documented example, and the one-input-at-a-time reference loop."""

from __future__ import annotations

import json

import numpy as np
import pytest

from deepfault.cli import main
from deepfault.models import ModelFile, save_model
from helpers.hardening import lenet as _lenet
from helpers.hardening import write_regress_pair


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """M1, M2 (M1 with weight noise) and a 60-input data set labelled by M1."""
    d = tmp_path_factory.mktemp("regress")
    write_regress_pair(d, 60)
    meta = {"input_shape": [1, 28, 28]}
    save_model(d / "m5.pt", ModelFile(_lenet(0, classes=5), "lenet1", {"num_classes": 5}, None, (0.0, 1.0),
                                      meta=meta))
    save_model(d / "wide.pt", ModelFile(_lenet(0), "lenet1", {"num_classes": 10}, None, (0.0, 1.0),
                                        meta={"input_shape": [1, 32, 32]}))
    return d


def _regress(d, *extra, store="s.sqlite"):
    return ["regress", "--m1", str(d / "m1.pt"), "--m2", str(d / "m2.pt"), "--dataset", str(d / "data.npz"),
            "--budget", "40it", "--inputs-per-step", "5", "--store", str(d / store), "--no-progress",
            "--device", "cpu", "--fidelity", "ssim:0.5", *extra]


def test_regress_prints_metrics_writes_faults_and_resumes(files, capsys):
    assert main(_regress(files)) == 0
    out = capsys.readouterr().out
    for word in ("#RF", "#URF", "#Seed", "#GF", "stopped at the budget (40it)"):
        assert word in out
    assert "neurons of M2" not in out  # DRFuzz reads no neurons
    npz = files / "s-drfuzz-seed0-faults.npz"
    assert npz.is_file()
    assert (files / "s-drfuzz-seed0-faults.png").is_file()
    with np.load(npz) as f:
        assert set(f.files) >= {"inputs", "seed_index", "label", "m1_pred", "m2_pred", "m1_prob", "m2_prob"}
        assert (f["m1_pred"] == f["label"]).all()
        assert (f["m2_pred"] != f["label"]).all()
        assert f["inputs"].shape[1:] == (1, 28, 28)
        assert len(f["inputs"]) > 0
        first = f["inputs"].copy()
    # the same command finds the finished campaign in the store and prints the same metrics
    assert main(_regress(files)) == 0
    again = capsys.readouterr().out
    def metric_lines(text):
        return [line for line in text.splitlines() if "#" in line]

    assert metric_lines(again) == metric_lines(out)
    with np.load(npz) as f:
        np.testing.assert_array_equal(f["inputs"], first)


def test_regress_deephunter_and_the_report(files, capsys, tmp_path):
    args = _regress(files, "--strategy", "deephunter", "--criteria", "nc", "--threshold", "0.2",
                    store="dh.sqlite")
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "validity check" in text
    # DeepHunter's coverage reads M2's neurons, counted as every method counts them
    assert "neurons of M2: 16 in 2 layers (linear-conv: the default for networks without" in text
    doc = json.loads((files / "dh-deephunter-seed0-faults.json").read_text())
    assert doc["models"]["m2"]["layer_selection"] == "linear-conv"
    out = tmp_path / "report"
    assert main(["report", str(files / "dh.sqlite"), "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "DRFuzz against DeepHunter" not in md  # only DeepHunter ran: nothing to compare
    assert "DeepHunter" in md
    assert "README" not in md  # the published numbers belong to the reproduction preset's report
    page = (out / "report.html").read_text()
    assert page.count("<h1>") == 1
    assert "regression faults of m2.pt against m1.pt" in page  # the user's names for M1 and M2
    assert not [p.name for p in out.iterdir() if "--" in p.name]
    assert (out / "timeline.png").is_file()
    assert (out / "rule_usage.png").is_file()
    assert (out / "campaigns.csv").read_text().count("\n") == 2


@pytest.mark.parametrize(("other", "message"), [
    ("m5.pt", "'m5.pt' has 5 outputs per input but data set 'data' has 10 classes"),  # prepare_model
    ("wide.pt", r"M1 takes inputs of shape \(1, 28, 28\) and M2 \(1, 32, 32\)"),
])
def test_regress_refuses_models_that_are_not_versions_of_one_classifier(files, capsys, other, message):
    args = _regress(files, store="bad.sqlite")
    args[args.index("--m2") + 1] = str(files / other)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    import re

    assert re.search(message, err)


def test_regress_bad_budget_is_one_line(files, capsys):
    args = _regress(files)
    args[args.index("--budget") + 1] = "ten minutes"
    assert main(args) == 2
    assert "budget must be a number with a unit" in capsys.readouterr().err


def test_library_entry_point(files):
    from deepfault.fuzz import regress

    out = regress(files / "m1.pt", files / "m2.pt", dataset=str(files / "data.npz"), budget="20it",
                  inputs_per_step=4,
                  fidelity="ssim:0.5", store=files / "lib.sqlite")
    assert out.result.iterations == 20
    assert out.cell == "drfuzz-seed0"
    assert len(out.seed_inputs) == int((out.result.faults.kind == 0).sum())
    assert out.to_dict()["metrics"]["rf"] == out.result.metrics.rf


def test_reference_loop_finds_regressions_and_none_for_identical_models():
    from deepfault.testing.fuzz_reference import ReferenceSettings, drfuzz_reference
    from helpers.fuzz_problems import AlwaysPass, tiny_problem

    m1, m2, x, y = tiny_problem()
    r = drfuzz_reference(m1, m2, x, y, bounds=(0.0, 1.0), fidelity=AlwaysPass(),
                         settings=ReferenceSettings(iterations=40, seed=0))
    assert r["iterations"] == 40
    assert r["generated"] == 400
    assert r["rf"] > 0
    assert 0 < r["urf"] <= r["rf"]
    assert r["seeds"] <= r["urf"]
    with pytest.warns(FutureWarning, match="settings=ReferenceSettings"):  # the old form
        same = drfuzz_reference(m1, m1, x, y, bounds=(0.0, 1.0), fidelity=AlwaysPass(), iterations=20, seed=0)
    assert same["rf"] == 0
    assert same["urf"] == 0


def test_campaigns_through_the_executors_write_the_same_results(files):
    from deepfault.experiment.executors import get_executor
    from deepfault.experiment.store import ResultStore
    from deepfault.fuzz.campaign import CampaignConfig
    from deepfault.fuzz.campaign.checkpoint import list_campaigns
    from deepfault.fuzz.regress import campaign_job

    def jobs(store):
        return [{"cell": f"c{seed}", "m1": str(files / "m1.pt"), "m2": str(files / "m2.pt"),
                 "dataset": str(files / "data.npz"), "store": str(store), "experiment": "e", "threads": 1,
                 "config": CampaignConfig(budget="15it", inputs_per_step=5, seed=seed,
                                          fidelity="ssim:0.5").to_dict()}
                for seed in (0, 1)]

    out = {}
    for name, workers in (("serial", 1), ("process", 2)):
        store = files / f"exec-{name}.sqlite"
        with get_executor(name, workers=workers) as pool:
            out[name] = {jobs(store)[i]["cell"]: r["metrics"] for i, r in pool.map(campaign_job, jobs(store))}
        with ResultStore(store) as s:
            assert list_campaigns(s, "e") == ["c0", "c1"]
    for cell in ("c0", "c1"):
        a, b = ({k: v for k, v in out[n][cell].items() if "seconds" not in k} for n in ("serial", "process"))
        assert a == b


def test_hooks_are_removed_when_a_campaign_fails(files):
    from deepfault.fuzz import run_campaign
    from helpers.fuzz_problems import DH, tiny_problem

    m1, m2, x, y = tiny_problem()

    def boom(progress):
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        run_campaign(m1, m2, x, y, bounds=(0.0, 1.0), budget="50it", inputs_per_step=5, progress=boom, **DH)
    assert all(not module._forward_hooks for module in m2.modules())
    assert not m1.training
    assert not m2.training


def test_regress_both_strategies_share_one_filter_and_are_compared(files, capsys):
    argv = _regress(files, "--strategy", "both", "--criteria", "nc", "--queue-capacity", "100",
                    store="both.sqlite")
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.count("regress: ") == 2
    assert "drfuzz on" in out
    assert "deephunter on" in out
    assert "+ shared ssim:0.5 check" in out
    assert "comparison (shared filter: ssim:0.5): at equal wall time" in out
    assert "at equal iterations (40)" in out
    assert "#URF passing the filter" in out
    assert "#URF per 1,000 model queries" in out


def test_regress_without_a_discriminator_for_the_data_set_names_both_ways(files, capsys, tmp_path,
                                                                          monkeypatch):
    monkeypatch.setenv("DEEPFAULT_CACHE", str(tmp_path))
    argv = [a for a in _regress(files) if a not in ("--fidelity", "ssim:0.5")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "no discriminator for data set" in err
    assert "deepfault gan train" in err
    assert "--fidelity" in err


@pytest.mark.parametrize("size", ["lots", "0", "12 parsecs", "-1GiB"])
def test_regress_bad_queue_memory_is_one_line(files, capsys, size):
    assert main(_regress(files, "--queue-memory", size)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert any("--queue-memory" in line and "must be a size" in line for line in err)


def test_regress_queue_memory_and_dtype_run_and_are_named(files, capsys):
    args = _regress(files, "--queue-memory", "64KiB", "--queue-dtype", "float16", "--campaign", "small",
                    store="q.sqlite")
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "queue up to 41 inputs (62.8 KiB in float16)" in out  # 64 KiB / (28 * 28 * 2 bytes)
    assert "s of fuzzing, and" in out
