"""Issue 43: a run killed (``kill -9``: no ``finally`` runs) while it commits its unit of files
leaves temporaries; the next run of a unit in that folder removes them, and only them (the
project's own temporary names, of processes that are gone).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

from helpers.hardening import (
    cli,
    pair,  # noqa: F401  (the shared files, as a fixture)
)

#: Killed (``os._exit``: what ``kill -9`` leaves) while a writer fills the unit's result.
_KILLED_WHILE_COMMITTING = textwrap.dedent("""
    import os, sys
    from deepfault._io import atomic_path, atomic_paths
    with atomic_paths(sys.argv[1], sys.argv[2]) as (npz, doc):
        with atomic_path(doc) as inner:
            inner.write_text("{")
            os._exit(9)
""")


def test_a_rerun_removes_what_a_killed_unit_left_and_nothing_else(pair, tmp_path):  # noqa: F811
    for name in ("m1.pt", "m2.pt", "data.npz"):
        shutil.copy(pair / name, tmp_path / name)
    out = tmp_path / "out"
    out.mkdir()
    path = os.pathsep.join([os.path.abspath("src"), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    killed = subprocess.run([sys.executable, "-c", _KILLED_WHILE_COMMITTING, str(out / "x.npz"),
                             str(out / "x.json")], env=env, check=False)
    assert killed.returncode == 9
    left = sorted(os.listdir(out))
    assert len(left) == 3, left  # the unit's two, and its writer's
    assert all(name.endswith(".tmp") for name in left), left
    mine = [".deepfault-unit.notes.tmp", f".deepfault-unit.{os.getpid()}.live.tmp", "x.json.tmp"]
    for name in mine:  # not temporaries of a process that is gone: kept
        (out / name).write_text("keep")
    status, _, err = cli(["xplore", "--model", "m1.pt,m2.pt", "--dataset", "data.npz", "--out",
                          "out/x.json", "--num-seeds", "2", "--iterations", "1", "--no-surprise",
                          "--no-progress"], tmp_path)
    assert status == 0, err
    assert sorted(os.listdir(out)) == sorted([*mine, "x.json", "x.npz", "x.png"])
