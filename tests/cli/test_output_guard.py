"""Issue 30: no output replaces an input of its own run, a special file, or fails on its temporary name.

Every case runs the CLI in-process and is refused by the preflight, before any work: exit 2, one
line naming both options and the path, nothing created, and the input's bytes unchanged.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from deepfault import checks
from deepfault._io import temporary_name_overhead
from helpers.hardening import (
    assert_refused,
    cli,
    pair,  # noqa: F401  (the shared files, as a fixture)
)


@pytest.fixture
def work(pair, tmp_path):  # noqa: F811
    """A folder with the digits model ``m.pt``, the lenet pair ``m1.pt``/``m2.pt``, their data set
    ``d.npz`` and a found-inputs file ``f.npz``; the CLI runs in it."""
    shutil.copy(pair / "digits.pt", tmp_path / "m.pt")
    for name in ("m1.pt", "m2.pt"):
        shutil.copy(pair / name, tmp_path / name)
    shutil.copy(pair / "data.npz", tmp_path / "d.npz")
    np.savez(tmp_path / "f.npz", x=np.zeros((2, 1, 8, 8), np.float32))
    return tmp_path


def _refused_unchanged(argv, cwd, protected, *needles):
    before = {name: (cwd / name).read_bytes() for name in protected}
    line = assert_refused(argv, cwd, *needles)
    for name, data in before.items():
        assert (cwd / name).read_bytes() == data, name
    return line


@pytest.mark.parametrize(
    ("argv", "protected", "needles"),
    [
        # the default --save-model is --out with .pt: m.pt, the model being repaired
        (["repair", "f.npz", "--model", "m.pt", "--out", "m.json"], "m.pt",
         ("--save-model", "--model", "'m.pt'")),
        # xplore's inputs go beside --out as .npz: the data set
        (["xplore", "--model", "m1.pt,m2.pt", "--dataset", "d.npz", "--out", "d.json"], "d.npz",
         ("--out (its inputs, .npz)", "--dataset", "'d.npz'")),
        (["coverage", "profile", "--model", "m.pt", "--out", "m.pt"], "m.pt", ("--out", "--model", "'m.pt'")),
        (["coverage", "surprise", "--model", "m.pt", "--out", "m.pt"], "m.pt", ("--out", "--model")),
        (["run", "--model", "m1.pt", "--dataset", "d.npz", "--save-inputs", "d.npz"], "d.npz",
         ("--save-inputs", "--dataset", "'d.npz'")),
        (["train", "--arch", "digits_mlp", "--dataset", "d.npz", "--out", "d.npz"], "d.npz",
         ("--out", "--dataset", "'d.npz'")),
        (["run", "--model", "m.pt", "--log", "m.pt"], "m.pt", ("--log", "--model", "'m.pt'")),
        (["repair", "f.npz", "--model", "m.pt", "--save-model", "f.npz"], "f.npz",
         ("--save-model", "INPUTS.npz", "'f.npz'")),
        (["regress", "--m1", "m1.pt", "--m2", "m2.pt", "--dataset", "d.npz", "--budget", "5it", "--out",
          "d.npz"], "d.npz", ("--out (faults, .npz)", "--dataset", "'d.npz'")),
    ],
    ids=["repair-default-save-model", "xplore-sibling-npz", "profile-model", "surprise-model",
         "run-save-inputs-dataset", "train-out-dataset", "run-log-model", "repair-save-model-inputs",
         "regress-out-dataset"],
)
def test_an_output_that_names_an_input_is_refused(work, argv, protected, needles):
    _refused_unchanged(argv, work, [protected], *needles)


def test_an_output_that_is_a_symlink_to_an_input_is_refused(work):
    os.symlink("m.pt", work / "link.npz")
    _refused_unchanged(["coverage", "profile", "--model", "m.pt", "--out", "link.npz"], work, ["m.pt"],
                       "--out", "--model", "'link.npz'")


def test_an_output_that_is_a_hard_link_to_an_input_is_refused(work):
    os.link(work / "m.pt", work / "hard.npz")
    _refused_unchanged(["coverage", "profile", "--model", "m.pt", "--out", "hard.npz"], work, ["m.pt"],
                       "--out", "--model")


def test_an_input_reached_through_a_symlink_is_guarded(work):
    os.symlink("m.pt", work / "alias.pt")
    _refused_unchanged(["coverage", "profile", "--model", "alias.pt", "--out", "m.pt"], work, ["m.pt"],
                       "--out", "--model", "'alias.pt'")


def test_two_outputs_through_a_symlink_collide(work):
    """``repair --out r.json --save-model r.pt`` where ``r.json`` links to ``r.pt``: the JSON would
    replace the repaired model."""
    os.symlink("r.pt", work / "r.json")
    assert_refused(["repair", "f.npz", "--model", "m.pt", "--out", "r.json", "--save-model", "r.pt"], work,
                   "--save-model", "--out", "'r.pt'")


def test_repair_out_pt_collides_with_its_model(work):
    assert_refused(["repair", "f.npz", "--model", "m.pt", "--out", "r.pt"], work, "--save-model", "--out")


def test_a_keras_stem_input_is_guarded(work):
    (work / "k.json").write_text("{}")
    (work / "k.h5").write_bytes(b"\x89HDF")
    _refused_unchanged(["coverage", "profile", "--model", "k", "--out", "k.h5"], work, ["k.h5", "k.json"],
                       "--out", "--model", "'k.h5'")


@pytest.mark.parametrize("kind", ["fifo", "fifo-link"])
def test_special_files_are_refused(work, kind):
    os.mkfifo(work / "pipe")
    out = "pipe"
    if kind == "fifo-link":
        os.symlink("pipe", work / "p.npz")
        out = "p.npz"
    line = assert_refused(["coverage", "profile", "--model", "m.pt", "--out", out], work, "--out", "a FIFO")
    assert "regular file" in line


@pytest.mark.parametrize(("path", "needle"),
                         [("/dev/null", "a character device"), ("/proc/self/fd/1", "/proc")])
def test_system_special_files_are_refused(path, needle):
    """Checked without the CLI: a command without the guard would, run as root, replace the
    system's ``/dev/null`` with a regular file (it happened while these tests were written)."""
    with pytest.raises(checks.DeepFaultError, match=r"--out must be a regular file or a new name") as err:
        checks.check_outputs(("--out", path))
    assert needle in str(err.value)


def test_a_fifo_log_is_refused(work):
    os.mkfifo(work / "log")
    assert_refused(["run", "--model", "m.pt", "--log", "log"], work, "--log", "a FIFO")


def test_a_name_whose_temporary_file_is_too_long_is_refused_before_work(work):
    limit = os.pathconf(work, "PC_NAME_MAX")
    longest = limit - temporary_name_overhead()
    assert 200 < longest < limit
    too_long = "p" * (longest - 4) + "x.npz"  # one byte over
    assert len(too_long) == longest + 1
    line = assert_refused(["coverage", "profile", "--model", "m.pt", "--out", too_long], work, "--out",
                          f"at most {longest} bytes")
    assert f"<a name of {longest + 1} bytes>" in line
    assert checks.check_outputs(("--out", work / ("p" * (longest - 4) + ".npz")))[0] is not None  # fits


def test_the_temporary_name_overhead_matches_atomic_path(tmp_path):
    """The overhead counts exactly what ``atomic_path`` adds (with this process's pid at most)."""
    from deepfault._io import atomic_path

    target = tmp_path / "r.json"
    with atomic_path(target) as tmp:
        added = len(tmp.name) - len(target.name)
    assert added == len("..") + len(str(os.getpid())) + len(".") + 8 + len(".tmp")
    assert added <= temporary_name_overhead() <= added - len(str(os.getpid())) + 7


def test_an_absent_input_and_a_named_data_set_guard_nothing(work):
    """``--dataset digits`` is a name and ``--surprise s.npz`` that does not exist is nothing to lose."""
    status, _, err = cli(["coverage", "profile", "--model", "m.pt", "--dataset", "digits", "--out", "digits"],
                         work)
    assert status == 0, err


def test_check_not_inputs_names_both(tmp_path):
    (tmp_path / "a").write_bytes(b"1")
    with pytest.raises(checks.DeepFaultError, match=r"--out must be a file other than the input --in"):
        checks.check_not_inputs([("--out", tmp_path / "x" / ".." / "a")], [("--in", tmp_path / "a")])
    checks.check_not_inputs([("--store", tmp_path / "a")], [("--store", tmp_path / "a")])  # resumed: itself


@pytest.mark.parametrize(("argv", "option"), [
    (["repair", "f.npz", "--model", "m.pt", "--save-model", "saved/"], "--save-model"),
    (["run", "--model", "m.pt", "--out", "r/"], "--out"),
    (["coverage", "measure", "--model", "m.pt", "--out", "c/"], "--out"),
])
def test_an_output_file_ending_in_a_slash_is_refused_not_written_without_it(work, argv, option):
    """Issue 43: ``Path('m/')`` is ``m``, so ``--save-model m/`` wrote a file named ``m``."""
    assert_refused(argv, work, f"{option} must be a file name", "ends in '/', so it names a folder")


def test_an_empty_store_is_refused_not_the_default_written_undeclared(work):
    """Issue 43 (found by the probe's sample): ``--store ''`` fell back to results/NAME.sqlite, a
    store and a models folder the guard had not seen."""
    from helpers.hardening import tiny_grid_toml

    (work / "g.toml").write_text(tiny_grid_toml())
    assert_refused(["experiment", "--config", "g.toml", "--store", "", "--no-progress"], work,
                   "--store must be a file name")  # its declaration (READS) refuses it while parsing
