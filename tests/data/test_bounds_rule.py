"""One bounds rule for the CLI and Python (issue 44, item 4): data that declares no bounds has
them inferred, said in one log line; data outside a model file's recorded range is refused
with the likely fix, the same way through ``deepfault run`` and through the API."""

import logging

import numpy as np
import pytest
import torch

from deepfault import RunConfig, run_deepfault
from deepfault.cli import main
from deepfault.data import as_dataset
from deepfault.data.bounds import check_model_range, infer_bounds
from deepfault.data.npz import load_npz
from deepfault.errors import DeepFaultError
from deepfault.models import ModelFile, build_model, save_model
from deepfault.models.prepare import prepare_model
from deepfault.xplore.search import search


def _data(scale: float, low: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Twenty 64-feature inputs from ``low`` to ``scale`` (both reached), labels 0..3."""
    x = np.linspace(low, scale, 20 * 64, dtype=np.float32).reshape(20, 64)
    return x, np.arange(20) % 4


def _model_file(path, bounds) -> str:
    torch.manual_seed(0)
    model = build_model("digits_mlp", num_classes=4)
    save_model(path, ModelFile(model, "digits_mlp", {"num_classes": 4}, bounds=bounds))
    return str(path)


def _npz(path, x, y) -> str:
    np.savez(path, x=x, y=y)  # no bounds array
    return str(path)


def test_the_rule_itself():
    assert infer_bounds([(0.1, 0.9)], "d") == (0.0, 1.0)
    assert infer_bounds([(0.0, 200.0), (3.0, 255.0)], "d") == (0.0, 255.0)
    assert infer_bounds([(-1.0, 3.0)], "d") == (-1.0, 3.0)
    assert infer_bounds([], "d") == (0.0, 1.0)
    check_model_range((0.2, 0.8), (0.0, 1.0), data_name="d")
    with pytest.raises(DeepFaultError, match=r"multiply the inputs by 255"):
        check_model_range((0.0, 1.0), (0.0, 255.0), data_name="d")
    with pytest.raises(DeepFaultError, match=r"scaled for training, into \[-1, 1\]"):
        check_model_range((0.0, 3.0), (-1.0, 1.0), data_name="d")


def test_npz_and_arrays_infer_the_same_bounds_and_say_so(tmp_path, caplog):
    x, y = _data(3.0, low=-1.0)
    caplog.set_level(logging.INFO, logger="deepfault.data.bounds")
    from_file = load_npz(_npz(tmp_path / "mine.npz", x, y))
    from_arrays = as_dataset(x, y, name="mine")
    assert from_file.bounds == from_arrays.bounds == (-1.0, 3.0)
    lines = [r.getMessage() for r in caplog.records if "declares no bounds" in r.getMessage()]
    assert len(lines) == 2
    assert lines[0] == lines[1]
    assert "data set 'mine' declares no bounds; inferred [-1, 3] from its inputs" in lines[0]


def test_cli_and_python_run_infer_the_same_bounds(tmp_path, capsys, caplog):
    x, y = _data(3.0, low=-1.0)
    model = _model_file(tmp_path / "m.pt", None)  # no recorded range: the data's inferred one is used
    data = _npz(tmp_path / "mine.npz", x, y)
    caplog.set_level(logging.INFO, logger="deepfault.data.bounds")
    code = main(["run", "--model", model, "--dataset", data, "--class", "0", "-k", "2",
                 "--out", str(tmp_path / "r.json")])
    assert code == 0, capsys.readouterr().err
    run_deepfault(prepare_model(model), (x, y), RunConfig(classes=(0,), k=2))
    inferred = [r.getMessage() for r in caplog.records if "declares no bounds" in r.getMessage()]
    assert len(inferred) == 2
    assert all("inferred [-1, 3] from its inputs" in line for line in inferred)


def test_pixels_against_a_unit_model_are_refused_in_the_cli_and_in_python(tmp_path, capsys):
    x, y = _data(255.0)
    model = _model_file(tmp_path / "m.pt", (0.0, 1.0))
    data = _npz(tmp_path / "pixels.npz", x, y)
    code = main(["run", "--model", model, "--dataset", data, "--class", "0", "-k", "2"])
    err = capsys.readouterr().err
    assert code == 2
    assert "trained on inputs in [0, 1] but data set 'pixels' ranges over [0, 255]" in err
    assert "divide the inputs by 255" in err
    with pytest.raises(DeepFaultError, match=r"ranges over \[0, 255\]; divide the inputs by 255"):
        run_deepfault(prepare_model(model), (x, y), RunConfig(classes=(0,), k=2))
    with pytest.raises(DeepFaultError, match=r"ranges over \[0, 255\]; divide the inputs by 255"):
        prepare_model(model, load_npz(data))


def test_inputs_inside_the_model_range_take_it(tmp_path):
    x, y = _data(0.5)
    model = _model_file(tmp_path / "m.pt", (0.0, 1.0))
    pm = prepare_model(model, as_dataset(x, y))
    assert pm.bounds == (0.0, 1.0)


def test_xplore_infers_bounds_and_refuses_pixels_for_a_unit_model(tmp_path):
    x, _ = _data(255.0)
    torch.manual_seed(0)
    raw = [build_model("digits_mlp", num_classes=4) for _ in range(2)]
    result = search(raw, torch.as_tensor(x[[0, 19]]))  # no recorded range: inferred from the seeds
    assert tuple(result.bounds) == (0.0, 255.0)
    prepared = [prepare_model(_model_file(tmp_path / f"m{i}.pt", (0.0, 1.0))) for i in range(2)]
    with pytest.raises(DeepFaultError, match=r"ranges over \[0, 255\]; divide the inputs by 255"):
        search(prepared, torch.as_tensor(x[[0, 19]]))
