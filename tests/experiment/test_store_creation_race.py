"""Several processes creating one new store at the same moment all get a valid store (a
half-created schema once read as 'another program's SQLite database')."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[2] / "src")

OPEN = """
import sys, time
from deepfault.experiment.store import ResultStore
start = float(sys.argv[2])
while time.time() < start:
    pass
with ResultStore(sys.argv[1]) as store:
    store.experiments()
"""


def test_processes_creating_one_store_together_all_succeed(tmp_path):
    import os
    import time

    env = {**os.environ, "PYTHONPATH": SRC}
    for attempt in range(3):
        path = tmp_path / f"s{attempt}.sqlite"
        start = time.time() + 1.5  # past every process's imports
        procs = [subprocess.Popen([sys.executable, "-c", OPEN, str(path), str(start)], env=env,
                                  stderr=subprocess.PIPE, text=True) for _ in range(6)]
        errors = [p.communicate()[1] for p in procs]
        assert [p.returncode for p in procs] == [0] * 6, errors


def test_a_lock_answered_at_once_is_waited_out(tmp_path, monkeypatch):
    """SQLite answers 'database is locked' without its busy timeout in some cases (a WAL switch
    or recovery in another process); opening the store waits those out instead of refusing."""
    import sqlite3

    from deepfault.experiment import store as store_module

    real = store_module.ResultStore._set_up
    calls = []

    def flaky(self):
        calls.append(1)
        if len(calls) < 3:
            raise sqlite3.OperationalError("database is locked")
        real(self)

    monkeypatch.setattr(store_module.ResultStore, "_set_up", flaky)
    with store_module.ResultStore(tmp_path / "s.sqlite") as s:
        assert s.experiments() == []
    assert len(calls) == 3


def test_other_errors_and_a_lock_past_the_wait_are_raised():
    import sqlite3

    import pytest

    from deepfault.experiment.store import _while_locked

    calls = []

    def broken():
        calls.append(1)
        raise sqlite3.OperationalError("no such table: cells")

    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        _while_locked(broken)
    assert len(calls) == 1

    def locked():
        raise sqlite3.OperationalError("database is locked")

    with pytest.raises(sqlite3.OperationalError, match="locked"):
        _while_locked(locked, wait=0.05)
