"""A command's result document and its artifacts written as one unit (:func:`save_result`),
and ``deepfault inspect --input-shape`` read by the library (:func:`input_shape`)."""

import json
from dataclasses import dataclass

import pytest

from deepfault.core.outcome import Outcome
from deepfault.core.runtime import Runtime
from deepfault.errors import DeepFaultError
from deepfault.experiment.inspection import input_shape
from deepfault.experiment.saving import save_result


@dataclass(frozen=True)
class _Config:
    seed: int = 3

    def to_dict(self) -> dict:
        return {"seed": self.seed}


@dataclass(frozen=True)
class _Found(Outcome):
    def summary(self) -> str:
        return "found"

    def payload(self) -> dict:
        return {"found": 2}


def test_the_document_holds_the_records_the_payload_and_the_envelope(tmp_path):
    out = tmp_path / "r.json"
    saved = save_result(_Found(), out, command="probe", config=_Config(), runtime=Runtime(threads=2),
                        argv=["deepfault", "probe"], records={"model": {"name": "m"}})
    assert saved is not None
    assert saved.paths == (out,)
    document = json.loads(out.read_text())
    assert (document["model"], document["found"], document["seed"]) == ({"name": "m"}, 2, 3)
    assert document["config"] == {"seed": 3}
    assert save_result(_Found(), None, command="probe", config=_Config(), runtime=Runtime()) is None


def test_an_input_shape_is_read_and_checked_against_the_memory():
    assert input_shape("1,28,28") == (1, 28, 28)
    assert input_shape(None) is None
    assert input_shape("") is None
    for bad in ("0,3", "1,2,3,4,5", "a", "70000"):
        with pytest.raises(DeepFaultError, match="--input-shape must be 1 to 4"):
            input_shape(bad)
    with pytest.raises(DeepFaultError, match="needs"):
        input_shape("65536,65536,65536")
