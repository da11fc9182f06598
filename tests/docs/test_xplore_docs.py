"""The README's DeepXplore section: its Python example runs, and it documents every CLI option."""

from helpers.docs import run_python_examples, section, undocumented_options

HEADING = "## DeepXplore: inputs on which models disagree"


def test_python_example_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    run_python_examples(section(HEADING), "the README's DeepXplore section")
    out = capsys.readouterr().out
    assert "difference-inducing inputs" in out and "'target': None" in out
    assert (tmp_path / "xplore-found.npz").is_file()


def test_every_cli_option_is_documented():
    missing = undocumented_options("xplore", section(HEADING))
    assert not missing, f"options not in the README's DeepXplore section: {missing}"
