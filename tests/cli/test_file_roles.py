"""Issue 43: the guard knows every file a run reads, from each option's declared role.

Every option that names a file declares its role (input or output) where it is declared, and the
guard's list of what a run reads comes from those declarations: the user's class file behind
``--arch net.py:Net``, a surprise state inside ``--fidelity dsa::s.npz``, xplore's
``--feature-bounds``, the data set a model file names, and the files under ``--data-dir``.
"""

from __future__ import annotations

import argparse
import shutil

import numpy as np
import pytest
import torch

from deepfault.cli import build_parser
from deepfault.cli._preflight import constraint
from helpers.hardening import (
    assert_refused,
    pair,  # noqa: F401  (the shared files, as a fixture)
)

#: Options whose value is text but names no file (a name, a spec, a list of numbers).
NOT_FILES = {"--dataset-name", "--arch-args", "--input-shape", "--campaign", "--layers", "--device",
             "--experiment", "--formats", "--preset-option", "--transform", "--criteria", "--by"}
#: Metavar words that say an option's value is a path.
PATH_WORDS = ("FILE", "DIR", "STORE", ".npz", ".json", ".toml", ".xml", ".md", "MODEL", "SPEC")


def _commands(parser):
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        nested = [a for a in command._actions if isinstance(a, argparse._SubParsersAction)]
        if nested:
            yield from ((f"{name} {n}", c) for n, c in nested[0].choices.items())
        else:
            yield name, command


def test_every_option_that_names_a_path_declares_its_role():
    """A new option whose metavar says it takes a path fails here until it declares its role."""
    missing = []
    for name, command in _commands(build_parser()):
        for action in command._actions:
            if action.nargs == 0 or action.dest == "help":
                continue
            spelled = max(action.option_strings, key=len) if action.option_strings else action.dest
            metavar = str(action.metavar or "")
            if spelled in NOT_FILES or not any(w in metavar for w in PATH_WORDS):
                continue
            declared = constraint(action)
            if declared is None or declared.role not in ("input", "output"):
                missing.append(f"{name} {spelled}")
    assert missing == [], f"declare these options' role (READS/WRITES/MODEL ...): {missing}"


@pytest.fixture
def work(pair, tmp_path):  # noqa: F811
    """The digits model ``m.pt``, the lenet pair, their data set ``d.npz``, a user class file."""
    shutil.copy(pair / "digits.pt", tmp_path / "m.pt")
    for name in ("m1.pt", "m2.pt"):
        shutil.copy(pair / name, tmp_path / name)
    shutil.copy(pair / "data.npz", tmp_path / "d.npz")
    (tmp_path / "net.py").write_text("import torch\n\nclass Net(torch.nn.Linear):\n"
                                     "    def __init__(self):\n        super().__init__(64, 10)\n")
    torch.save(torch.nn.Linear(64, 10).state_dict(), tmp_path / "sd.pt")
    return tmp_path


def _refused_unchanged(argv, cwd, protected, *needles):
    before = {name: (cwd / name).read_bytes() for name in protected}
    assert_refused(argv, cwd, *needles)
    for name, data in before.items():
        assert (cwd / name).read_bytes() == data, name


@pytest.mark.parametrize(
    ("argv", "protected", "needles"),
    [
        (["coverage", "profile", "--model", "sd.pt", "--arch", "net.py:Net", "--dataset", "digits", "--out",
          "net.py"], "net.py", ("--out", "--arch", "'net.py'")),
        (["run", "--model", "sd.pt", "--arch", "net.py:Net", "--dataset", "digits", "--log", "net.py"],
         "net.py", ("--log", "--arch")),
        (["regress", "--m1", "m1.pt", "--m2", "m2.pt", "--dataset", "d.npz", "--fidelity", "dsa::s.npz",
          "--out", "s.npz"], "s.npz", ("--out (faults, .npz)", "--fidelity", "'s.npz'")),
        (["xplore", "--model", "m1.pt,m2.pt", "--dataset", "d.npz", "--feature-bounds", "b.npz", "--out",
          "b.json"], "b.npz", ("--out (its inputs, .npz)", "--feature-bounds")),
        (["run", "--model", "m.pt", "--surprise", "s.npz", "--save-inputs", "s.npz"], "s.npz",
         ("--save-inputs", "--surprise")),
    ],
    ids=["arch-class-file", "run-log-arch", "fidelity-state", "feature-bounds", "run-surprise-state"],
)
def test_a_file_read_through_any_option_is_guarded(work, argv, protected, needles):
    np.savez(work / "s.npz", x=np.zeros(1))
    np.savez(work / "b.npz", lo=np.zeros(64), hi=np.ones(64))
    _refused_unchanged(argv, work, [protected], *needles)


def test_the_data_set_a_model_file_names_is_guarded(work):
    from deepfault.models.io import load_model, save_model

    mf = load_model(work / "m1.pt")
    mf.dataset = str(work / "d.npz")
    save_model(work / "named.pt", mf)
    _refused_unchanged(["run", "--model", "named.pt", "--save-inputs", "d.npz"], work, ["d.npz"],
                       "--save-inputs", "--model", "'d.npz'")


def test_a_file_under_the_data_dir_is_guarded(work):
    data = work / "data"
    (data / "digits").mkdir(parents=True)
    (data / "digits" / "x.json").write_text("{}")
    _refused_unchanged(["run", "--data-dir", "data", "--out", "data/digits/x.json"], work,
                       ["data/digits/x.json"], "--out", "--data-dir")


def test_a_new_file_in_the_data_dir_is_allowed_by_the_guard(work):
    from deepfault.cli import _preflight

    parser = build_parser()
    args = parser.parse_args(["run", "--data-dir", str(work), "--out", str(work / "new.json")])
    args.argv = ["deepfault"]
    _preflight.check(parser, args)  # nothing to replace there: no refusal


def test_an_output_option_its_command_does_not_list_is_still_checked(work):
    """The guard's outputs are the command's list and every option declared an output: a new output
    option whose command forgot to list it is checked all the same."""
    from deepfault.cli import _common as c
    from deepfault.cli import _preflight

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=c.MODEL)
    parser.add_argument("--dump", type=c.WRITES)
    args = parser.parse_args(["--model", str(work / "m.pt"), "--dump", str(work / "m.pt")])
    options, files = _preflight._options(parser, args), _preflight._files(parser, args)
    outputs = _preflight.written(args, options, files, None)
    assert [(o.option, str(o.path)) for o in outputs] == [("--dump", str(work / "m.pt"))]
    with pytest.raises(Exception, match="--dump must be a file other than the input --model"):
        _preflight.check_paths(args, options, outputs, files)
    listed = [c.Output("--dump (its own words)", None)]  # a command that lists it is not doubled
    assert _preflight.written(args, options, files, listed) == listed


def test_a_spread_pass_declares_its_shard_state_file(work):
    """``--workers 2`` keeps finished shards in ``OUT.shards``: an output the guard checks too."""
    import os

    os.mkfifo(work / "p.npz.shards")
    assert_refused(["coverage", "profile", "--model", "m.pt", "--out", "p.npz", "--workers", "2"], work,
                   "--out (its shard state, .shards)")
