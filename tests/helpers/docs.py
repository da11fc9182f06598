"""The README and the docs pages, read like files by the tests that run their examples."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def page(name: str) -> str:
    """The text of ``docs/NAME`` (or the README for ``"README.md"``)."""
    return (README if name == "README.md" else DOCS / name).read_text(encoding="utf-8")


def section(heading: str, name: str = "README.md") -> str:
    """``heading``'s section of a page: up to the next heading of the same or a higher level."""
    lines = page(name).splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.rstrip("\n") == heading)
    level = len(heading) - len(heading.lstrip("#"))
    fenced = False
    for end in range(start + 1, len(lines)):
        line = lines[end]
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(rf"#{{1,{level}}} ", line):
            return "".join(lines[start:end])
    return "".join(lines[start:])


def run_python_examples(text: str, where: str) -> None:
    """Execute every ```python block of ``text`` in order, on one PyTorch thread."""
    import torch

    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, f"{where} has no Python example"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for block in blocks:
            exec(compile(block, where, "exec"), {})
    finally:
        torch.set_num_threads(threads)


def undocumented_options(command: str, text: str) -> list[str]:
    """The ``--options`` of ``deepfault COMMAND`` that ``text`` never mentions as `--option`."""
    from deepfault.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    options = {s for a in sub._actions for s in a.option_strings if s.startswith("--") and s != "--help"}
    return sorted(o for o in options if f"`{o}" not in text)
