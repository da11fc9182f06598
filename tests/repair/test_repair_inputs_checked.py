"""``repair`` reads its input files through checked conversions (issue 30): each damaged array
is one line naming it, never a traceback, and an xplore file whose vote has no model is
refused instead of labelling every input class 0."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from deepfault.cli import main
from deepfault.errors import DeepFaultError
from deepfault.models import ModelFile, build_model, save_model
from deepfault.repair.inputs import read_inputs
from deepfault.repair.labels import majority_vote

F = 6


def _run_file(**change):
    x = np.random.default_rng(0).random((F, 1, 8, 8), dtype=np.float32)
    arrays = dict(synthesized=x, originals=x, labels=np.arange(F) % 10, test_index=np.arange(F))
    return {**arrays, **change}


def _xplore_file(**change):
    x = np.random.default_rng(0).random((F, 1, 8, 8), dtype=np.float32)
    arrays = dict(inputs=x, predictions=np.stack([np.arange(F) % 10, (np.arange(F) + 1) % 10], 1),
                  model_names=np.array(["a", "b"]), common_class=np.zeros(F, np.int64),
                  seed_index=np.arange(F))
    return {**arrays, **change}


def _regress_file(**change):
    x = np.random.default_rng(0).random((F, 1, 8, 8), dtype=np.float32)
    arrays = dict(inputs=x, seed_index=np.arange(F), label=np.arange(F) % 10, m1_pred=np.arange(F) % 10,
                  m2_pred=(np.arange(F) + 1) % 10)
    return {**arrays, **change}


CASES = [
    ("strings as inputs", _run_file(synthesized=np.array(["a"] * F)), "'synthesized' must be numbers"),
    ("one number as inputs", _xplore_file(inputs=np.float32(3.0)), "'inputs' must be (inputs, ...)"),
    ("NaN inputs", _regress_file(inputs=np.full((F, 1, 8, 8), np.nan, np.float32)),
     "'inputs' must be finite"),
    ("text labels", _run_file(labels=np.array(["x"] * F)), "'labels' must be integers; got dtype <U1"),
    ("fractional labels", _regress_file(label=np.full(F, 2.5)), "'label' must be integers"),
    ("NaN seeds", _run_file(test_index=np.full(F, np.nan)), "'test_index' must be integers"),
    ("negative labels", _regress_file(m1_pred=-np.ones(F, np.int64)), "'m1_pred' must be integers >= 0"),
    ("0-d predictions", _xplore_file(predictions=np.int64(3)), "'predictions' must be (6, models)"),
    ("0-d names", _xplore_file(model_names=np.array("ab")), "'model_names' must be a list of names"),
    ("numeric names", _xplore_file(model_names=np.array([1, 2])), "'model_names' must be a list of names"),
    ("no vote model", _xplore_file(predictions=np.zeros((F, 0), np.int64), model_names=np.array([], "<U1")),
     "'predictions' must be at least one model's predictions"),
    ("names against columns", _xplore_file(model_names=np.array(["a"])),
     "2 models' predictions but 1 model_names"),
    ("short seeds", _xplore_file(seed_index=np.arange(F - 1)), "'seed_index' must be (6,), one per input"),
]


@pytest.mark.parametrize(("arrays", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_damaged_array_is_one_line_naming_it(tmp_path, arrays, message):
    path = tmp_path / "in.npz"
    np.savez(path, **arrays)
    with pytest.raises(DeepFaultError) as err:
        read_inputs(path)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_a_vote_of_no_model_is_refused_not_class_zero():
    """Today: every input labelled 0 (then fine-tuned on)."""
    with pytest.raises(DeepFaultError, match="majority vote of no model"):
        majority_vote(np.zeros((4, 0), np.int64))
    labels, tied = majority_vote(np.zeros((0, 0), np.int64))  # no inputs: nothing to label
    assert len(labels) == len(tied) == 0


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    torch.manual_seed(0)
    net = build_model("digits_mlp", hidden=[12, 10])
    return save_model(tmp_path_factory.mktemp("m") / "m.pt",
                      ModelFile(net.eval(), "digits_mlp", {"hidden": [12, 10]}, dataset="digits",
                                bounds=(0.0, 1.0)))


@pytest.mark.parametrize(("arrays", "message"), [
    (_xplore_file(predictions=np.zeros((F, 0), np.int64), model_names=np.array([], "<U1")),
     "at least one model's predictions"),
    (_run_file(labels=np.full(F, "7")), "'labels' must be integers"),
], ids=["no vote model", "text labels"])
def test_repair_cli_refuses_in_one_line(tmp_path, capsys, model, arrays, message):
    path = tmp_path / "in.npz"
    np.savez(path, **arrays)
    out = tmp_path / "r.json"
    code = main(["repair", str(path), "--model", str(model), "--out", str(out), "--epochs", "1",
                 "--baselines", "none", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert err.count("\n") == 1
    assert "Traceback" not in err
    assert not out.exists()
    assert not out.with_suffix(".pt").exists()


@pytest.mark.parametrize(("arrays", "message"), [
    (_xplore_file(predictions=np.full((F, 2), 99)),
     "array 'predictions' must hold classes 0 to 9 of 'digits'; got 99"),
    (_xplore_file(common_class=np.full(F, 12)), "array 'common_class' must hold classes 0 to 9"),
    (_regress_file(m1_pred=np.full(F, 10)), "array 'm1_pred' must hold classes 0 to 9 of 'digits'; got 10"),
    (_regress_file(m2_pred=np.full(F, 10)), "array 'm2_pred' must hold classes 0 to 9"),
    (_run_file(labels=np.full(F, 10)), "array 'labels' must hold classes 0 to 9"),
    (_run_file(labels=np.ones(F, bool)), "'labels' must be integers; got dtype bool"),
    (_regress_file(label=np.zeros(F, bool)), "'label' must be integers; got dtype bool"),
], ids=["xplore predictions", "common class", "m1 predictions", "m2 predictions", "run labels",
        "boolean labels", "boolean regress labels"])
def test_repair_refuses_classes_outside_the_data_set(tmp_path, capsys, model, arrays, message):
    """Before issue 43: out-of-range votes were an IndexError, out-of-range M1/M2 predictions and
    boolean labels were fine-tuned on."""
    path = tmp_path / "in.npz"
    np.savez(path, **arrays)
    out = tmp_path / "r.json"
    code = main(["repair", str(path), "--model", str(model), "--out", str(out), "--epochs", "1",
                 "--baselines", "none", "--no-progress", "--ties", "seed"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err
    assert err.count("\n") == 1
    assert not out.exists()
