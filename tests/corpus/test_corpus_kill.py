"""The corpus survives a kill at any point of an add, and two writers at once.

A child process adds to a corpus and is stopped with SIGKILL at each point of the add: while a
shard's bytes are half written, before a shard's rename, between two shards, before and after
the manifest's rename. Afterwards the corpus opens, reads back whole, and holds the old entries,
or the old ones and all the new ones, never a part; a later add and prune still work.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import numpy as np

from deepfault.corpus import Corpus, Provenance, entry_ids

SHAPE = (2, 2)

#: The child: pauses (and says so) at the point named by argv[2] of an add of 4 entries written
#: as 2 shards of 2 (SHARD_BYTES made small), so that the parent can kill it there.
CHILD = r"""
import os, sys, time
from pathlib import Path
import numpy as np
import deepfault.corpus.corpus as corpus_module
from deepfault.corpus import Corpus, Provenance

folder, point = sys.argv[1], sys.argv[2]
corpus_module.SHARD_BYTES = 2 * 4 * 4  # two inputs of 2x2 float32 per shard

def pause():
    print("PAUSED", flush=True)
    time.sleep(120)

real_replace, real_write = os.replace, Path.write_bytes
shards_renamed = []

def replace(src, dst):
    name = os.path.basename(dst)
    shard = name.startswith("shard-")
    if shard and point == "before-shard-rename":
        pause()
    if name == "corpus.json" and point == "before-manifest-rename":
        pause()
    real_replace(src, dst)
    if shard:
        shards_renamed.append(name)
        if point == "between-shards" and len(shards_renamed) == 1:
            pause()
    if name == "corpus.json" and point == "after-manifest-rename":
        pause()

def write_bytes(self, data):
    if point == "half-written-shard" and ".shard-" in self.name:
        with open(self, "wb") as fh:
            fh.write(data[: len(data) // 2])
            fh.flush()
        pause()
    return real_write(self, data)

os.replace = replace
Path.write_bytes = write_bytes
x = np.arange(100, 116, dtype=np.float32).reshape(4, 2, 2)
Corpus.open(folder).add(x, np.array([0, 1, 0, 1]), Provenance("regress", "killed"))
print("DONE", flush=True)
"""

POINTS = ("half-written-shard", "before-shard-rename", "between-shards", "before-manifest-rename",
          "after-manifest-rename")

OLD = np.arange(12, dtype=np.float32).reshape(3, 2, 2)
NEW = np.arange(100, 116, dtype=np.float32).reshape(4, 2, 2)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}


def _read(corpus) -> tuple[np.ndarray, np.ndarray]:
    batches = list(corpus.batches(3))
    if not batches:
        return np.empty((0, *SHAPE), np.float32), np.empty(0, np.int64)
    return np.concatenate([b.inputs.numpy() for b in batches]), np.concatenate([b.labels for b in batches])


def test_a_kill_at_any_point_of_an_add_leaves_the_old_entries_or_all_the_new_ones(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    children = {}
    for point in POINTS:
        folder = tmp_path / point
        Corpus.create(folder, dataset="toy", input_shape=SHAPE, num_classes=2).add(
            OLD, np.array([0, 1, 0]), Provenance("run", "before"))
        children[point] = subprocess.Popen([sys.executable, str(script), str(folder), point], env=_env(),
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for point, child in children.items():
            line = child.stdout.readline()  # blocks until the child pauses (or ends)
            assert line.strip() == "PAUSED", (point, line, child.communicate(timeout=60))
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=60)
            assert child.returncode == -signal.SIGKILL
    finally:
        for child in children.values():
            if child.poll() is None:
                child.kill()
                child.wait()
    for point in POINTS:
        corpus = Corpus.open(tmp_path / point)
        inputs, labels = _read(corpus)
        assert corpus.check().ok, point
        if point == "after-manifest-rename":
            assert len(corpus) == 7, point
            np.testing.assert_array_equal(inputs, np.concatenate([OLD, NEW]))
        else:
            assert len(corpus) == 3, point  # as it was; any new shard is unlisted, so ignored
            np.testing.assert_array_equal(inputs, OLD)
            np.testing.assert_array_equal(labels, [0, 1, 0])
        check = corpus.check()
        if point in ("between-shards", "before-manifest-rename"):
            assert len(check.orphans) >= 1, point
        # the next add takes the killed add's entries whole; a prune clears what it left behind
        assert corpus.add(NEW, np.array([0, 1, 0, 1]), Provenance("regress", "again")) == \
            (0 if point == "after-manifest-rename" else 4)
        assert corpus.prune(method="nothing") == 0
        left = corpus.check()
        assert not left.orphans, (point, left)
        assert not left.temporaries, (point, left)
        assert sorted(corpus.ids().tolist()) == sorted(
            entry_ids(np.concatenate([OLD, NEW]), np.array([0, 1, 0, 0, 1, 0, 1])).tolist())


#: Each child adds ``rounds`` batches; the two children's inputs overlap by half.
WRITER = r"""
import sys
import numpy as np
from deepfault.corpus import Corpus, Provenance
folder, start = sys.argv[1], int(sys.argv[2])
corpus = Corpus.open(folder)
for i in range(start, start + 12):
    x = np.full((3, 2, 2), float(i), dtype=np.float32) + np.arange(3, dtype=np.float32)[:, None, None] / 10
    corpus.add(x, np.array([0, 1, 0]), Provenance("gate", f"writer-{start}"))
"""


def test_two_writers_at_once_leave_every_entry_once(tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    folder = tmp_path / "corpus"
    Corpus.create(folder, dataset="toy", input_shape=SHAPE, num_classes=2)
    writers = [subprocess.Popen([sys.executable, str(script), str(folder), str(start)], env=_env(),
                                stderr=subprocess.PIPE, text=True) for start in (0, 6)]
    for w in writers:
        _, err = w.communicate(timeout=300)
        assert w.returncode == 0, err
    corpus = Corpus.open(folder)
    ids = corpus.ids().tolist()
    assert len(ids) == len(set(ids)) == 18 * 3  # rounds 0..17, each 3 inputs, overlap added once
    check = corpus.check()
    assert check.ok
    assert not check.orphans


def test_a_reader_sees_the_old_manifest_while_an_add_is_killed(tmp_path):
    """A replay that started before a killed add reads the corpus as it was."""
    folder = tmp_path / "c"
    corpus = Corpus.create(folder, dataset="toy", input_shape=SHAPE, num_classes=2)
    corpus.add(OLD, np.array([0, 1, 0]), Provenance("run", "before"))
    stream = corpus.batches(2)
    first = next(stream)
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    child = subprocess.Popen([sys.executable, str(script), str(folder), "before-manifest-rename"], env=_env(),
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "PAUSED"
    finally:
        child.kill()
        child.wait()
    rest = list(stream)
    assert len(first) + sum(len(b) for b in rest) == 3
    assert len(Corpus.open(folder)) == 3
