"""The DRFuzz documentation: its Python example runs, and it documents every CLI option."""

import re
from pathlib import Path

import torch

HEADING = "## DRFuzz: regression faults of a model's new version"
DOC = Path(__file__).resolve().parents[1] / "docs" / "drfuzz.md"


def _text() -> str:
    """The README's DRFuzz section once it is merged there, else ``docs/drfuzz.md``."""
    from readme_sections import README, section

    if README.is_file() and HEADING in README.read_text(encoding="utf-8"):
        return section(HEADING)
    return DOC.read_text(encoding="utf-8")


def test_python_example_runs(tmp_path, monkeypatch, capsys):
    blocks = re.findall(r"```python\n(.*?)```", _text(), flags=re.S)
    assert blocks, "the DRFuzz documentation has no Python example"
    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for block in blocks:
            exec(compile(block, str(DOC), "exec"), {})
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert re.search(r"#RF \d+, #URF \d+, #Seed \d+, #GF \d+, stopped: budget", out), out
    assert (tmp_path / "faults.npz").is_file()


def test_every_cli_option_is_documented():
    from deepfault.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices["regress"]
    options = {s for a in sub._actions for s in a.option_strings if s.startswith("--") and s != "--help"}
    text = _text()
    missing = sorted(o for o in options if f"`{o}" not in text)
    assert not missing, f"options not in the DRFuzz documentation: {missing}"
