"""What a model's declared source does beside opening it: a data set it must name, the data
root its files remember, and the deployment formats named as text."""

import pytest
import torch

from deepfault.errors import DeepFaultError
from deepfault.models import ModelFile, build_model, save_model
from deepfault.models.deploy import deployment_files
from deepfault.models.io import recorded_data_root
from deepfault.models.source import ModelSource


def _model(path, **meta):
    torch.manual_seed(0)
    save_model(path, ModelFile(build_model("digits_mlp"), "digits_mlp", {}, meta=meta))
    return path


def test_a_model_that_names_no_data_set_is_refused_where_one_is_needed(tmp_path):
    source = ModelSource(_model(tmp_path / "m.pt"))
    assert source.prepare().data is None
    with pytest.raises(DeepFaultError, match="does not name its data set; add --dataset NAME"):
        source.prepare(need_data=True)


def test_the_remembered_data_root_is_found_in_lists_and_comma_lists(tmp_path, monkeypatch):
    monkeypatch.delenv("DEEPFAULT_DATA", raising=False)
    root = tmp_path / "data"
    root.mkdir()
    plain, remembers = _model(tmp_path / "a.pt"), _model(tmp_path / "b.pt", data_dir=str(root))
    assert recorded_data_root([None, [str(plain)], f"{plain},{remembers}"]) == str(root)
    assert recorded_data_root([str(plain), object()]) is None


def test_deployment_formats_may_be_named_as_text(tmp_path):
    listed = deployment_files("m.pt", ["onnx-fp16", "onnx"], tmp_path)
    assert deployment_files("m.pt", "onnx-fp16, onnx", tmp_path) == listed
    with pytest.raises(DeepFaultError):
        deployment_files("m.pt", " , ", tmp_path)
