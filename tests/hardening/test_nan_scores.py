"""Issue 43: no number is made of surprise scores that are no number.

A surprise state fitted on too few training traces (one input per class, a ten-input split,
classes the model never predicts) scored every input of those classes ``inf``, and ``coverage
rank`` printed an APFD made of 540 such scores of 540. Now the fit refuses (which classes, how
many traces, the fix), a state file from before is refused when read, and every consumer's
scores pass ``Surprise.finite_score``, which refuses a score that is not finite.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from deepfault import DeepFaultError
from deepfault.coverage import CoverageConfig, measure_coverage, rank_inputs
from deepfault.coverage.surprise import Surprise, fit_surprise, save_surprise, surprise_scores
from helpers.hardening import (
    assert_refused,
    pair,  # noqa: F401  (the shared files, as a fixture)
)
from helpers.tiny_models import chain_model


@pytest.fixture
def work(pair, tmp_path):  # noqa: F811
    for name in ("m1.pt", "data.npz"):
        shutil.copy(pair / name, tmp_path / name)
    return tmp_path


def test_a_fit_on_too_few_traces_per_class_is_one_line_and_writes_nothing(work):
    """The shared data set's 60 training inputs leave most of the model's 10 classes empty."""
    assert_refused(["coverage", "surprise", "--model", "m1.pt", "--dataset", "data.npz", "--out", "s.npz"],
                   work, "at least 2 training traces in each of the model's 10 classes", "class: traces 0: 0",
                   "--classes labels")


def test_one_input_per_class_is_refused_grouped_by_labels_too(work):
    data = np.load(work / "data.npz")
    np.savez(work / "ten.npz", x=data["x"], y=data["y"], x_train=data["x"][:10], y_train=np.arange(10))
    assert_refused(["coverage", "surprise", "--model", "m1.pt", "--dataset", "ten.npz", "--classes", "labels",
                    "--out", "s.npz"], work, "grouped by labels, these 10 inputs leave 10 with fewer",
                   "more inputs of every class")


@pytest.fixture(scope="module")
def thin():
    """A 3-class model, inputs, and a state without traces of the class it predicts most (as a
    file from before the fit refused one)."""
    model = chain_model(seed=11, widths=(8, 6, 5), classes=3)
    gen = torch.Generator().manual_seed(0)
    train, x = torch.randn(240, 4, generator=gen), torch.randn(70, 4, generator=gen)
    state = fit_surprise(model, train, layers=["fc2"])
    with torch.no_grad():
        pred = model(x).argmax(1).numpy()
    missing = int(np.bincount(pred, minlength=3).argmax())
    keep = state.classes != missing
    thin = Surprise(state.layers, state.sizes, state.transform, state.model_hash, state.num_classes,
                    state.ats[keep], state.classes[keep])
    return model, x, torch.as_tensor(pred), thin, int((pred == missing).sum())


def test_a_state_file_without_traces_of_a_class_is_refused_when_read(work, thin):
    _, _, _, state, _ = thin
    save_surprise(state, work / "old.npz")
    assert_refused(["coverage", "rank", "--model", "m1.pt", "--dataset", "data.npz", "--surprise", "old.npz",
                    "--by", "dsa", "--out", "r.json"], work, "old.npz", "at least 2 training traces")


@pytest.mark.parametrize("use", ["rank", "scores", "coverage"])
def test_no_consumer_makes_a_number_of_scores_that_are_no_number(thin, use):
    model, x, y, state, count = thin
    calls = {"rank": lambda: rank_inputs(model, (x, y), CoverageConfig(by="dsa", surprise=state)),
             "scores": lambda: surprise_scores(model, x, state, kinds=("dsa",)),
             "coverage": lambda: measure_coverage(model, x, CoverageConfig(criteria="dsc", surprise=state))}
    with pytest.raises(DeepFaultError, match=rf"dsa is not a number for {count} of {len(x)} inputs"):
        calls[use]()


def test_dsa_of_coinciding_traces_of_two_classes_is_refused_where_it_is_used():
    """``dist_b = 0`` (a trace of another class on the nearest one): DSA ``inf`` or ``0/0``."""
    ats = np.array([[0.0, 0.0], [0.0, 0.0], [3.0, 0.0], [9.0, 9.0]])
    state = Surprise(("l",), (2,), "raw", "x" * 64, 2, ats.astype(np.float32), np.array([0, 1, 0, 1]))
    assert np.isnan(state.score("dsa", np.zeros((1, 2)), [0])).all()  # the arithmetic, as dnn-tip's
    with pytest.raises(DeepFaultError, match="training traces of different classes coincide"):
        state.finite_score("dsa", np.array([[0.5, 0.0], [0.0, 0.0]]), [0, 0])
