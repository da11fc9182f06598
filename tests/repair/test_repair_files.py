"""The files of a repair beside its model and inputs (:class:`RepairFiles`)."""

from pathlib import Path

import pytest

from deepfault.errors import DeepFaultError
from deepfault.repair.config import RepairFiles


def test_the_repaired_model_goes_beside_the_result_unless_named():
    assert RepairFiles().paths() == (Path("repair-result.json"), Path("repair-result.pt"))
    assert RepairFiles(out="r/x.json", save_model="m.pt").paths() == (Path("r/x.json"), Path("m.pt"))
    assert RepairFiles(out="-").paths() == (None, None)
    assert RepairFiles(save_model="-").paths() == (Path("repair-result.json"), None)


def test_a_folder_is_refused():
    with pytest.raises(DeepFaultError, match="--save-model"):
        RepairFiles(save_model="models/").paths()
    with pytest.raises(DeepFaultError):
        RepairFiles(m1="")
