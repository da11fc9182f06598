"""The README's sections, read like files by the tests that run their examples."""

from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def section(heading: str) -> str:
    """The README from ``heading`` to the next second-level heading."""
    text = README.read_text(encoding="utf-8")
    start = text.index(heading)
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def run_python_examples(text: str, where: str) -> None:
    """Execute every ```python block of ``text`` in order, on one PyTorch thread."""
    import re

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
