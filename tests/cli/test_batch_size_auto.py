"""``--batch-size auto``, the analyses' default: the printed line and bad values as one line."""

from __future__ import annotations

import pytest
import torch

from deepfault.cli import main
from deepfault.core import memory
from deepfault.models import ModelFile, build_model, save_model
from helpers.float_tolerance import assert_close_two_ways


@pytest.fixture
def digits_model(tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "m.pt"
    save_model(path, ModelFile(build_model("digits_mlp", hidden=[12, 10]), "digits_mlp",
                               {"hidden": [12, 10]}, dataset="digits", bounds=(0.0, 1.0)))
    return path


def test_profile_prints_the_batch_auto_chose(tmp_path, capsys, monkeypatch, digits_model):
    monkeypatch.setattr(memory, "free_memory", lambda device="cpu": 1 << 30)
    assert main(["coverage", "profile", "--model", str(digits_model), "--out", str(tmp_path / "p.npz"),
                 "--no-progress"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("batch: ")]
    assert len(lines) == 1
    assert lines[0].startswith("batch: 1,024 inputs (auto: about ")
    assert lines[0].endswith("each, 1.0 GiB free)")


@pytest.mark.float_sensitive
def test_a_small_budget_gives_a_small_batch_and_the_same_profile(tmp_path, capsys, monkeypatch,
                                                                  digits_model):
    from deepfault.coverage import load_profile

    assert main(["coverage", "profile", "--model", str(digits_model), "--out", str(tmp_path / "a.npz"),
                 "--batch-size", "1024", "--no-progress"]) == 0
    assert "batch: " not in capsys.readouterr().out  # a given number is not announced
    monkeypatch.setattr(memory, "free_memory", lambda device="cpu": 200_000)
    assert main(["coverage", "profile", "--model", str(digits_model), "--out", str(tmp_path / "b.npz"),
                 "--no-progress"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("batch: "))
    size = int(line.split()[1].replace(",", ""))
    assert 1 <= size < 1024
    a, b = load_profile(tmp_path / "a.npz"), load_profile(tmp_path / "b.npz")
    assert a.count == b.count
    # the values: float32 sums regrouped by batch, the deepest (the logits) through fc1 (64 + 1 terms),
    # fc2 (12 + 1) and the logits (10 + 1); a minimum, maximum, mean or spread of values that each
    # move that little moves no more (their float64 sums over the inputs add nothing beside it), all
    # relative to the values' magnitude
    scale = float(max(abs(a.low).max(), abs(a.high).max()))
    for field in ("low", "high", "mean", "std"):
        assert_close_two_ways(getattr(a, field), getattr(b, field), n=65 + 13 + 11, dtype=torch.float32,
                              scale=scale, err_msg=field)


@pytest.mark.parametrize("command", [["coverage", "profile"], ["coverage", "measure"], ["run"],
                                     ["xplore", "--model", "a,b"]])
@pytest.mark.parametrize("value", ["0", "lots", "-4"])
def test_a_bad_batch_size_is_one_line(capsys, command, value):
    assert main([*command, "--batch-size", value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "--batch-size must be 'auto' or an integer from 1 to 16,777,216; got " in err
    assert value in err
