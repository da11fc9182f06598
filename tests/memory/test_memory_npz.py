"""Loading an ``.npz`` data set costs no memory of its own (issue 26: "peak memory is set by the
batch and the number of neurons, never by the number of inputs").

``coverage profile`` and then ``coverage measure`` run through the CLI (``load_npz``, the
model's preparation, the streaming pass) in a fresh process on an uncompressed float32 file of
N = 1,024 and of 4N inputs of 12 KiB (3 x 32 x 32; 48 MiB at 4N), at a fixed batch. The meter
is the process's anonymous resident memory (``RssAnon``, polled from outside every few
milliseconds) and tracemalloc's peak (numpy's buffers, byte for byte). ``RssAnon`` and not
the peak resident set (``VmHWM``): the memory-mapped inputs are file-backed pages, which the
kernel reads in as the passes touch them and may drop at any time; they grow with the file by
design and cost no memory the system cannot take back. A copy of the inputs would be
anonymous (36 MiB more at 4N); ``test_the_meter_sees_a_copy`` plants one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import deepfault
from helpers.memory_probe import ENV

N = 1024
SHAPE = (3, 32, 32)  # 12 KiB per input
PER_INPUT = 256  # bytes per added input: labels, predictions, per-input results
SLACK = 12_000_000  # what varies between runs (glibc's heap, torch's caches)
SRC = Path(deepfault.__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists() or sys.platform != "linux",
                                reason="measures anonymous memory through Linux's /proc")

NET = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, stride=2)
        self.pool = nn.AdaptiveAvgPool2d(2)
        self.fc = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(torch.relu(self.conv(x))), 1))
"""

CHILD = """
import json, sys, tracemalloc
import numpy as np
import deepfault.data.npz as npz
from deepfault.cli import main
if sys.argv[1] == "copy":  # plant a copy of the inputs, as the loader made before
    load = npz.load_npz
    npz.load_npz = lambda *a, **k: (lambda d: d.__class__(**{**d.__dict__, "x_test": np.array(d.x_test)}))(
        load(*a, **k))
tracemalloc.start()
common = ["--model", sys.argv[3], "--arch", sys.argv[4], "--dataset", sys.argv[2], "--split", "test",
          "--device", "cpu", "--threads", "1", "--batch-size", "64", "--no-progress"]
assert main(["coverage", "profile", *common, "--out", sys.argv[5] + "/p.npz"]) == 0
assert main(["coverage", "measure", *common, "--profile", sys.argv[5] + "/p.npz", "--out",
             sys.argv[5] + "/m.json"]) == 0
print(json.dumps({"py": tracemalloc.get_traced_memory()[1]}))
"""


def _anon(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("RssAnon:"))
    except (OSError, StopIteration):
        return 0


def _run(tmp: Path, n: int, mode: str = "plain") -> dict:
    """Peak anonymous memory and tracemalloc's peak of profile + measure on ``n`` inputs."""
    data = tmp / f"d{n}.npz"
    if not data.exists():
        rng = np.random.default_rng(n)
        np.savez(data, x=rng.random((n, *SHAPE), dtype=np.float32), y=np.arange(n) % 3,
                 x_train=rng.random((4, *SHAPE), dtype=np.float32), y_train=np.arange(4) % 3)
    out = tmp / f"out-{mode}-{n}"
    out.mkdir()
    env = {**os.environ, **ENV, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, mode, str(data), str(tmp / "net.pt"),
                             f"{tmp / 'net.py'}:Net", str(out)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _anon(proc.pid))
        time.sleep(0.002)
    stdout, stderr = proc.communicate()
    assert proc.returncode == 0, stderr[-3000:]
    return {"anon": peak, **json.loads(stdout.strip().splitlines()[-1])}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("npz-memory")
    (tmp / "net.py").write_text(NET)
    sys.path.insert(0, str(tmp))
    try:
        from net import Net  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp))
        sys.modules.pop("net", None)
    torch.manual_seed(0)
    torch.save(Net().state_dict(), tmp / "net.pt")
    return tmp


@pytest.fixture(scope="module")
def peaks(files):
    return {n: _run(files, n) for n in (N, 4 * N)}


def _limit() -> int:
    return 3 * N * PER_INPUT + SLACK


def test_loading_an_npz_does_not_grow_with_its_inputs(peaks):
    for meter in ("anon", "py"):
        growth = peaks[4 * N][meter] - peaks[N][meter]
        assert growth <= _limit(), (f"{meter} peak grew by {growth / 1e6:.1f} MB from {N} to {4 * N} inputs "
                                    f"(limit {_limit() / 1e6:.1f} MB): {peaks}")


def test_the_meter_sees_a_copy(files, peaks):
    copy = _run(files, 4 * N, "copy")
    for meter in ("anon", "py"):
        assert copy[meter] - peaks[4 * N][meter] > 0.8 * 4 * N * np.prod(SHAPE) * 4, (meter, copy, peaks)
