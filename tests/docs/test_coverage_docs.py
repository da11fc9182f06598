"""The coverage section's Python example runs as written (the README's coverage section)."""

import re

from helpers.docs import README, run_python_examples, section

HEADING = "## Coverage criteria"


def test_coverage_python_example_runs(tmp_path, monkeypatch, capsys):
    assert len(re.findall(r"```python\n", section(HEADING))) == 1
    monkeypatch.chdir(tmp_path)
    run_python_examples(section(HEADING), "the README's coverage section")
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("52 [")  # LeNet-1's DeepXplore neurons
    assert [line.split()[0] for line in out[1:7]] == [
        "nac(threshold=0)", "kmnc(sections=10)", "nbc(scale=0)", "snac(scale=0)", "tknc(top_k=1)",
        "tknp(top_k=1)",
    ]
    assert "kept; kmnc" in out[7] and "APFD" in out[8]
    assert (tmp_path / "lenet1-profile.npz").is_file()


def test_the_figures_the_section_shows_exist():
    for name in re.findall(r"\]\((benchmarks/results/[^)]+\.png)\)", section(HEADING)):
        assert (README.parent / name).is_file(), name
