"""What PyTorch users have works wherever inputs go: tensors, arrays, Dataset, DataLoader."""

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

import deepfault as df
from deepfault.errors import DeepFaultError


class _ImageLike(Dataset):
    """Items like a torchvision data set's with a ToTensor transform: (C, H, W) tensor, int label."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], int(self.y[i])


class _NoTransform(_ImageLike):
    def __getitem__(self, i):
        return object(), 0  # a PIL image stand-in


def _data(n=30, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 1, 4, 4, generator=g), torch.randint(0, 3, (n,), generator=g)


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 3)).eval()


@pytest.mark.parametrize("form", ["tensor", "numpy", "pair", "tensordataset", "dataset", "loader"])
def test_every_form_gives_the_same_inputs_and_labels(form):
    x, y = _data()
    data = {"tensor": x, "numpy": x.numpy(), "pair": (x, y), "tensordataset": TensorDataset(x, y),
            "dataset": _ImageLike(x, y), "loader": DataLoader(TensorDataset(x, y), batch_size=7)}[form]
    got_x, got_y = df.inputs_and_labels(data, y if form in ("tensor", "numpy") else None)
    torch.testing.assert_close(got_x, x)
    assert got_y.tolist() == y.tolist()


def test_api_functions_take_a_dataloader():
    x, y = _data()
    model = _model()
    loader = DataLoader(TensorDataset(x, y), batch_size=8)
    a = df.measure_coverage(model, loader, criteria="nc")
    b = df.measure_coverage(model, x, criteria="nc")
    assert a.results == b.results
    s1 = df.compute_spectrum(model, _ImageLike(x, y), y, target_class=1)
    s2 = df.compute_spectrum(model, x, y, target_class=1)
    np.testing.assert_array_equal(s1.a_f, s2.a_f)


def test_correct_inputs_against_a_loop():
    x, y = _data(60, seed=3)
    model = _model()
    got_x, got_y, index = df.correct_inputs(model, DataLoader(TensorDataset(x, y), batch_size=9), cls=2)
    with torch.no_grad():
        pred = model(x).argmax(1)
    want = [i for i in range(len(x)) if pred[i] == y[i] and y[i] == 2]
    assert index.tolist() == want
    assert got_y.tolist() == [2] * len(want)
    torch.testing.assert_close(got_x, x[want])


def test_clear_errors():
    with pytest.raises(DeepFaultError, match="transform that returns tensors"):
        df.inputs_and_labels(_NoTransform(*_data()))
    with pytest.raises(DeepFaultError, match="needs labels"):
        df.correct_inputs(_model(), _data()[0])
    with pytest.raises(DeepFaultError, match="cls must be a class of the model"):
        df.correct_inputs(_model(), *_data(), cls=7)
    with pytest.raises(DeepFaultError, match="no inputs"):
        df.inputs_and_labels(DataLoader(TensorDataset(torch.zeros(0, 2), torch.zeros(0)), batch_size=2))
