"""Issue 30: a full disk is one clean line in every writer, and leaves no partial file, temporary,
or ``-wal``/``-shm`` beside a new store.

The atomic writers are made to fail where they make a file durable (``os.fsync``, after the bytes
are written), the SQLite store by a tiny ``PRAGMA max_page_count`` (SQLITE_FULL, what a full disk
gives).
"""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3

import numpy as np
import pytest

from deepfault import DeepFaultError
from deepfault.experiment import store as store_module
from deepfault.experiment.store import ResultStore
from helpers.hardening import (
    cli,
    files,
    pair,  # noqa: F401  (the shared files, as a fixture)
    tiny_grid_toml,
)

TOML = tiny_grid_toml()


def _full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _one_line(status, err):
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("deepfault: training")]
    assert status == 2, err
    assert len(lines) == 1, err
    assert "disk is full" in lines[0], err


@pytest.fixture
def work(pair, tmp_path):  # noqa: F811
    for name in ("m1.pt", "m2.pt", "data.npz", "digits.pt"):
        shutil.copy(pair / name, tmp_path / name)
    return tmp_path


@pytest.mark.parametrize("argv", [
    ["coverage", "profile", "--model", "m1.pt", "--dataset", "data.npz", "--out", "p.npz", "--no-progress"],
    ["xplore", "--model", "m1.pt,m2.pt", "--dataset", "data.npz", "--out", "x.json", "--num-seeds", "2",
     "--iterations", "1", "--no-surprise", "--no-progress"],
    ["run", "--model", "digits.pt", "--out", "r.json", "--report", "rep", "--no-progress"],
], ids=["atomic-file", "xplore-unit", "report-folder"])
def test_a_full_disk_in_an_atomic_writer_is_one_line_and_leaves_nothing(work, monkeypatch, argv):
    monkeypatch.setattr(os, "fsync", _full)
    before = files(work)
    status, _, err = cli(argv, work)
    _one_line(status, err)
    assert files(work) == before, sorted(files(work) - before)


def _tiny_pages(monkeypatch, pages: int):
    connect = sqlite3.connect

    def tiny(*args, **kwargs):
        db = connect(*args, **kwargs)
        db.execute(f"PRAGMA max_page_count = {pages}")
        return db

    monkeypatch.setattr(store_module.sqlite3, "connect", tiny)


def test_a_full_disk_in_a_new_store_removes_it_with_its_wal_and_shm(tmp_path, monkeypatch):
    _tiny_pages(monkeypatch, 8)
    path = tmp_path / "s.sqlite"
    with pytest.raises(DeepFaultError, match="disk is full"), ResultStore(path) as store, store.writer():  # noqa: PT012
        store.begin("e", "tiny", {}, {})
        store.put("e", "deepfault", "c", {"a": 1}, {"x": np.random.default_rng(0).random(200_000)})
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_full_disk_while_a_new_store_is_made_leaves_nothing(tmp_path, monkeypatch):
    _tiny_pages(monkeypatch, 1)
    with pytest.raises(DeepFaultError, match="disk is full"):
        ResultStore(tmp_path / "s.sqlite")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_full_disk_keeps_a_store_with_finished_cells_and_closes_it_cleanly(tmp_path, monkeypatch):
    path = tmp_path / "s.sqlite"
    _tiny_pages(monkeypatch, 16)
    with pytest.raises(DeepFaultError, match="disk is full"), ResultStore(path) as store, store.writer():  # noqa: PT012
        store.begin("e", "tiny", {}, {})
        store.put("e", "deepfault", "small", {"a": 1})
        store.put("e", "deepfault", "big", {"a": 2}, {"x": np.random.default_rng(0).random(200_000)})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.sqlite"]  # no -wal, no -shm
    monkeypatch.undo()
    with ResultStore(path, readonly=True) as store:
        assert store.done("e") == {"small"}


def test_a_full_disk_in_an_experiment_is_one_line_and_leaves_no_store(tmp_path, monkeypatch):
    (tmp_path / "g.toml").write_text(TOML)
    _tiny_pages(monkeypatch, 12)  # the schema takes 7; a cell of 200 kB finds the disk full
    monkeypatch.setattr(store_module, "_blob", lambda arrays: os.urandom(200_000))
    argv = ["experiment", "--config", "g.toml", "--store", "s.sqlite", "--no-progress"]
    status, _, err = cli(argv, tmp_path)
    _one_line(status, err)
    assert not [f for f in files(tmp_path) if f.startswith("s.sqlite")], sorted(files(tmp_path))
