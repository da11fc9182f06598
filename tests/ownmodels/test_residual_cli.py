"""Issue 44 as the user met it: a small residual CNN of their own (stem conv and BatchNorm, one
residual block, pooling, two Linear layers) in ``mynet.py``, run with ``--arch mynet.py:Class``.
With the paper's rule every block channel's mean is above 0 on every input: all scores tie
(0.5) and the top-k is index order, which the run now names. The default rule (``auto``: each
block neuron against its own level) gives spectra that differ across neurons and classes."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from helpers.hardening import cli

MYNET = '''
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x))))) + x)


class SmallResNet(nn.Module):
    def __init__(self, num_classes=3):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.block = Block(8)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, num_classes)

    def forward(self, x):
        x = self.pool(self.block(self.stem(x))).flatten(1)
        return self.fc2(torch.relu(self.fc1(x)))
'''


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    import importlib.util

    folder = tmp_path_factory.mktemp("mynet")
    (folder / "mynet.py").write_text(MYNET)
    spec = importlib.util.spec_from_file_location("mynet_for_test", folder / "mynet.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    model = module.SmallResNet().eval()
    x = np.random.default_rng(0).random((600, 1, 8, 8)).astype(np.float32)
    with torch.no_grad():
        for _ in range(20):  # every class predicted about as often: each class's logits centred
            z = model(torch.as_tensor(x))
            model.fc2.bias -= (z - z.mean(1, keepdim=True)).median(0).values
        y = model(torch.as_tensor(x)).argmax(1).numpy()
    y[::4] = (y[::4] + 1) % 3  # a quarter labelled otherwise: failing inputs in every class
    torch.save(model.state_dict(), folder / "m.pt")
    np.savez(folder / "d.npz", x_train=x[:400], y_train=y[:400], x=x[400:], y=y[400:],
             bounds=np.array([0.0, 1.0]))
    return folder


def _run(folder, *extra):
    argv = ["run", "--model", "m.pt", "--arch", "mynet.py:SmallResNet", "--dataset", "d.npz", "-k", "3",
            "--out", "r.json", "--no-progress", "--no-save-inputs", *extra]
    status, out, err = cli(argv, folder)
    assert status == 0, err
    return out, json.loads((folder / "r.json").read_text())


def _scores(result):
    return {c["class"]: [n["score"] for n in c["repetitions"][0]["selection"]["neurons"]]
            for c in result["classes"] if not c["no_failures"]}


def test_the_default_run_on_a_residual_cnn_of_ones_own_is_informative(folder):
    out, result = _run(folder)
    assert "warning:" not in out
    scores = _scores(result)
    assert len(scores) == 3
    assert all(len(set(s)) > 1 for s in scores.values())  # the top-k differ within each class
    assert len({tuple(s) for s in scores.values()}) == 3  # and across classes
    assert "across classes:" in out


def test_the_papers_rule_on_it_is_named_degenerate(folder):
    out, result = _run(folder, "--activity", "zero")
    assert "warning: degenerate spectra: in 3 of 3 classes" in out
    assert "warning: tied scores" in out
    assert all(set(s) == {0.5} for s in _scores(result).values())  # every Tarantula score ties
