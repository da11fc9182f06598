"""The DeepXplore documentation: the README section's Python example runs, and every CLI
option is documented in the README section or in ``docs/xplore.md``."""

from pathlib import Path

from readme_sections import run_python_examples, section, undocumented_options

HEADING = "## DeepXplore: inputs on which models disagree"
DOC = Path(__file__).resolve().parents[1] / "docs" / "xplore.md"


def test_python_example_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    run_python_examples(section(HEADING), "the README's DeepXplore section")
    out = capsys.readouterr().out
    assert "difference-inducing inputs" in out and "'target': None" in out
    assert (tmp_path / "xplore-found.npz").is_file()


def test_every_cli_option_is_documented():
    text = section(HEADING) + DOC.read_text(encoding="utf-8")
    missing = undocumented_options("xplore", text)
    assert not missing, f"options in neither the README's DeepXplore section nor docs/xplore.md: {missing}"
