"""core.guard and errors.failure_line from Python: the checks the command line runs before any
work, on a plain namespace of settings (issue 40: the preflight is engine logic)."""

from __future__ import annotations

import errno
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from deepfault.core.guard import Output, check_paths, check_values, inputs, report_folder, sibling
from deepfault.errors import DeepFaultError, failure_line


def test_values_refuse_a_non_finite_number_quoting_what_was_typed():
    args = SimpleNamespace(lr=math.inf, argv=["deepfault", "train", "--lr", "inf"])
    with pytest.raises(DeepFaultError, match=r"--lr must be a finite number; got 'inf'"):
        check_values(args, {"lr": "--lr"})
    check_values(SimpleNamespace(lr=0.1), {"lr": "--lr"})


def test_an_output_that_is_an_input_is_refused_before_any_work(tmp_path):
    model = tmp_path / "m.pt"
    model.write_bytes(b"x")
    args = SimpleNamespace(model=str(model))
    assert ("--model", str(model)) in inputs(args, {"model": "--model"})
    with pytest.raises(DeepFaultError, match="--out"):
        check_paths(args, {"model": "--model"}, [Output("--out", model)])
    check_paths(args, {"model": "--model"}, [Output("--out", tmp_path / "r.json")])


def test_siblings_and_the_report_folder_are_worked_out_once():
    assert sibling(Path("r.json"), ".npz") == Path("r.npz")
    assert sibling(None, ".npz") is None
    assert report_folder("results/x.sqlite") == Path("results/x-report")


def test_failure_line_explains_user_errors_and_leaves_bugs_alone():
    assert failure_line(DeepFaultError("--k must be at least 1; got 0")) == "--k must be at least 1; got 0"
    full = OSError(errno.ENOSPC, "No space left on device")
    assert failure_line(full).startswith("the disk is full (No space left on device)")
    refused = PermissionError(errno.EACCES, "Permission denied", "/root/x")
    assert failure_line(refused) == "cannot use '/root/x': Permission denied; check the path"
    line = failure_line(MemoryError(), SimpleNamespace(batch_size=64))
    assert line is not None
    assert line.startswith("out of memory (MemoryError); lower --batch-size (it is 64)")
    assert failure_line(RuntimeError("shapes cannot be multiplied")) is None
    assert failure_line(KeyError("x")) is None
