"""docs/xplore.md: its Python example runs as written, and its options list matches the CLI."""

import re
from pathlib import Path

import torch

DOC = Path(__file__).resolve().parents[1] / "docs" / "xplore.md"


def test_python_example_runs(tmp_path, monkeypatch, capsys):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert blocks, "docs/xplore.md has no Python example"
    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for block in blocks:
            exec(compile(block, str(DOC), "exec"), {})
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert "difference-inducing inputs" in out and "'target': None" in out
    assert (tmp_path / "xplore-found.npz").is_file()


def test_every_cli_option_is_documented():
    from deepfault.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices["xplore"]
    options = {s for a in sub._actions for s in a.option_strings if s.startswith("--") and s != "--help"}
    text = DOC.read_text()
    missing = sorted(o for o in options if f"`{o}" not in text)
    assert not missing, f"options not in docs/xplore.md: {missing}"
