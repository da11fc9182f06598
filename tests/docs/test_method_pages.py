"""Each method's page: its Python example runs as written, and its command's options are all there."""

import re
import runpy

import pytest

from helpers.docs import DOCS, ROOT, page, run_python_examples, section, undocumented_options


def test_deepfault_python_api_example_runs(capsys):
    run_python_examples(section("## Python API", "deepfault.md"), "docs/deepfault.md")
    out = capsys.readouterr().out
    assert "score=" in out
    assert "'accuracy':" in out


def test_coverage_python_example_runs(tmp_path, monkeypatch, capsys):
    text = section("## Python", "coverage.md")
    assert len(re.findall(r"```python\n", text)) == 1
    monkeypatch.chdir(tmp_path)
    run_python_examples(text, "docs/coverage.md")
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("52 [")  # LeNet-1's DeepXplore neurons
    assert [line.split()[0] for line in out[1:7]] == [
        "nac(threshold=0)", "kmnc(sections=10)", "nbc(scale=0)", "snac(scale=0)", "tknc(top_k=1)",
        "tknp(top_k=1)",
    ]
    assert "kept; kmnc" in out[7]
    assert "APFD" in out[8]
    assert (tmp_path / "lenet1-profile.npz").is_file()


def test_xplore_python_example_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    run_python_examples(section("## Python", "xplore.md"), "docs/xplore.md")
    out = capsys.readouterr().out
    assert "difference-inducing inputs" in out
    assert "'target': None" in out
    assert (tmp_path / "xplore-found.npz").is_file()


def test_drfuzz_python_example_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    run_python_examples(section("## Python", "drfuzz.md"), "docs/drfuzz.md")
    out = capsys.readouterr().out
    assert re.search(r"#RF \d+, #URF \d+, #Seed \d+, #GF \d+, stopped: budget", out), out
    assert (tmp_path / "faults.npz").is_file()


@pytest.mark.parametrize(("command", "name"), [("run", "deepfault.md"), ("xplore", "xplore.md"),
                                               ("regress", "drfuzz.md"), ("gate", "gate.md")])
def test_every_option_is_on_the_method_page(command, name):
    missing = undocumented_options(command, page(name))
    assert not missing, f"options of 'deepfault {command}' not in docs/{name}: {missing}"


def test_the_cli_reference_is_the_parser():
    script = runpy.run_path(str(ROOT / "scripts" / "cli_reference.py"), run_name="cli_reference")
    BEGIN, END, markdown = script["BEGIN"], script["END"], script["markdown"]
    text = (DOCS / "cli.md").read_text()
    generated = BEGIN + text.partition(BEGIN)[2].partition(END)[0] + END
    assert generated == markdown(), "docs/cli.md is stale: run python scripts/cli_reference.py"


def test_xplore_page_names_the_fields_as_the_config_does():
    """The Python section says which XploreConfig fields the command line spells otherwise, and
    no more: the names no longer predate the command line's."""
    import dataclasses

    from deepfault.core.constraints import option_of
    from deepfault.xplore import XploreConfig

    text = " ".join(section("## Python", "xplore.md").split())
    assert "predate" not in text
    for f in dataclasses.fields(XploreConfig):
        option = option_of(XploreConfig, f.name)
        if f.metadata.get("option"):
            assert f"`{f.name}` is `{option}`" in text, f.name
