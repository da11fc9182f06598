"""``deepfault regress`` on vectors (N, F) and 1-D sequences (N, C, L): campaigns through the CLI
with the surprise filters and the distance bound, each writing faults that pass the filter and a
JSON result; the image-only checks refused in one line before any work; DeepHunter's coverage
and the result's arrays on vectors through the API."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from deepfault.cli import main
from deepfault.fuzz.campaign import run_campaign
from deepfault.fuzz.fidelity import make_fidelity
from deepfault.fuzz.mutation.vectors import SEQUENCE_RULES, VECTOR_RULES
from deepfault.models import ModelFile, open_model, save_model
from helpers.sa_fuzz import ARCH_KWARGS, band_problem


def save_files(folder, shape):
    """The band problem's M1/M2 (a digits_mlp: Flatten first, so it takes any layout of 64 values)
    and ``data.npz`` with inputs of ``shape`` per input: ``[64]`` vectors or ``[1, 64]`` sequences."""
    m1, m2, x, y, x_train = band_problem()
    with torch.no_grad():
        y_train = m1(x_train).argmax(1).numpy()
    xs, xt = (a.numpy().reshape(len(a), *shape) for a in (x, x_train))
    np.savez(folder / "data.npz", x=xs, y=y.numpy(), x_train=xt, y_train=y_train,
             class_names=np.array(["top", "middle", "bottom"]))
    for name, m in (("m1", m1), ("m2", m2)):
        save_model(folder / f"{name}.pt", ModelFile(m, "digits_mlp", ARCH_KWARGS, None, (0.0, 1.0),
                                                    meta={"input_shape": list(shape)}))
    return folder


@pytest.fixture(scope="module")
def tabular(tmp_path_factory):
    return save_files(tmp_path_factory.mktemp("tabular"), [64])


@pytest.fixture(scope="module")
def sequence(tmp_path_factory):
    return save_files(tmp_path_factory.mktemp("sequence"), [1, 64])


def _args(d, store, *extra):
    return ["regress", "--m1", str(d / "m1.pt"), "--m2", str(d / "m2.pt"), "--dataset", str(d / "data.npz"),
            "--budget", "30it", "--inputs-per-step", "5", "--store", str(d / store), "--no-progress",
            "--device", "cpu", *extra]


def _outputs(d, store):
    stem = store.removesuffix(".sqlite")
    result = json.loads((d / f"{stem}-drfuzz-seed0-faults.json").read_text())
    with np.load(d / f"{stem}-drfuzz-seed0-faults.npz", allow_pickle=False) as f:
        faults = f["inputs"]  # the generated faults (initial ones: initial_inputs)
    return result, faults


def _fit(d, spec):
    with np.load(d / "data.npz") as data:
        return make_fidelity(spec, bounds=(0.0, 1.0), model=open_model(d / "m1.pt").model,
                             train_inputs=data["x_train"], test_inputs=data["x"])


def test_regress_dsa_threshold_on_vectors(tabular, capsys):
    threshold = round(_fit(tabular, "dsa:p90").threshold, 4)
    assert main(_args(tabular, "dsa.sqlite", "--fidelity", f"dsa:{threshold}")) == 0
    out = capsys.readouterr().out
    assert f"dsa:{threshold} check" in out
    assert "n/a (images only)" in out  # no SSIM for vectors
    result, faults = _outputs(tabular, "dsa.sqlite")
    assert len(faults) > 0
    assert faults.shape[1:] == (64,)
    assert result["metrics"]["urf"] > 0
    assert set(result["rule_usage"]) == set(VECTOR_RULES)
    assert result["trace_checks"]["own"]["threshold"] == pytest.approx(threshold)
    scores = _fit(tabular, f"dsa:{threshold}").check(torch.from_numpy(faults)).scores
    assert (scores <= threshold + 1e-6).all()  # every fault passed the filter
    assert (tabular / "dsa-drfuzz-seed0-faults.png").is_file()  # line plots of seed and fault
    assert faults.min() >= 0.0
    assert faults.max() <= 1.0


def test_regress_on_vectors_defaults_to_mdsa(tabular, capsys):
    assert main(_args(tabular, "default.sqlite")) == 0
    out = capsys.readouterr().out
    assert "mdsa check" in out
    assert "fidelity mdsa: a mutant passed when mdsa <= the 90th percentile" in out
    result, faults = _outputs(tabular, "default.sqlite")
    assert result["config"]["fidelity"] == "mdsa"
    assert len(faults) > 0
    threshold = result["trace_checks"]["own"]["threshold"]
    assert (_fit(tabular, "mdsa").check(torch.from_numpy(faults)).scores <= threshold + 1e-6).all()


def test_regress_on_sequences_with_a_distance_bound(sequence, capsys):
    assert main(_args(sequence, "seq.sqlite", "--fidelity", "linf:0.3", "--budget", "40it")) == 0
    result, faults = _outputs(sequence, "seq.sqlite")
    assert set(result["rule_usage"]) == set(SEQUENCE_RULES)
    assert sum(u["selected"] for u in result["rule_usage"].values()) > 0
    assert faults.shape[1:] == (1, 64)
    assert len(faults) > 0
    with np.load(sequence / "data.npz") as data, np.load(sequence / "seq-drfuzz-seed0-faults.npz") as f:
        seeds = data["x"][f["seed_index"]]
    assert np.abs(faults - seeds).max() <= 0.3 + 1e-6  # the bound holds against each fault's seed


@pytest.mark.parametrize(("option", "spec"), [("--fidelity", "ssim"), ("--fidelity", "discriminator"),
                                              ("--shared-fidelity", "ssim:0.9")])
def test_image_only_checks_are_refused_for_vectors_before_the_store(tabular, capsys, option, spec):
    assert main(_args(tabular, "refused.sqlite", option, spec)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    words = f"{option} '{spec}' judges images only and the inputs are vectors; use one of dsa, linf, lsa, "
    assert words in err
    assert not (tabular / "refused.sqlite").exists()


def test_bad_linf_bound_is_refused_before_any_work(tmp_path, capsys):
    args = ["regress", "--m1", str(tmp_path / "m1.pt"), "--m2", str(tmp_path / "m2.pt"),
            "--fidelity", "linf:-1"]
    assert main(args) == 2
    assert "the bound in 'linf:-1' must be a finite number > 0" in capsys.readouterr().err


def test_api_campaigns_on_vectors_drfuzz_and_deephunter():
    m1, m2, x, y, x_train = band_problem(n=120, n_train=300)
    v = x.flatten(1)
    r = run_campaign(m1, m2, v, y, bounds=(0.0, 1.0), budget="20it", inputs_per_step=4, seed=1,
                     fidelity="linf",
                     train_inputs=x_train.flatten(1))
    again = run_campaign(m1, m2, v, y, bounds=(0.0, 1.0), budget="20it", inputs_per_step=4, seed=1,
                         fidelity="linf",
                         train_inputs=x_train.flatten(1))
    assert r.metrics.rf == again.metrics.rf
    assert np.array_equal(r.rf_inputs, again.rf_inputs)
    assert r.rf_inputs.shape[1:] == (64,)
    assert np.isnan(r.faults.ssim[~r.faults.initial]).all()
    assert r.examples["faults"].shape[1:] == (64,)
    dh = run_campaign(m1, m2, v, y, bounds=(0.0, 1.0), budget="10it", inputs_per_step=4, seed=0,
                      strategy="deephunter",
                      criteria="nc", train_inputs=x_train.flatten(1))
    assert dh.iterations == 10
    assert set(dh.rule_usage) == set(VECTOR_RULES)
    assert dh.corpus >= dh.queued_seeds  # the coverage keep rule read M2's neurons on vectors


def test_the_report_says_n_a_for_ssim_on_vectors(tabular, tmp_path, capsys):
    """SSIM exists for images only: the page's tables say n/a for vectors, as the terminal does,
    never a count of 0."""
    import re

    report = tmp_path / "report"
    assert main(_args(tabular, "report.sqlite", "--fidelity", "linf:0.3", "--report", str(report))) == 0
    capsys.readouterr()
    page = next(report.glob("*.html")).read_text(encoding="utf-8")
    head = page[page.index("Regression faults found"):]
    table = head[:head.index("</table>")]
    cells = re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", table, flags=re.S)
    column = cells.index("#URF at SSIM &gt;= 0.99")
    width = len(cells) // 2
    assert cells[column + width].strip() == "n/a"
