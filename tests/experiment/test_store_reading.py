"""Reading a store leaves nothing beside it: no ``-wal`` or ``-shm`` file (issue 30: ``report
STORE`` left both beside every store it only read)."""

from __future__ import annotations

import os

import pytest

from deepfault.experiment.store import ResultStore


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "s.sqlite"
    with ResultStore(path) as st, st.writer():
        st.put("exp", "method", "cell", {"value": 1})
    assert sorted(os.listdir(tmp_path)) == ["s.sqlite"]
    return path


def test_a_store_read_leaves_no_wal_or_shm(store):
    with ResultStore(store, readonly=True) as st:
        assert st.get("exp", "method", "cell").data == {"value": 1}
    ResultStore.check(store)
    assert sorted(os.listdir(store.parent)) == ["s.sqlite"]


def test_a_write_protected_store_is_still_read(store):
    os.chmod(store, 0o444)
    try:
        with ResultStore(store, readonly=True) as st:
            assert st.get("exp", "method", "cell").data == {"value": 1}
    finally:
        os.chmod(store, 0o644)


@pytest.mark.parametrize("content", [b"x", b"not a database at all, but some text a user wrote" * 3])
def test_a_file_that_is_no_sqlite_database_is_refused_and_kept(tmp_path, content):
    """SQLite took a 1-byte file for an empty database and wrote a store over it."""
    from deepfault.errors import DeepFaultError

    path = tmp_path / "afile"
    path.write_bytes(content)
    for open_it in (lambda: ResultStore(path), lambda: ResultStore.check(path),
                    lambda: ResultStore(path, readonly=True)):
        with pytest.raises(DeepFaultError, match="cannot use .* as a results store .not an SQLite file"):
            open_it()
    assert path.read_bytes() == content


def test_an_empty_file_becomes_a_store(tmp_path):
    path = tmp_path / "empty.sqlite"
    path.touch()
    with ResultStore(path) as st, st.writer():
        st.put("exp", "method", "cell", {"value": 2})
    with ResultStore(path, readonly=True) as st:
        assert st.get("exp", "method", "cell").data == {"value": 2}
