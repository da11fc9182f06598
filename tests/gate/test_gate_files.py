"""The files a gate reads and writes beside its models, declared once (:class:`GateFiles`)."""

import pytest

from deepfault.core.constraints import constraints
from deepfault.errors import DeepFaultError
from deepfault.gate import THRESHOLDS
from deepfault.gate.config import GateFiles


def test_the_roles_of_the_files():
    roles = {name: c.role for name, c in constraints(GateFiles).items()}
    assert roles == {"split": "input", "policy": "input", "out": "output", "junit": "output",
                     "summary": "output"}
    assert all(t in GateFiles.__dataclass_fields__["policy"].metadata["help"] for t in THRESHOLDS)


def test_a_bad_name_is_refused():
    with pytest.raises(DeepFaultError, match="junit must be a file name"):
        GateFiles(junit="a\x00b")
