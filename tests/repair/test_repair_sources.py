"""Labels from each source (files written by the real ``run``, ``xplore`` and ``regress``
commands on tiny LeNet-1 files), the majority vote with ties, and ``deepfault repair``'s CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from deepfault.cli import main
from deepfault.models import ModelFile, open_model, save_model
from deepfault.repair import label_inputs, majority_vote, read_inputs
from helpers.hardening import lenet as _lenet

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """M1, M2 (M1 with weight noise), M3 and M4 (M1 with little noise), a data set labelled by M1 and
    the inputs files the three commands write."""
    d = tmp_path_factory.mktemp("sources")
    models = {
        "m1": _lenet(0),
        "m2": _lenet(0, noise=0.3),
        "m3": _lenet(0, noise=0.02),
        "m4": _lenet(0, noise=0.04),
    }
    g = torch.Generator().manual_seed(1)
    x, xt = torch.rand(60, 1, 28, 28, generator=g), torch.rand(120, 1, 28, 28, generator=g)
    with torch.no_grad():
        y, yt = models["m1"](x).argmax(1).numpy(), models["m1"](xt).argmax(1).numpy()
    np.savez(
        d / "data.npz",
        x=x.numpy(),
        y=y,
        x_train=xt.numpy(),
        y_train=yt,
        class_names=np.array([str(i) for i in range(10)]),
    )
    meta = {"input_shape": [1, 28, 28]}
    for name, m in models.items():
        save_model(d / f"{name}.pt", ModelFile(m, "lenet1", {"num_classes": 10}, None, (0.0, 1.0), meta=meta))
    data = ["--dataset", str(d / "data.npz"), "--device", "cpu"]
    assert (
        main(
            [
                "regress",
                "--m1",
                str(d / "m1.pt"),
                "--m2",
                str(d / "m2.pt"),
                "--budget",
                "40it",
                "--inputs-per-step",
                "5",
                "--store",
                str(d / "s.sqlite"),
                "--no-progress",
                "--fidelity",
                "ssim:0.5",
                "--out",
                str(d / "faults.npz"),
                *data,
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "xplore",
                "--model",
                ",".join(str(d / f"{n}.pt") for n in ("m1", "m3", "m4")),
                "--num-seeds",
                "40",
                "--iterations",
                "5",
                "--out",
                str(d / "x.json"),
                "--no-progress",
                *data,
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "run",
                "--model",
                str(d / "m2.pt"),
                "--out",
                str(d / "r.json"),
                "--save-inputs",
                str(d / "r.npz"),
                "-q",
                "--inputs",
                "3",
                "--class",
                ",".join(map(str, sorted(set(y.tolist())))),
                *data,
            ]
        )
        == 0
    )
    return d, y


def test_labels_from_each_source(made):
    d, y = made
    run = read_inputs(d / "r.npz")
    assert run.kind == "run"
    assert len(run)
    lab = label_inputs(run)
    np.testing.assert_array_equal(lab.labels, y[run.seed_index])  # the originals' labels
    faults = read_inputs(d / "faults.npz")
    assert faults.kind == "regress"
    assert len(faults)
    np.testing.assert_array_equal(label_inputs(faults).labels, y[faults.seed_index])  # M1's = the seeds'
    xp = read_inputs(d / "x.npz")
    assert xp.kind == "xplore"
    assert xp.predictions.shape == (len(xp), 3)
    assert len(xp)
    lab = label_inputs(xp, ties="seed")
    vote, tied = majority_vote(xp.predictions)
    assert lab.ties == int(tied.sum())
    np.testing.assert_array_equal(lab.labels, np.where(tied, xp.common_class, vote))
    dropped = label_inputs(xp)
    assert len(dropped.rows) == len(xp) - lab.ties
    assert not tied[dropped.rows].any()
    named = label_inputs(xp, vote_model="m4.pt")
    np.testing.assert_array_equal(named.labels, xp.predictions[:, 2])


def test_majority_vote_with_ties():
    preds = np.array([[0, 0, 1], [0, 1, 2], [1, 1, 1], [3, 2, 2], [4, 5, 5]])
    labels, tied = majority_vote(preds)
    np.testing.assert_array_equal(labels, [0, 0, 1, 2, 5])
    np.testing.assert_array_equal(tied, [False, True, False, False, False])
    labels, tied = majority_vote(np.array([[3, 7], [2, 2]]))  # two models: a disagreement is a tie
    np.testing.assert_array_equal(tied, [True, False])
    assert labels[0] == 3


def test_cli_repairs_regression_faults(made, tmp_path, capsys):
    d, _ = made
    out = tmp_path / "rep.json"
    code = main(
        [
            "repair",
            str(d / "faults.npz"),
            "--model",
            str(d / "m2.pt"),
            "--m1",
            str(d / "m1.pt"),
            "--dataset",
            str(d / "data.npz"),
            "--epochs",
            "2",
            "--baselines",
            "random-train,bim",
            "--out",
            str(out),
            "--no-progress",
            "--device",
            "cpu",
        ]
    )
    text = capsys.readouterr().out
    assert code == 0, text
    for word in ("before", "found", "random-train", "bim", "#RF faults.npz", "held-out faults.npz"):
        assert word in text
    payload = json.loads(out.read_text())
    assert payload["tool"] == "deepfault repair"
    assert payload["provenance"]["device"] == "cpu"
    assert payload["config"]["epochs"] == 2
    assert [a["name"] for a in payload["approaches"]] == [
        "found",
        "random-train",
        "bim",
    ]
    held = payload["files"][0]["held_out"]
    assert payload["before"]["rf"]["faults.npz"] == held  # M2 gets every held-out fault wrong, M1 right
    assert not (tmp_path / "rep.html").exists()  # the page is --report DIR's
    mf = open_model(tmp_path / "rep.pt")
    assert mf.arch == "lenet1"
    assert "repair" in mf.meta


def test_cli_xplore_two_models_all_ties(made, tmp_path, capsys):
    d, _ = made
    data = ["--dataset", str(d / "data.npz"), "--device", "cpu"]
    assert (
        main(
            [
                "xplore",
                "--model",
                f"{d / 'm1.pt'},{d / 'm2.pt'}",
                "--num-seeds",
                "20",
                "--iterations",
                "3",
                "--out",
                str(tmp_path / "two.json"),
                "--no-progress",
                *data,
            ]
        )
        == 0
    )
    capsys.readouterr()
    args = [
        "repair",
        str(tmp_path / "two.npz"),
        "--model",
        str(d / "m1.pt"),
        "--out",
        str(tmp_path / "o.json"),
        "--no-progress",
        "--baselines",
        "none",
        "--epochs",
        "1",
        *data,
    ]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("deepfault: error: no labelled input left")
    assert "--ties seed" in err
    assert not (tmp_path / "o.json").exists()
    assert not (tmp_path / "o.pt").exists()
    assert main([*args, "--ties", "seed"]) == 0
    assert "ties are" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--holdout", "1.5"], "holdout"),
        (["--baselines", "nope"], "baselines must be"),
        (["--mix", "-2"], "--mix"),
        (["--ties", "coin"], "--ties"),
        (["--vote-model", "m9"], "vote model"),
    ],
)
def test_cli_bad_inputs_one_line_exit_2_nothing_written(made, tmp_path, capsys, extra, message):
    d, _ = made
    before = set(tmp_path.iterdir())
    code = main(
        [
            "repair",
            str(d / "x.npz"),
            "--model",
            str(d / "m1.pt"),
            "--dataset",
            str(d / "data.npz"),
            "--out",
            str(tmp_path / "o.json"),
            "--no-progress",
            "--device",
            "cpu",
            *extra,
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("deepfault: error:")
    assert message in err
    assert err.count("\n") == 1
    assert set(tmp_path.iterdir()) == before


def test_cli_bad_files(made, tmp_path, capsys):
    d, _ = made
    np.savez(tmp_path / "foreign.npz", a=np.zeros(3))
    cases = [tmp_path / "missing.npz", tmp_path / "foreign.npz", d / "m1.pt"]
    for path in cases:
        before = set(tmp_path.iterdir())
        code = main(
            [
                "repair",
                str(path),
                "--model",
                str(d / "m1.pt"),
                "--dataset",
                str(d / "data.npz"),
                "--out",
                str(tmp_path / "o.json"),
                "--no-progress",
            ]
        )
        err = capsys.readouterr().err
        assert code == 2, err
        assert err.startswith("deepfault: error:"), err
        assert err.count("\n") == 1, err
        assert set(tmp_path.iterdir()) == before
    code = main(
        ["repair", str(d / "r.npz"), "--model", str(tmp_path / "nope.pt"), "--out", str(tmp_path / "o.json")]
    )
    assert code == 2
    assert "does not exist" in capsys.readouterr().err
