"""``deepfault regress --fidelity dsa:T``: bad specs refused at once, a campaign on tiny model
files whose faults all pass the filter, and what stops a tabular data set."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from deepfault.cli import main
from deepfault.fuzz.fidelity import make_fidelity
from deepfault.fuzz.regress import regress
from deepfault.models import open_model
from helpers.sa_fuzz import save_band_files


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return save_band_files(tmp_path_factory.mktemp("sa-regress"))


def _args(d, *extra, store="s.sqlite", fidelity="dsa:p90"):
    return ["regress", "--m1", str(d / "m1.pt"), "--m2", str(d / "m2.pt"), "--dataset", str(d / "data.npz"),
            "--budget", "30it", "--inputs-per-step", "5", "--store", str(d / store), "--no-progress",
            "--device", "cpu", "--fidelity", fidelity, *extra]


@pytest.mark.parametrize(("option", "spec", "words"), [
    ("--fidelity", "dsa:abc", "threshold in 'dsa:abc'"),
    ("--fidelity", "lsa:p0", "percentile in 'lsa:p0'"),
    ("--fidelity", "mdsa::missing.npz", "surprise state 'missing.npz'"),
    ("--shared-fidelity", "dsa:-1", "--shared-fidelity: the threshold in 'dsa:-1'"),
    ("--fidelity", "dsx:1", "--fidelity must be one of"),
])
def test_bad_specs_exit_2_with_one_line_before_any_work(tmp_path, capsys, option, spec, words):
    args = ["regress", "--m1", str(tmp_path / "no-m1.pt"), "--m2", str(tmp_path / "no-m2.pt"),
            "--store", str(tmp_path / "s.sqlite"), option, spec]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert words in err
    assert "no-m1.pt" not in err  # refused before the model files are even looked at
    assert list(tmp_path.iterdir()) == []


def test_regress_with_dsa_writes_faults_that_pass_it(files, capsys):
    assert main(_args(files)) == 0
    out = capsys.readouterr().out
    assert "dsa:p90 check" in out
    assert "fidelity dsa: a mutant passed when dsa <= the 90th percentile of the test inputs' dsa (" in out
    result = json.loads((files / "s-drfuzz-seed0-faults.json").read_text())
    own = result["trace_checks"]["own"]
    with np.load(files / "s-drfuzz-seed0-faults.npz") as f:
        faults = f["inputs"]  # the generated faults (initial ones: initial_inputs)
    assert len(faults) > 0
    m1 = open_model(files / "m1.pt").model
    with np.load(files / "data.npz") as d:
        fid = make_fidelity("dsa:p90", bounds=(0.0, 1.0), model=m1, train_inputs=d["x_train"],
                            test_inputs=d["x"])
    assert fid.threshold == pytest.approx(own["threshold"])
    assert (fid.check(torch.from_numpy(faults)).scores <= own["threshold"] + 1e-6).all()


def test_a_tabular_data_set_runs_with_dsa_and_refuses_image_only_checks_before_the_store(tmp_path, capsys):
    """Vectors have their own mutation rules now (tests/fuzz/test_regress_vectors_cli.py); what
    stops a tabular campaign before the store is an image-only check."""
    d = save_band_files(tmp_path, tabular=True)
    assert main(_args(d, store="tab.sqlite", fidelity="ssim")) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("deepfault: error: --fidelity 'ssim' judges images only and the inputs are vectors")
    assert not (d / "tab.sqlite").exists()
    out = regress(d / "m1.pt", d / "m2.pt", dataset=str(d / "data.npz"), fidelity="dsa:p90", budget="10it",
                  inputs_per_step=5)
    assert out.result.iterations == 10
    assert out.result.config.fidelity == "dsa:p90"
