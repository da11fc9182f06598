"""``deepfault scenario`` trains M1 from the user's own class (``--arch file.py:Class
--arch-args JSON``) and derives M2, as it does from a zoo name; the pair is named after the
class, records it, and reads back (for ``regress``) with the same code named again."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from deepfault import DeepFaultError
from deepfault.cli import main
from deepfault.data import load_dataset
from deepfault.fuzz.pairs.scenarios import ScenarioContext, make_scenario
from deepfault.models import open_model
from helpers.own_models import KINDS, write_case

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_scenario_cli_trains_the_users_class_and_regress_reads_the_pair(tmp_path, capsys):
    case = write_case("mlp", tmp_path / "mlp")
    out = tmp_path / "pairs"
    argv = ["scenario", "quant-int8", *case.arch_args(), "--dataset", str(case.data), "--epochs", "1",
            "--out", str(out), "--device", "cpu", "--threads", "1", "--no-progress"]
    assert main(argv) == 0, capsys.readouterr().err
    m1, m2 = out / "quant-int8-net-TabularMLP-data-m1.pt", out / "quant-int8-net-TabularMLP-data-m2.pt"
    assert m1.is_file()
    assert m2.is_file()
    for path in (m1, m2):  # the user's code: named again to be run
        with pytest.raises(DeepFaultError, match="built from your code"):
            open_model(path)
        mf = open_model(path, arch=case.arch)
        assert mf.arch == case.arch
        assert mf.arch_kwargs == case.arch_kwargs  # --arch-args exactly: no num_classes added
    assert main(argv) == 0  # a second run reuses the cached base model of the user's class
    capsys.readouterr()
    assert main(["regress", "--m1", str(m1), "--m2", str(m2), "--arch", case.arch, "--dataset",
                 str(case.data), "--budget", "5it", "--fidelity", "linf:0.2", "--store",
                 str(tmp_path / "r.sqlite"), "--out", str(tmp_path / "f.npz"),
                 "--device", "cpu", "--threads", "1", "--no-progress"]) == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "f.json").read_text())["iterations"] == 5


def test_make_scenario_with_a_resnet_class_and_arch_kwargs(tmp_path):
    case = write_case("resnet", tmp_path / "resnet")
    data = load_dataset(str(case.data))
    r = make_scenario("quant-fp16", str(case.code) + ":ResNet", data, context=ScenarioContext(epochs=1),
                      out_dir=tmp_path / "out", arch_kwargs={"width": 2})
    assert r.arch == case.arch
    m2 = open_model(r.m2_path, arch=case.arch).model
    assert m2.fc.in_features == 4  # width 2, doubled in layer2: the arguments reached the class
    x = torch.from_numpy(data.x_test[:4])
    with torch.no_grad():
        assert np.isfinite(m2(x).numpy()).all()
    assert KINDS["resnet"].cls in r.m1_path.name


@pytest.mark.parametrize(("arch", "match"), [
    ("lenet9", "unknown architecture 'lenet9'"),
    ("net.py:", "must name a class or function"),
])
def test_scenario_refuses_a_bad_arch_while_parsing(tmp_path, capsys, arch, match):
    out = tmp_path / "o"
    assert main(["scenario", "prune", "--arch", arch, "--dataset", "digits", "--out", str(out)]) == 2
    assert match in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
