"""Every model the tool builds, trains or tunes is checked the way loaded models are, before the
first step (issue 43): ``train`` and ``scenario`` with the user's class (class count, a trailing
softmax, probabilities, integer outputs), ``repair`` of a black box, and a user's ``forward``
that raises (one line naming the class, the exception and its message; the traceback under
``-v``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from deepfault.core.outputs import check_model_outputs
from deepfault.data import load_dataset
from deepfault.errors import DeepFaultError, UserCodeError
from deepfault.models import train as train_module
from deepfault.models.train import TrainConfig, train_model
from helpers.hardening import assert_refused, cli
from helpers.own_models import DIGITS_NET

CLASSES = DIGITS_NET + """

class SoftmaxInForward(Net):
    def forward(self, x):
        return torch.softmax(super().forward(x), dim=1)


class TrailingSoftmax(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, 10), nn.Softmax(dim=1))

    def forward(self, x):
        return self.body(x)


class IntegerScores(Net):
    def forward(self, x):
        return (super().forward(x) * 100).long()


class Raises(Net):
    def forward(self, x):
        return {"scores": x}["logits"]


class RaisesWhileTraining(Net):
    def forward(self, x):
        if self.training:
            raise NotImplementedError("the training path is not written yet")
        return super().forward(x)
"""


@pytest.fixture
def classes(tmp_path, monkeypatch):
    """The classes above in ``net.py``, the working folder; training must never start."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "net.py").write_text(CLASSES)

    def no_training(*args, **kwargs):
        raise AssertionError("training started before the model was checked")

    monkeypatch.setattr(train_module, "fit", no_training)
    return tmp_path


def _train(cls, *extra):
    return ["train", "--arch", f"net.py:{cls}", "--dataset", "digits", "--epochs", "1", "--out", "t.pt",
            "--no-progress", *extra]


@pytest.mark.parametrize(("argv", "needles"), [
    (_train("Net", "--arch-args", '{"classes": 5}'),
     ("gives 5 scores per input but data set 'digits' has 10 classes", "build it with 10 outputs")),
    (_train("Net", "--arch-args", '{"classes": 12}'), ("gives 12 scores per input",)),
    (_train("SoftmaxInForward"), ("returns probabilities", "training needs logits")),
    (_train("TrailingSoftmax"), ("ends in a softmax", "remove the final softmax")),
    (_train("IntegerScores"), ("returns int64 outputs", "must be floating point")),
    (_train("Raises"), ("your class Raises's forward raised KeyError: 'logits'",)),
], ids=["fewer outputs", "more outputs", "softmax in forward", "trailing softmax", "integers", "raises"])
def test_train_checks_the_users_class_before_the_first_step(classes, argv, needles):
    assert_refused(argv, classes, *needles)


def test_the_python_api_refuses_the_same_before_training(classes):
    data = load_dataset("digits")
    with pytest.raises(DeepFaultError, match="ends in a softmax"):
        train_model("net.py:TrailingSoftmax", data, TrainConfig(epochs=1))


def test_a_class_that_fits_still_trains_as_before(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "net.py").write_text(CLASSES)
    data = load_dataset("digits")
    state = torch.random.get_rng_state()
    mf, result = train_model("net.py:Net", data, TrainConfig(epochs=1, seed=3))
    assert torch.equal(torch.random.get_rng_state(), state)  # the checks draw nothing from the global RNG
    again, _ = train_model("net.py:Net", data, TrainConfig(epochs=1, seed=3))
    assert result.epochs_completed == 1
    for a, b in zip(mf.model.state_dict().values(), again.model.state_dict().values(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize(("cls", "needle"), [
    ("TrailingSoftmax", "ends in a softmax"),
    ("SoftmaxInForward", "returns probabilities"),
    ("Raises", "your class Raises's forward raised KeyError"),
])
def test_a_scenario_from_a_class_the_commands_would_refuse_trains_nothing(classes, cls, needle):
    assert_refused(["scenario", "prune", "--arch", f"net.py:{cls}", "--dataset", "digits", "--epochs", "1",
                    "--out", "pair", "--no-progress"], classes, needle)


def test_a_forward_that_raises_shows_its_traceback_under_v(classes):
    status, _, err = cli(["-v", *_train("Raises")], classes)
    assert status == 2
    assert "Traceback (most recent call last)" in err
    assert 'return {"scores": x}["logits"]' in err
    assert err.strip().splitlines()[-1] == ("deepfault: error: your class Raises's forward raised KeyError: "
                                           "'logits'; fix it (run deepfault -v ... for the traceback)")


def test_a_forward_that_raises_only_while_training_is_one_line_too(tmp_path):
    (tmp_path / "net.py").write_text(CLASSES)
    assert_refused(_train("RaisesWhileTraining"), tmp_path, "your class RaisesWhileTraining's forward raised "
                   "NotImplementedError: the training path is not written yet")


def test_a_forward_that_raises_is_one_line_for_a_loaded_model_too(tmp_path):
    class Broken(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(64, 10)

        def forward(self, x):
            raise ZeroDivisionError("my bug")

    message = "your class Broken's forward raised ZeroDivisionError: my bug"
    with pytest.raises(UserCodeError, match=message) as err:
        check_model_outputs(Broken(), torch.zeros(2, 1, 8, 8))
    assert isinstance(err.value.__cause__, ZeroDivisionError)


def test_an_error_of_torch_itself_passes_through():
    """Only a user's class is named; torch's own modules raising is no user's forward."""
    bad = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    with pytest.raises(DeepFaultError, match="cannot take inputs of shape"):  # a shape error, as before
        check_model_outputs(bad, torch.zeros(2, 3))


def test_integer_outputs_of_a_loaded_model_are_refused():
    class Rounded(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(64, 10)

        def forward(self, x):
            return self.fc(x.flatten(1)).round().to(torch.int32)

    with pytest.raises(DeepFaultError, match="returns int32 outputs; class scores must be floating point"):
        check_model_outputs(Rounded(), torch.zeros(2, 1, 8, 8))


# --------------------------------------------------------------------------- repair


def _found(path, n=6):
    x = np.random.default_rng(0).random((n, 1, 8, 8), dtype=np.float32)
    np.savez(path, synthesized=x, originals=x, labels=np.arange(n) % 10, test_index=np.arange(n))


def test_repair_refuses_a_black_box_in_one_line():
    from deepfault.models.blackbox import black_box
    from deepfault.models.prepare import prepare_model
    from deepfault.repair import RepairConfig, repair

    w = np.random.default_rng(0).random((64, 10)).astype(np.float32)
    prepared = prepare_model(black_box(lambda x: x.reshape(len(x), -1) @ w, input_shape=(1, 8, 8)),
                             load_dataset("digits"))
    with pytest.raises(DeepFaultError, match="is a black box run by callable, which has none to tune"):
        repair(prepared, _found_file(), RepairConfig(epochs=1))


def _found_file():
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp()) / "found.npz"
    _found(path)
    return path


def test_repair_of_a_litert_file_is_one_line_and_writes_nothing(tmp_path):
    pytest.importorskip("ai_edge_litert")
    from helpers.tflite_files import write_dense_tflite

    g = np.random.default_rng(1)
    write_dense_tflite(tmp_path / "m.tflite", g.normal(size=(10, 64)).astype(np.float32),
                       np.zeros(10, np.float32), input_shape=(1, 8, 8))
    _found(tmp_path / "found.npz")
    assert_refused(["repair", "found.npz", "--model", "m.tflite", "--dataset", "digits", "--out", "r.json"],
                   tmp_path, "repair fine-tunes a model's weights", "is a black box run by litert")
