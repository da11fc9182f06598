"""Issue 30: ``--report DIR`` and ``report --out DIR`` never delete anything they did not write.

Every report folder carries a manifest (``.deepfault-report.json``) of the files the report wrote; a
later report replaces exactly those, and a folder that holds anything else (the command's own store
or outputs included, even before they exist) is refused before any work: one line, exit 2.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from deepfault import DeepFaultError
from deepfault._io import REPORT_MANIFEST
from deepfault.experiment.report import write_page
from helpers.hardening import (
    assert_refused,
    cli,
    pair,  # noqa: F401  (the shared files, as a fixture)
    tiny_grid_toml,
)

TOML = tiny_grid_toml()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A real results store ``x.sqlite`` of one tiny experiment (its report can be written)."""
    d = tmp_path_factory.mktemp("store")
    (d / "g.toml").write_text(TOML)
    status, _, err = cli(["experiment", "--config", "g.toml", "--store", "x.sqlite", "--no-progress"], d)
    assert status == 0, err
    return d / "x.sqlite"


def _page(files=()):
    def render(folder):
        for name in files:
            (folder / name).write_text(name)
        return {"title": "t", "html": "<p>x</p>"}

    return render


def test_a_report_folder_lists_what_it_wrote_and_a_rewrite_replaces_only_that(tmp_path):
    write_page(tmp_path / "rep", _page(["a.png", "b.png"]))
    listed = json.loads((tmp_path / "rep" / REPORT_MANIFEST).read_text())["files"]
    assert sorted(listed) == ["a.png", "b.png", "report.html"]
    write_page(tmp_path / "rep", _page(["a.png"]))  # b.png was the report's: replaced (gone)
    assert sorted(p.name for p in (tmp_path / "rep").iterdir()) == sorted([REPORT_MANIFEST, "a.png",
                                                                            "report.html"])
    assert [p.name for p in tmp_path.iterdir()] == ["rep"]  # no temporary or old folder left


def test_the_report_of_a_store_inside_a_previous_report_folder_is_refused_and_the_store_kept(store, tmp_path):
    rep = tmp_path / "rep"
    status, _, err = cli(["report", str(store), "--out", str(rep)])
    assert status == 0, err
    shutil.copy(store, rep / "x.sqlite")
    before = (rep / "x.sqlite").read_bytes()
    line = assert_refused(["report", "rep/x.sqlite", "--out", "rep"], tmp_path, "--out", "'rep'", "x.sqlite")
    assert (rep / "x.sqlite").read_bytes() == before
    assert "STORE" in line or "lies inside" in line


def test_a_store_put_into_a_previous_report_folder_is_not_deleted_by_the_api(store, tmp_path):
    from deepfault.experiment.report import write_report

    rep = tmp_path / "rep"
    write_report(store, rep)
    shutil.copy(store, rep / "mine.sqlite")
    with pytest.raises(DeepFaultError, match="no report wrote"):
        write_report(store, rep)
    assert (rep / "mine.sqlite").read_bytes() == store.read_bytes()


def test_regress_store_inside_its_own_report_folder_is_refused_before_work(pair, tmp_path):  # noqa: F811
    for name in ("m1.pt", "m2.pt", "data.npz"):
        shutil.copy(pair / name, tmp_path / name)
    argv = ["regress", "--m1", "m1.pt", "--m2", "m2.pt", "--dataset", "data.npz", "--budget", "5it",
            "--store", "rep/s.sqlite", "--report", "rep"]
    assert_refused(argv, tmp_path, "--report", "--store", "s.sqlite")


def test_run_output_inside_its_own_report_folder_is_refused_before_work(pair, tmp_path):  # noqa: F811
    shutil.copy(pair / "digits.pt", tmp_path / "m.pt")
    assert_refused(["run", "--model", "m.pt", "--out", "rep/r.json", "--report", "rep"], tmp_path,
                   "--report", "--out", "r.json")


def test_a_report_folder_without_a_manifest_is_refused_with_its_files_kept(pair, tmp_path):  # noqa: F811
    """A folder with a report.html but no manifest (an older report, or someone's own page) is not
    known to hold only what a report wrote."""
    shutil.copy(pair / "digits.pt", tmp_path / "m.pt")
    (tmp_path / "rep").mkdir()
    (tmp_path / "rep" / "report.html").write_text("mine")
    (tmp_path / "rep" / "notes.txt").write_text("mine")
    assert_refused(["run", "--model", "m.pt", "--report", "rep"], tmp_path, "--report", "no report wrote")
    assert (tmp_path / "rep" / "notes.txt").read_text() == "mine"


def test_a_file_that_comes_into_the_folder_during_the_run_is_kept(tmp_path):
    write_page(tmp_path / "rep", _page(["a.png"]))

    def render(folder):
        (tmp_path / "rep" / "late.txt").write_text("mine")  # the user, meanwhile
        return {"title": "t", "html": "<p>x</p>"}

    with pytest.raises(DeepFaultError, match="no report wrote"):
        write_page(tmp_path / "rep", render)
    assert (tmp_path / "rep" / "late.txt").read_text() == "mine"
    assert (tmp_path / "rep" / "a.png").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep"]  # the new report's temporary removed


def test_a_report_that_is_a_symlink_loop_is_one_line(pair, tmp_path):  # noqa: F811
    shutil.copy(pair / "digits.pt", tmp_path / "m.pt")
    os.symlink("loop-b", tmp_path / "loop-a")
    os.symlink("loop-a", tmp_path / "loop-b")
    assert_refused(["run", "--model", "m.pt", "--report", "loop-a"], tmp_path, "--report", "loop")


def test_report_out_that_is_a_symlink_loop_is_one_line(tmp_path):
    """``report STORE --out LOOP`` was a RuntimeError traceback from the folder check."""
    os.symlink("loop", tmp_path / "loop")
    (tmp_path / "s.sqlite").write_bytes(b"")
    assert_refused(["report", "s.sqlite", "--out", "loop"], tmp_path, "--out", "symbolic link loop")


def test_a_report_folder_given_as_a_link_fills_the_folder_and_keeps_the_link(store, tmp_path):
    """Before issue 43: the link was replaced by a new folder, the folder it named stayed empty, and
    the old link was left behind as a ``.rep.old-...tmp`` file."""
    (tmp_path / "real").mkdir()
    (tmp_path / "rep").symlink_to(tmp_path / "real")
    for _ in range(2):  # a second report replaces the first, through the link again
        status, _, err = cli(["report", str(store), "--out", "rep"], tmp_path)
        assert status == 0, err
    assert (tmp_path / "rep").is_symlink()
    assert (tmp_path / "real" / "report.html").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["real", "rep"]
