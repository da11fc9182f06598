"""The README's DeepXplore section: its Python example runs, and it documents every CLI option."""

import re

import torch

from readme_sections import Section

DOC = Section('## DeepXplore: inputs on which models disagree')


def test_python_example_runs(tmp_path, monkeypatch, capsys):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert blocks, "the README's DeepXplore section has no Python example"
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
    assert not missing, f"options not in the README's DeepXplore section: {missing}"
