"""The README's DRFuzz section: its Python example runs, and it documents every CLI option."""

import re

from helpers.docs import run_python_examples, section, undocumented_options

HEADING = "## DRFuzz: regression faults of a model's new version"


def test_python_example_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    run_python_examples(section(HEADING), "the README's DRFuzz section")
    out = capsys.readouterr().out
    assert re.search(r"#RF \d+, #URF \d+, #Seed \d+, #GF \d+, stopped: budget", out), out
    assert (tmp_path / "faults.npz").is_file()


def test_every_cli_option_is_documented():
    missing = undocumented_options("regress", section(HEADING))
    assert not missing, f"options not in the README's DRFuzz section: {missing}"
