"""The command line's one option set for spreading a pass: declared once (``Parallel``), the same
in every command, printed and recorded; ``experiment --ray-address`` still works."""

from __future__ import annotations

import json

import pytest

from deepfault.cli import build_parser, main
from helpers.tiny_models import digits_model_file

OPTIONS = ("--workers", "--executor", "--address", "--gpus-per-worker")


@pytest.fixture
def digits_model(tmp_path):
    return digits_model_file(tmp_path)


def _options(*command: str) -> dict:
    parser = build_parser()
    for word in command:
        parser = next(a for a in parser._actions if a.dest in ("command", "coverage_command")).choices[word]
    return {s: a for a in parser._actions for s in a.option_strings}


@pytest.mark.parametrize("command", [("run",), ("coverage", "profile"), ("coverage", "measure"),
                                     ("coverage", "rank"), ("coverage", "surprise"), ("gate",),
                                     ("experiment",)])
def test_every_spreading_command_has_the_same_options_from_one_declaration(command):
    options = _options(*command)
    first = _options("run")
    for option in OPTIONS:
        assert option in options, (command, option)
        assert options[option].help == first[option].help
        assert getattr(options[option], "field", None) == getattr(first[option], "field", None)


def test_ray_address_is_the_old_spelling_of_address():
    with pytest.warns(DeprecationWarning, match="--ray-address is deprecated; use --address"):
        args = build_parser().parse_args(["experiment", "--preset", "digits", "--ray-address", "head:6379"])
    assert args.address == "head:6379"


def test_a_spread_measure_says_where_it_ran_and_records_it(tmp_path, capsys, digits_model):
    out = tmp_path / "c.json"
    code = main(["coverage", "measure", "--model", str(digits_model), "--criteria", "nc", "--out", str(out),
                 "--executor", "serial", "--workers", "2", "--no-progress"])
    text, err = capsys.readouterr()
    assert code == 0, err
    assert "spread over 2 serial workers on cpu (8 shards)" in text
    assert json.loads(out.read_text())["parallel"] == {"executor": "serial", "workers": 2, "shards": 8,
                                                       "devices": ["cpu"], "kept_shards": 0}
    assert not (tmp_path / "c.json.shards").exists()  # removed once the pass completed


def test_address_with_another_executor_is_one_line(tmp_path, capsys, digits_model):
    code = main(["coverage", "profile", "--model", str(digits_model), "--out", str(tmp_path / "p.npz"),
                 "--executor", "process", "--address", "head:6379"])
    _, err = capsys.readouterr()
    assert code == 2
    assert err.strip().splitlines() == [
        "deepfault: error: --address only applies to the 'ray' executor; got --executor process"]
