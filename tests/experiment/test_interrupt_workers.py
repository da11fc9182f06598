"""Issue 30: Ctrl-C in the first seconds of ``experiment --workers 2`` ends with one line.

A terminal's Ctrl-C goes to the whole process group, workers included: a worker that got it while
starting died with a traceback of its own, and the pool's manager thread then failed on the jobs
the main process had cancelled (``InvalidStateError``). The workers now start with SIGINT blocked
and the pool is stopped from the main process alone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from deepfault.experiment.executors import get_executor
from helpers.hardening import tiny_grid_toml

TOML = tiny_grid_toml(classes=(0, 1, 2, 3), approaches=("ochiai", "random"), inputs_per_class=2,
                      random_repetitions=2, models=("m", "n"))


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(c) for c in text.split()]


def _slow(seconds):
    time.sleep(seconds)
    return seconds


def test_an_interrupted_pool_stops_its_workers_and_cancels_the_rest_without_a_traceback(capfd):
    pool = get_executor("process", workers=2)
    timer = threading.Timer(3.0, os.kill, (os.getpid(), signal.SIGINT))  # Ctrl-C while the pool waits
    started = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            list(pool.map(_slow, [30.0] * 6))
    finally:
        timer.cancel()
    assert time.monotonic() - started < 25, "the workers were waited for, not stopped"
    assert "InvalidStateError" not in capfd.readouterr().err


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs /proc to find the workers")
def test_ctrl_c_while_the_workers_start_is_one_line(tmp_path):
    (tmp_path / "g.toml").write_text(TOML)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "deepfault", "experiment", "--config", "g.toml", "--store",
                             "s.sqlite", "--workers", "2", "--no-progress"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if len(_children(proc.pid)) >= 3:  # the resource tracker and the two workers
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    time.sleep(0.3)  # the workers are importing deepfault and torch
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    _, err = proc.communicate(timeout=120)
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("deepfault: training")
             and "is at chance" not in line]  # the grid's one-epoch model: warned of, rightly
    assert proc.returncode == 130, err
    assert len(lines) == 1, err  # no worker's traceback, no InvalidStateError
    assert lines[0].startswith("deepfault: interrupted"), err
