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
