"""Where a DeepFault run's files go (:class:`RunFiles`) and the table of approaches."""

from pathlib import Path

import pytest

from deepfault.errors import DeepFaultError
from deepfault.localization.outputs import RunFiles
from deepfault.localization.selection import approach_rows, list_approaches


def test_the_inputs_go_beside_the_result_unless_named():
    assert RunFiles().paths() == (Path("deepfault-result.json"), Path("deepfault-result.npz"),
                                  Path("deepfault-result.png"), None)
    assert RunFiles("-", log="l.txt", save_inputs="s.npz").paths() == (None, Path("s.npz"), Path("s.png"),
                                                                         Path("l.txt"))
    assert RunFiles(no_save_inputs=True).paths()[1:3] == (None, None)
    assert RunFiles("-").paths() == (None, None, None, None)


def test_a_folder_or_a_bad_name_is_refused():
    with pytest.raises(DeepFaultError, match="--out"):
        RunFiles("results/").paths()
    with pytest.raises(DeepFaultError):
        RunFiles(log="")


def test_every_approach_has_a_row():
    rows = approach_rows()
    assert [r[0] for r in rows] == list_approaches()
    assert dict((r[0], r[2]) for r in rows)["random"] == "Eniser et al., FASE 2019"
