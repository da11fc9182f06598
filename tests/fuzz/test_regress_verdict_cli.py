"""What a regress run tells its user: what it does with an existing store (before any work,
both ways: resume or start anew, and --fresh), the two kinds of fault apart in the summary and
the .npz, the legend under the metrics, and the verdict as its last line."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest

from deepfault.cli import main
from deepfault.repair.inputs import read_inputs
from helpers.hardening import write_regress_pair


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("verdict")
    write_regress_pair(d, 40)
    return d


def _regress(d, store, *extra, budget="30it"):
    return ["regress", "--m1", str(d / "m1.pt"), "--m2", str(d / "m2.pt"), "--dataset", str(d / "data.npz"),
            "--budget", budget, "--inputs-per-step", "5", "--store", str(d / store), "--no-progress",
            "--device", "cpu", "--fidelity", "ssim:0.5", *extra]


def _store_line(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("store ") and ": " in line)


def test_summary_npz_legend_and_verdict(files, capsys, tmp_path):
    assert main(_regress(files, "a.sqlite", "--report", str(tmp_path / "page"))) == 0
    page = (tmp_path / "page" / "report.html").read_text(encoding="utf-8")
    assert "the DRFuzz paper&#x27;s #RF (#URF in its repository&#x27;s table)" in page  # on the page
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    assert lines[-1].startswith("verdict: ")
    assert " unique regression faults (#URF) in 30 iterations" in lines[-1]
    # 3 #URF in 30 iterations: too few to call levelled off (MIN_FIRST_FIFTH), or still climbing
    assert any(words in lines[-1] for words in ("still climbing", "levelled off", "too few new #URF"))
    assert "(#RF: generated inputs M1 gets right and M2 wrong; #URF: distinct (seed, M1 label, M2 label) " \
           "among them, the DRFuzz paper's #RF (#URF in its repository's table)" in out
    assert "initial faults: test inputs M2 already gets wrong (apart, in no # column)" in out
    result = json.loads((files / "a-drfuzz-seed0-faults.json").read_text())
    m = result["metrics"]
    assert result["verdict"]["urf"] == m["urf"]
    assert result["verdict"]["status"] in ("climbing", "levelled", "few")
    assert result["verdict"]["line"] == lines[-1]
    assert result["store_state"]["status"] == "new"
    npz = files / "a-drfuzz-seed0-faults.npz"
    with np.load(npz, allow_pickle=False) as f:
        assert "initial" not in f.files
        generated, initial = len(f["inputs"]), len(f["initial_inputs"])
        assert (generated, initial) == (m["rf"], m["initial_rf"])
        assert generated > 0
        assert initial > 0
        per_fault = ("seed_index", "label", "m1_pred", "m2_pred", "m1_prob", "m2_prob", "elapsed",
                     "iteration")
        for name in per_fault:
            assert len(f[name]) == generated, name
        for name in ("seed_index", "label", "m1_pred", "m2_pred", "m1_prob", "m2_prob"):
            assert len(f[f"initial_{name}"]) == initial, name
        assert (f["m2_pred"] != f["label"]).all()
        assert (f["initial_m2_pred"] != f["initial_label"]).all()
        with np.load(files / "data.npz") as data:  # an initial fault is the test input itself
            np.testing.assert_array_equal(f["initial_inputs"], data["x"][f["initial_seed_index"]])
    assert f"{m['rf']:,} generated regression faults (#RF; {m['urf']:,} unique, #URF)" in out
    assert f"{m['initial_rf']:,} initial faults (test inputs M1 gets right and M2 already gets wrong" in out
    assert len(read_inputs(npz)) == m["rf"]  # repair reads the generated faults


def test_a_rerun_says_before_any_work_whether_it_resumes_or_starts_anew(files, capsys):
    assert main(_regress(files, "b.sqlite")) == 0
    first = capsys.readouterr().out
    assert _store_line(first).endswith("new campaign 'drfuzz-seed0' (none of that id in the store)")
    assert first.index("store ") < first.index("#RF")  # before the work
    # the same options: the finished campaign's result, no fuzzing
    assert main(_regress(files, "b.sqlite")) == 0
    line = _store_line(capsys.readouterr().out)
    assert "campaign 'drfuzz-seed0' finished before with these options" in line
    assert "printing its stored result without fuzzing; add --fresh" in line
    # other options: a new campaign beside the first, which is named with what differs
    assert main(_regress(files, "b.sqlite", budget="20it")) == 0
    line = _store_line(capsys.readouterr().out)
    assert line.startswith(f"store {files / 'b.sqlite'}: new campaign 'drfuzz-seed0'; the store also holds")
    assert "budget 30it there, 20it here: kept, not resumed" in line
    # --fresh: the earlier run of these options is deleted and the campaign runs again
    assert main(_regress(files, "b.sqlite", "--fresh")) == 0
    out = capsys.readouterr().out
    assert "--fresh: deleting the earlier finished run of campaign 'drfuzz-seed0' (30 iterations" in \
        _store_line(out)
    assert "resumed from checkpoint" not in out


def test_a_campaign_of_other_models_in_a_shared_store_is_not_mentioned(files, capsys):
    """The store line names earlier campaigns of the same models and data only: another pair's
    campaign of the same id in a shared store is none of this run's business."""
    assert main(_regress(files, "shared.sqlite")) == 0
    capsys.readouterr()
    swapped = _regress(files, "shared.sqlite", budget="20it")
    m1, m2 = swapped.index("--m1") + 1, swapped.index("--m2") + 1
    swapped[m1], swapped[m2] = swapped[m2], swapped[m1]  # another pair: M2 -> M1
    assert main(swapped) == 0
    line = _store_line(capsys.readouterr().out)
    assert "new campaign 'drfuzz-seed0'" in line
    assert "the store also holds" not in line
    assert "budget 30it there" not in line
    assert main(_regress(files, "shared.sqlite", budget="25it")) == 0  # the first pair again: named
    line = _store_line(capsys.readouterr().out)
    assert "the store also holds 'drfuzz-seed0' run with budget 30it there, 25it here" in line
    assert "20it there" not in line


def test_an_interrupted_campaign_is_resumed_and_says_so(files, capsys):
    from deepfault.fuzz import regress

    calls = []

    def interrupt(p):
        calls.append(p.iterations)
        if len(calls) == 3:
            raise KeyboardInterrupt

    store = files / "c.sqlite"
    out = regress(files / "m1.pt", files / "m2.pt", dataset=str(files / "data.npz"), budget="30it",
                  inputs_per_step=5,
                  store=store, fidelity="ssim:0.5", checkpoint_every=0.0, progress=interrupt,
                  criterion_params=(("sections", 1000),))  # the command's options
    assert out.result.stop_reason == "interrupted"
    assert out.store_state.status == "new"
    with sqlite3.connect(store) as db:  # a checkpoint, no result
        cells = {c for (c,) in db.execute("SELECT cell_id FROM cells")}
    assert "drfuzz-seed0/checkpoint" in cells
    assert "drfuzz-seed0/result" not in cells
    assert main(_regress(files, "c.sqlite", "--inputs-per-step", "5")) == 0
    text = capsys.readouterr().out
    line = _store_line(text)
    assert f"resuming campaign 'drfuzz-seed0' from its last checkpoint ({calls[-1]} iterations" in line
    assert "add --fresh to start it again from the start instead" in line
    assert "resumed from checkpoint" in text


def test_a_missing_or_empty_store_file_means_a_new_campaign(tmp_path):
    from deepfault.fuzz.campaign import CampaignConfig
    from deepfault.fuzz.campaign.resume import store_state

    (tmp_path / "empty.sqlite").write_bytes(b"")
    for name in ("missing.sqlite", "empty.sqlite"):
        state = store_state(tmp_path / name, "e", "drfuzz-seed0", CampaignConfig())
        assert state.status == "new"
        expected = f"store {tmp_path / name}: new campaign 'drfuzz-seed0' (none of that id in the store)"
        assert state.line() == expected
    assert not (tmp_path / "missing.sqlite").exists()  # looking creates nothing
