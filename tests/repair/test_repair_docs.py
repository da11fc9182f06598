"""docs/repair.md: its Python example runs, and it mentions every option of the command."""

from __future__ import annotations

import re
from pathlib import Path

import torch

DOC = Path(__file__).resolve().parents[2] / "docs" / "repair.md"


def test_python_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    assert blocks
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for block in blocks:
            exec(compile(block, str(DOC), "exec"), {})
    finally:
        torch.set_num_threads(threads)


def test_every_option_is_documented():
    from deepfault.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices["repair"]
    options = {s for a in sub._actions for s in a.option_strings if s.startswith("--") and s != "--help"}
    text = DOC.read_text(encoding="utf-8")
    assert sorted(o for o in options if f"`{o}" not in text) == []
