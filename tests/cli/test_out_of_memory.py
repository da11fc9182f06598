"""Running out of memory is one line that says what to lower (issue 26), whichever allocator
reports it; any other error is not dressed up as one."""

from __future__ import annotations

import pytest

import deepfault.cli.run as run_cli
from deepfault.cli import main, out_of_memory_line


def _raising(err):
    def command(args):
        raise err
    return command


@pytest.mark.parametrize("err", [
    RuntimeError("[enforce fail at alloc_cpu.cpp:121] data. DefaultCPUAllocator: not enough memory: "
                 "you tried to allocate 12884901888 bytes.\nmore lines of the C++ trace"),
    RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    MemoryError(),
])
def test_out_of_memory_is_one_line_naming_the_batch_size(err, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(run_cli, "_cmd_run", _raising(err))
    assert main(["run", "--batch-size", "256", "--out", str(tmp_path / "r.json")]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("deepfault: error: out of memory (")
    assert "lower --batch-size (it is 256)" in lines[0]
    assert not (tmp_path / "r.json").exists()


def test_another_runtime_error_is_not_called_out_of_memory(monkeypatch, tmp_path):
    err = RuntimeError("mat1 and mat2 shapes cannot be multiplied")
    monkeypatch.setattr(run_cli, "_cmd_run", _raising(err))
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        main(["run", "--out", str(tmp_path / "r.json")])


def test_the_line_for_a_command_without_a_batch_size():
    class Args:
        device = "cpu"

    line = out_of_memory_line(MemoryError(), Args())
    assert line is not None
    assert "use fewer or smaller inputs" in line
