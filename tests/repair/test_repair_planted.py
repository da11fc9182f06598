"""A planted weakness that fine-tuning on the found inputs must fix, and the held-out split."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from deepfault.data import Dataset
from deepfault.models import ModelFile, build_model, load_model, open_model, save_model
from deepfault.models.train import TrainConfig, fit
from deepfault.repair import RepairConfig, repair

# Task: x in [0, 1]^2; class 2 where x1 > 0.8, else class 0 left of x0 = 0.5 and class 1 right.
# The model never sees the top band in training, so it calls it 0 or 1: the planted weakness.


def _labels(x: np.ndarray) -> np.ndarray:
    return np.where(x[:, 1] > 0.8, 2, (x[:, 0] > 0.5).astype(int))


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    rng = np.random.default_rng(0)
    x_train = rng.uniform(0, 1, (1500, 2)).astype(np.float32)
    x_train = x_train[x_train[:, 1] <= 0.8]
    x_test = rng.uniform(0, 1, (600, 2)).astype(np.float32)
    data = Dataset("plane", x_train, _labels(x_train), x_test, _labels(x_test), (0.0, 1.0), ("0", "1", "2"))
    torch.manual_seed(0)
    model = build_model("digits_mlp", hidden=(32, 32), in_features=2, num_classes=3)
    fit(model, data.x_train, data.y_train, TrainConfig(epochs=30, lr=1e-2, val_fraction=0.0))
    d = tmp_path_factory.mktemp("planted")
    save_model(
        d / "m.pt",
        ModelFile(
            model.eval(),
            "digits_mlp",
            {"hidden": (32, 32), "in_features": 2, "num_classes": 3},
            None,
            (0.0, 1.0),
            meta={"input_shape": [2]},
        ),
    )
    # found inputs: perturbed copies of test inputs from the band, labelled with their originals'
    band = np.flatnonzero(x_test[:, 1] > 0.8)
    seeds = np.repeat(band, 3)
    noise = rng.uniform(-0.02, 0.02, (len(seeds), 2)).astype(np.float32)
    synth = np.clip(x_test[seeds] + noise, 0, 1).astype(np.float32)
    synth[:, 1] = np.maximum(synth[:, 1], 0.81)
    np.savez(
        d / "run.npz",
        synthesized=synth,
        originals=x_test[seeds],
        labels=data.y_test[seeds],
        test_index=seeds,
        pred_original=np.zeros(len(seeds), int),
        pred_synthesized=np.zeros(len(seeds), int),
        target_class=data.y_test[seeds],
        repetition=np.zeros(len(seeds), int),
    )
    return d, data


def test_planted_weakness_is_fixed_on_held_out_inputs(task):
    d, data = task
    r = repair(
        d / "m.pt",
        d / "run.npz",
        dataset=data,
        epochs=30,
        lr=1e-2,
        baselines=("random-train",),
        save_model=d / "repaired.pt",
    )
    name = "run.npz"
    assert r.before.held_out[name] < 0.2  # the model gets the band wrong
    assert r.found.after.held_out[name] > 0.9  # fine-tuning on found inputs fixes it
    assert r.approach("random-train").after.held_out[name] < 0.2  # random training inputs do not
    assert r.found.after.test_accuracy > r.before.test_accuracy + 0.1
    assert not r.found.flagged


def test_held_out_rows_and_seeds_never_seen_in_training(task):
    d, data = task
    r = repair(d / "m.pt", [d / "run.npz"], dataset=data, epochs=1, baselines=())
    train, held = r.splits["run.npz"]
    assert len(held)
    assert len(train)
    assert not set(train) & set(held)
    assert len(train) + len(held) == 3 * int((data.x_test[:, 1] > 0.8).sum())
    with np.load(d / "run.npz") as z:
        seeds = z["test_index"]
    assert not set(seeds[train]) & set(seeds[held])  # split by seed
    share = len(np.unique(seeds[held])) / len(np.unique(seeds))
    assert abs(share - 0.3) < 0.12


def test_repaired_model_reloads_and_is_deterministic(task):
    d, data = task
    a = repair(d / "m.pt", d / "run.npz", dataset=data, epochs=2, baselines=(), save_model=d / "r1.pt")
    b = repair(d / "m.pt", d / "run.npz", dataset=data, epochs=2, baselines=(), save_model=d / "r2.pt")
    m1, m2 = open_model(d / "r1.pt"), load_model(d / "r2.pt")
    assert m1.arch == "digits_mlp"
    assert m1.meta["repair"]["after"] == a.found.after.to_dict()
    for (k, v), w in zip(m1.model.state_dict().items(), m2.model.state_dict().values(), strict=True):
        assert torch.equal(v, w), k
    assert a.to_dict()["approaches"] == b.to_dict()["approaches"] or a.found.after == b.found.after


def test_original_model_untouched(task):
    d, data = task
    mf = open_model(d / "m.pt")
    before = {k: v.clone() for k, v in mf.model.state_dict().items()}
    repair(mf.model, d / "run.npz", dataset=data, epochs=1, baselines=("fgsm",))
    for k, v in mf.model.state_dict().items():
        assert torch.equal(v, before[k])
    assert all(p.requires_grad for p in mf.model.parameters())
    assert not mf.model.training


def test_config_errors():
    from deepfault.errors import DeepFaultError

    for bad, match in (
        ({"holdout": 1.0}, "holdout"),
        ({"ties": "x"}, "ties"),
        ({"baselines": ("nope",)}, "nope"),
        ({"epochs": 0}, "epochs"),
        ({"mix": -1}, "mix"),
        ({"eps": 0}, "eps"),
    ):
        with pytest.raises(DeepFaultError, match=match):
            RepairConfig(**bad).validate()


def test_a_model_outside_the_zoo_is_saved_as_torchscript(task):
    d, data = task
    module = open_model(d / "m.pt").model
    r = repair(module, d / "run.npz", dataset=data, epochs=1, baselines=(), save_model=d / "ts.pt")
    mf = open_model(d / "ts.pt")
    assert mf.arch == "torchscript"
    x = torch.as_tensor(data.x_test[:20])
    with torch.no_grad():
        torch.testing.assert_close(mf.model(x), r.model(x))


@pytest.mark.parametrize("val_fraction", [0.0, 0.25])
def test_fit_reads_parts_end_to_end_as_one_array(val_fraction):
    """Fine-tuning reads the found inputs and the mixed-in training inputs as two arrays, end
    to end, without joining them (one copy fewer at repair's peak): the trained weights equal
    those from the joined array, with the same seed."""
    gen = np.random.default_rng(4)
    a, b = gen.random((13, 6), dtype=np.float32), gen.random((9, 6), dtype=np.float32)
    y = gen.integers(0, 3, 22)
    config = TrainConfig(epochs=2, batch_size=4, lr=1e-2, val_fraction=val_fraction, seed=7)
    nets = []
    for x in ((a, b), np.concatenate([a, b])):
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
        result = fit(net, x, y, config)
        nets.append((net, result))
    for p, q in zip(nets[0][0].parameters(), nets[1][0].parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    assert nets[0][1].val_accuracy == nets[1][1].val_accuracy
