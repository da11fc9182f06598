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
