"""``deepfault train`` trains a class from the user's own file (issue 26): ``--arch
file.py:Class`` with ``--arch-args``, the default file name from the class, and a model file
the tool reads back without ``--trust-pickle``."""

from __future__ import annotations

import pytest

from deepfault.cli import main
from deepfault.models import open_model

NET = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, num_classes: int = 10, width: int = 16):
        super().__init__()
        self.fc1 = nn.Linear(64, width)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(width, num_classes)

    def forward(self, x):
        return self.fc2(self.relu(self.fc1(torch.flatten(x, 1))))
"""


def test_train_takes_a_class_from_a_file(tmp_path, monkeypatch, one_torch_thread):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mynet.py").write_text(NET, encoding="utf-8")
    assert main(["train", "--arch", "mynet.py:Net", "--arch-args", '{"width": 12}', "--dataset", "digits",
                 "--epochs", "1", "--no-progress"]) == 0
    written = tmp_path / "mynet-Net-digits.pt"
    assert written.is_file()
    mf = open_model(written, arch="mynet.py:Net")  # user code: named again to be run (decisions)
    assert mf.model.fc1.out_features == 12
    assert main(["inspect", str(written), "--arch", "mynet.py:Net"]) == 0


@pytest.mark.parametrize(("arch", "match"), [
    ("lenet55", "did you mean 'lenet5'"),
    ("mynet.py:", "must name a class or function"),
])
def test_train_refuses_a_bad_arch_while_parsing(arch, match, tmp_path, capsys):
    assert main(["train", "--arch", arch, "--dataset", "digits", "--out", str(tmp_path / "m.pt")]) == 2
    err = capsys.readouterr().err
    assert match in err
    assert not (tmp_path / "m.pt").exists()
