"""The README is the front door: the two commands first, short, a quick start that runs, and
links that resolve."""

import re

from helpers.docs import DOCS, README, ROOT, run_python_examples


def test_readme_opens_with_the_two_make_commands():
    text = README.read_text()
    first_block = re.search(r"```bash\n(.*?)```", text, flags=re.S).group(1)
    assert [line.split()[:2] for line in first_block.strip().splitlines()] == [
        ["make", "demo"],
        ["make", "test"],
    ]
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_readme_is_a_front_door_not_a_manual():
    assert len(README.read_text().splitlines()) <= 300


def test_readme_quick_start_python_runs(capsys):
    run_python_examples(README.read_text(), "README.md")
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("Neuron(layer=")
    assert 0.0 < float(out[1]) <= 1.0


def test_every_relative_link_resolves():
    pages = [README, *DOCS.glob("*.md")]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def test_readme_says_to_activate_the_venv_before_its_commands():
    text = README.read_text()
    quick = text.split("## Quick start", 1)[1]
    assert "source .venv/bin/activate" in quick
    assert quick.index("source .venv/bin/activate") < quick.index("```bash")
