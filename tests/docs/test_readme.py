"""The README's Python example runs as written."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_python_example_runs(capsys):
    from helpers.docs import section

    # The Python API section; the other sections' examples have their own tests.
    blocks = re.findall(r"```python\n(.*?)```", section("## Python API"), flags=re.S)
    assert blocks, "the README has no Python example"
    for block in blocks:
        exec(compile(block, str(README), "exec"), {})
    out = capsys.readouterr().out
    assert "score=" in out and "'accuracy':" in out


def test_readme_opens_with_the_two_make_commands():
    text = README.read_text()
    first_block = re.search(r"```bash\n(.*?)```", text, flags=re.S).group(1)
    assert [line.split()[:2] for line in first_block.strip().splitlines()] == [
        ["make", "demo"],
        ["make", "test"],
    ]
    assert "make test" in (README.parent / ".ci" / "run").read_text()
