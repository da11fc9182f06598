"""One vocabulary for every sub-command (issue 19): old spellings are errors naming the new one,
one seed parser, and the shared options exist everywhere with the same default.
"""

from __future__ import annotations

import argparse

import pytest

from deepfault.cli import build_parser, main
from deepfault.cli._common import RENAMES, check_renamed, seed_int

RENAMED = [(command, old, new) for command, table in RENAMES.items() for old, new in table.items()]


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """``{"run": parser, "coverage profile": parser, ...}``: every command that runs something."""
    out: dict[str, argparse.ArgumentParser] = {}
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        nested = [a for a in command._actions if isinstance(a, argparse._SubParsersAction)]
        if nested:
            out.update({f"{name} {n}": c for n, c in nested[0].choices.items()})
        else:
            out[name] = command
    return out


def _options(command: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {s: a for a in command._actions for s in a.option_strings}


#: Commands that compute (and can run for more than a couple of seconds).
COMPUTING = ("run", "coverage profile", "coverage measure", "coverage rank", "xplore", "gan train",
             "scenario", "regress", "repair", "train", "experiment")


@pytest.mark.parametrize(("command", "old", "new"), RENAMED)
def test_old_spelling_is_an_error_naming_the_new_one(capsys, command, old, new):
    argv = [command, *(["prune"] if command == "scenario" else []), old, "1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"deepfault: error: {old} was renamed {new} (")
    assert "see docs/cli.md" in err
    assert main([command, f"{old}=1"]) == 2  # the '=' form too
    assert f"{old} was renamed {new}" in capsys.readouterr().err


@pytest.mark.parametrize(("command", "old", "new"), RENAMED)
def test_the_new_spelling_exists_and_the_old_does_not(command, old, new):
    parsers = _subparsers(build_parser())
    options = _options(parsers[command])
    assert new in options
    assert old not in options


def test_renames_apply_to_their_command_only():
    assert check_renamed(["xplore", "--seeds", "3"]) is not None
    assert check_renamed(["xplore", "--seed", "3"]) is None  # the random seed, not a rename
    assert check_renamed(["regress", "--batch", "3"]) is not None
    assert check_renamed(["regress", "--batch-size", "3"]) is None
    assert check_renamed(["run", "--step", "3"]) is None  # not an option of run: argparse says so
    assert check_renamed(["coverage", "measure", "--transform", "raw"]) is None  # coverage keeps it
    assert check_renamed(["-q", "xplore", "--transform", "light"]) is not None
    assert check_renamed(["xplore", "--", "--step"]) is None


def test_no_abbreviations(capsys):
    """``--batch`` must not match ``--batch-size`` by its prefix."""
    assert main(["run", "--batch", "3"]) == 2
    assert "unrecognized arguments: --batch" in capsys.readouterr().err


@pytest.mark.parametrize(("text", "value"), [("0", 0), ("7", 7), ("9223372036854775807", 2**63 - 1)])
def test_seed_parser_takes_integers_from_zero(text, value):
    assert seed_int(text) == value


@pytest.mark.parametrize("text", ["-5", "-1", "1.5", "x", "", "18446744073709551615"])
def test_seed_parser_refuses_the_rest(text):
    seeds = "must be an integer from 0 to 9,223,372,036,854,775,807"
    with pytest.raises(argparse.ArgumentTypeError, match=seeds):
        seed_int(text)


@pytest.mark.parametrize("command", [c for c in _subparsers(build_parser()) if "--seed" in
                                     _options(_subparsers(build_parser())[c])])
def test_every_seed_option_is_the_one_parser(capsys, command):
    action = _options(_subparsers(build_parser())[command])["--seed"]
    assert action.type == seed_int  # the one declaration (SEED)
    argv = command.split()
    argv += ["prune"] if command == "scenario" else []
    assert main([*argv, "--seed=-5"]) == 2
    assert "--seed must be an integer from 0 to 9,223,372,036,854,775,807; got -5" in capsys.readouterr().err


@pytest.mark.parametrize("command", COMPUTING)
def test_shared_options_everywhere_with_one_default(command):
    options = _options(_subparsers(build_parser())[command])
    assert options["--threads"].default == "auto"
    assert options["--device"].default == "auto"
    assert "--no-progress" in options


def test_threads_parser(capsys):
    assert main(["run", "--threads", "0"]) == 2
    assert "--threads must be 'auto' or an integer from 1 to 1,024; got 0" in capsys.readouterr().err
    assert main(["run", "--threads", "many"]) == 2
    assert "--threads must be 'auto' or an integer from 1 to 1,024; got 'many'" in capsys.readouterr().err


def test_xplore_takes_repeated_and_comma_separated_models():
    args = build_parser().parse_args(["xplore", "--model", "a.h5", "--model", "b.h5,c.h5"])
    assert args.models == ["a.h5", "b.h5", "c.h5"]
