"""Issue 43: where torch writes a file (``train``, ``gan train``, ``repair --save-model``, the
deployment scenario), a write the system refuses is one line and leaves nothing partial.

The refusal is real, not a patched Python call: a file-size limit (``RLIMIT_FSIZE``, with
``SIGXFSZ`` ignored) makes the kernel refuse every write past it (``EFBIG``), in torch's C++ writer
as in Python's. Before the fix torch's own writer ended in ``RuntimeError: [enforce fail at
inline_container.cc:672]`` (and ``torch.jit.save`` to a path aborted the process).
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import shutil
import signal

import pytest
import torch
from torch import nn

from deepfault._io import write_torch
from deepfault.errors import failure_line
from deepfault.models import ModelFile, build_model, save_model
from helpers.hardening import (
    cli,
    files,
    pair,  # noqa: F401  (the shared files, as a fixture)
)


@contextlib.contextmanager
def file_size_limit(size: int):
    """Writes past ``size`` bytes fail with ``EFBIG`` in this process (both limits restored)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


def _one_line(status, err):
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("deepfault: training")]
    assert status == 2, err
    assert len(lines) == 1, err
    assert "nothing partial was kept" in lines[0], err
    assert "Traceback" not in err, err
    assert "inline_container" not in err, err


@pytest.mark.parametrize("save", [torch.save, torch.jit.save], ids=["torch.save", "torch.jit.save"])
def test_a_refused_torch_write_is_the_systems_error_and_leaves_nothing(tmp_path, save):
    module = nn.Linear(200, 200)
    obj = {"w": module.weight.detach()} if save is torch.save else torch.jit.script(module)
    with file_size_limit(4096), pytest.raises(OSError, match="File too large") as caught:
        write_torch(tmp_path / "m.pt", obj, save=save)
    assert caught.value.errno == errno.EFBIG
    assert "nothing partial was kept" in failure_line(caught.value)
    assert sorted(os.listdir(tmp_path)) == []


def test_a_full_disk_in_torch_save_is_the_disk_full_line(tmp_path, monkeypatch):
    """``ENOSPC`` from the file torch writes through is the command line's disk-full line."""
    real = open

    class Full:
        def __init__(self, fh):
            self.fh = fh

        def write(self, data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def __getattr__(self, name):
            return getattr(self.fh, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

    monkeypatch.setattr("builtins.open", lambda *a, **k: Full(real(*a, **k)) if "wb" in a else real(*a, **k))
    with pytest.raises(OSError, match="No space left") as caught:
        save_model(tmp_path / "m.pt", ModelFile(build_model("digits_mlp"), "digits_mlp"))
    monkeypatch.undo()
    assert caught.value.errno == errno.ENOSPC
    assert failure_line(caught.value).startswith("the disk is full")
    assert sorted(os.listdir(tmp_path)) == []


@pytest.fixture
def work(pair, tmp_path):  # noqa: F811
    for name in ("m1.pt", "data.npz"):
        shutil.copy(pair / name, tmp_path / name)
    return tmp_path


@pytest.mark.parametrize("argv", [
    ["train", "--arch", "digits_mlp", "--dataset", "digits", "--epochs", "1", "--out", "t.pt",
     "--no-progress"],
    ["gan", "train", "--dataset", "data.npz", "--epochs", "1", "--out", "d.pt", "--no-progress"],
], ids=["train", "gan-train"])
def test_a_refused_write_while_torch_writes_a_model_is_one_line(work, argv):
    before = files(work)
    with file_size_limit(2048):
        status, _, err = cli(argv, work)
    _one_line(status, err)
    assert files(work) == before, sorted(files(work) - before)


def test_the_deployment_scenario_writes_its_files_as_one_unit(work):
    pytest.importorskip("onnxruntime")
    argv = ["scenario", "deploy", "--model", "m1.pt", "--dataset", "data.npz", "--formats", "onnx,onnx-fp16",
            "--out", "out", "--no-progress"]
    before = files(work)
    with file_size_limit(8192):  # M1 fits; the float ONNX file does not
        status, _, err = cli(argv, work)
    _one_line(status, err)
    assert files(work) == before, sorted(files(work) - before)
    status, out, err = cli(argv, work)
    assert status == 0, err
    assert sorted(os.listdir(work / "out")) == ["deploy-m1-float.onnx", "deploy-m1-fp16.onnx",
                                               "deploy-m1-m1.pt", "deploy-m1.json"]


def test_the_deployment_scenario_refuses_a_fifo_named_like_its_output_before_any_work(work):
    (work / "out").mkdir()
    os.mkfifo(work / "out" / "deploy-m1-float.onnx")
    argv = ["scenario", "deploy", "--model", "m1.pt", "--dataset", "data.npz", "--formats", "onnx",
            "--out", "out", "--no-progress"]
    status, _, err = cli(argv, work)
    assert status == 2, err
    assert "deploy-m1-float.onnx" in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert sorted(os.listdir(work / "out")) == ["deploy-m1-float.onnx"]


def test_a_scenario_that_cannot_write_leaves_no_folder_it_made(work):
    """Found by the probe's disk angle: a scenario refused its first write but left the --out folder
    it had made (empty)."""
    argv = ["scenario", "prune", "--arch", "digits_mlp", "--dataset", "digits", "--epochs", "1", "--out",
            "sc", "--no-progress"]
    with file_size_limit(2048):
        status, _, err = cli(argv, work)
    _one_line(status, err)
    assert not (work / "sc").exists()
    (work / "kept").mkdir()  # a folder that was there before is kept, as are its files
    with file_size_limit(2048):
        status, _, err = cli([*argv[:-2], "kept", "--no-progress"], work)
    _one_line(status, err)
    assert (work / "kept").is_dir()


def test_the_queue_budget_is_refused_before_the_store_is_made(work):
    """Found by the probe: a --queue-memory too small for one input was refused after the store was
    made (a new store left behind)."""
    shutil.copy(work / "m1.pt", work / "m2.pt")
    status, _, err = cli(["regress", "--m1", "m1.pt", "--m2", "m2.pt", "--dataset", "data.npz", "--budget",
                          "3it", "--store", "s.sqlite", "--no-progress", "--queue-memory=1.5"], work)
    assert status == 2
    assert err.count("\n") == 1
    assert "queue_memory must hold at least one input" in err
    assert not (work / "s.sqlite").exists()


def test_free_memory_honours_the_address_space_limit():
    """Found by the probe: ``inspect --input-shape`` at 4 GiB passed the memory check under
    ``ulimit -v`` 2 GiB and failed in the allocator."""
    import subprocess
    import sys

    code = ("import resource; resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30)); "
            "from deepfault.core.memory import free_memory; print(free_memory())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert 0 <= int(out) < 3 << 30
