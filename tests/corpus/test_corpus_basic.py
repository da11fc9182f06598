"""The corpus's basic contract: create, add (deduplicated by content), stream, prune."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from deepfault.corpus import Corpus, Provenance, RegressionCorpus, entry_ids
from deepfault.errors import DeepFaultError

SHAPE = (1, 3, 3)


def _inputs(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, *SHAPE), dtype=np.float32)


def _new(tmp_path, num_classes: int | None = 4) -> RegressionCorpus:
    return Corpus.create(tmp_path / "corpus", dataset="digits", input_shape=SHAPE, num_classes=num_classes)


def _all(corpus: RegressionCorpus, batch_size: int = 1000):
    batches = list(corpus.batches(batch_size))
    if not batches:
        return np.empty((0, *SHAPE), np.float32), np.empty(0, np.int64), np.empty(0, "<U64"), ()
    return (torch.cat([b.inputs for b in batches]).numpy(), np.concatenate([b.labels for b in batches]),
            np.concatenate([b.ids for b in batches]), sum((b.provenance for b in batches), ()))


PROV = Provenance("regress", "drfuzz-seed0", ("m1.pt", "m2.onnx"))


def test_corpus_is_the_regression_corpus():
    assert Corpus is RegressionCorpus


def test_ids_are_sha256_of_label_then_float32_bytes():
    x = _inputs(3)
    y = np.array([0, 1, 2])
    expected = [hashlib.sha256(np.int64(label).astype("<i8").tobytes() + row.astype("<f4").tobytes())
                .hexdigest() for row, label in zip(x, y, strict=True)]
    assert entry_ids(x, y).tolist() == expected
    assert entry_ids(x.astype(np.float64), y).tolist() == expected  # stored as float32: same content


def test_add_then_read_back_in_order(tmp_path):
    corpus = _new(tmp_path)
    x, y = _inputs(7), np.array([0, 1, 2, 3, 0, 1, 2])
    assert corpus.add(x, y, PROV) == 7
    assert len(corpus) == 7
    assert corpus.dataset == "digits"
    assert corpus.input_shape == SHAPE
    inputs, labels, ids, provenance = _all(corpus)
    np.testing.assert_array_equal(inputs, x)
    np.testing.assert_array_equal(labels, y)
    assert labels.dtype == np.int64
    assert ids.tolist() == entry_ids(x, y).tolist()
    assert {(p.method, p.run, p.models) for p in provenance} == {
        ("regress", "drfuzz-seed0", ("m1.pt", "m2.onnx"))}
    assert all(p.time for p in provenance)


def test_tensor_inputs_are_taken(tmp_path):
    corpus = _new(tmp_path)
    assert corpus.add(torch.from_numpy(_inputs(2)), torch.tensor([1, 2]), PROV) == 2


def test_duplicates_are_skipped_within_and_across_adds(tmp_path):
    corpus = _new(tmp_path)
    x = _inputs(4)
    assert corpus.add(np.concatenate([x, x[:2]]), np.array([0, 1, 2, 3, 0, 1]), PROV) == 4
    assert corpus.add(x, np.array([0, 1, 2, 3]), PROV) == 0
    assert len(corpus.manifest.shards) == 1  # nothing new: no shard written
    # the same input with another expected label is another entry
    assert corpus.add(x[:1], np.array([3]), Provenance("xplore", "run-2")) == 1
    assert len(corpus) == 5


@pytest.mark.parametrize("batch_size", [1, 2, 3, 5, 64])
def test_batches_are_passes_of_the_batch_size_across_shards(tmp_path, batch_size):
    corpus = _new(tmp_path)
    x = _inputs(11)
    y = np.arange(11) % 4
    for start, stop in ((0, 4), (4, 5), (5, 11)):
        corpus.add(x[start:stop], y[start:stop], Provenance("run", f"r{start}"))
    sizes = [len(b) for b in corpus.batches(batch_size)]
    assert sizes == [batch_size] * (11 // batch_size) + ([11 % batch_size] if 11 % batch_size else [])
    inputs, labels, _, provenance = _all(corpus, batch_size)
    np.testing.assert_array_equal(inputs, x)
    np.testing.assert_array_equal(labels, y)
    assert [p.run for p in provenance] == ["r0"] * 4 + ["r4"] + ["r5"] * 6


def test_a_second_object_sees_another_writers_entries(tmp_path):
    first = _new(tmp_path)
    second = Corpus.open(tmp_path / "corpus")
    first.add(_inputs(3), np.array([0, 1, 2]), PROV)
    assert second.add(_inputs(3), np.array([0, 1, 2]), PROV) == 0  # deduplicated against the disk
    assert len(second) == 3


def test_open_create_makes_once_then_opens(tmp_path):
    path = tmp_path / "new" / "corpus"
    made = Corpus.open(path, create=True, dataset="digits", input_shape=SHAPE, num_classes=4)
    made.add(_inputs(2), np.array([0, 1]), PROV)
    again = Corpus.open(path, create=True, dataset="digits", input_shape=SHAPE, num_classes=4)
    assert len(again) == 2


def test_prune_by_method_ids_and_time(tmp_path):
    corpus = _new(tmp_path)
    x = _inputs(6)
    corpus.add(x[:3], np.array([0, 1, 2]), Provenance("regress", "a", time="2026-01-01T00:00:00+00:00"))
    corpus.add(x[3:], np.array([0, 1, 2]), Provenance("xplore", "b", time="2026-03-01T00:00:00+00:00"))
    assert corpus.prune(method="nothing") == 0
    assert corpus.prune(before="2026-02-01") == 3
    assert [p.method for p in _all(corpus)[3]] == ["xplore"] * 3
    one = corpus.ids()[1]
    assert corpus.prune(ids=[one[:12]]) == 1
    assert one not in corpus.ids().tolist()
    assert len(corpus) == 2
    np.testing.assert_array_equal(_all(corpus)[0], x[[3, 5]])
    assert corpus.prune(method="xplore") == 2
    assert len(corpus) == 0
    assert list(corpus.batches(4)) == []
    names = sorted(p.name for p in (tmp_path / "corpus").iterdir())
    assert names == [".lock", ".readers", "corpus.json"]  # every dropped shard removed


def test_prune_needs_a_criterion(tmp_path):
    corpus = _new(tmp_path)
    with pytest.raises(DeepFaultError, match="needs what to delete"):
        corpus.prune()


def test_a_large_add_is_split_and_a_replay_reads_one_shard_at_a_time(tmp_path, monkeypatch):
    import deepfault.corpus.corpus as module

    monkeypatch.setattr(module, "SHARD_BYTES", 3 * 9 * 4)  # three 1x3x3 float32 inputs a shard
    corpus = _new(tmp_path)
    x, y = _inputs(12), np.arange(12) % 4
    assert corpus.add(x, y, PROV) == 12
    assert [s.count for s in corpus.manifest.shards] == [3, 3, 3, 3]
    reads: list[str] = []
    real = module.read_shard
    monkeypatch.setattr(module, "read_shard", lambda folder, record, shape: reads.append(record.name)
                        or real(folder, record, shape))
    stream = corpus.batches(2)
    assert len(next(stream)) == 2
    assert len(reads) == 1
    second = next(stream)  # shard 0's last entry, then shard 1's first
    assert len(reads) == 2
    np.testing.assert_array_equal(second.inputs.numpy(), x[2:4])
    assert sum(len(b) for b in stream) == 8
    assert len(reads) == 4


def test_a_prune_during_a_replay_leaves_the_replay_its_shards(tmp_path):
    corpus = _new(tmp_path)
    x = _inputs(4)
    corpus.add(x[:2], np.array([0, 1]), Provenance("xplore", "a"))
    corpus.add(x[2:], np.array([2, 3]), Provenance("run", "b"))
    stream = corpus.batches(1)
    first = next(stream)  # the replay holds the readers' lock from here to its end
    assert Corpus.open(corpus.path).prune(method="run") == 2
    dropped = Corpus.open(corpus.path).check().orphans
    assert len(dropped) == 1  # kept on disk while the replay reads
    rest = list(stream)
    np.testing.assert_array_equal(torch.cat([first.inputs, *(b.inputs for b in rest)]).numpy(), x)
    assert Corpus.open(corpus.path).prune(method="nothing") == 0  # no replay now: the file goes
    assert Corpus.open(corpus.path).check().orphans == ()
    assert len(Corpus.open(corpus.path)) == 2


@pytest.mark.parametrize("batch_size", [1, 3, 7, 100])
def test_where_asks_once_per_add_and_equals_asking_each_entry(tmp_path, batch_size):
    corpus = _new(tmp_path)
    other = Provenance("xplore", "run-1", ("a.pt", "b.pt"))
    corpus.add(_inputs(5, 1), np.arange(5) % 4, PROV)
    corpus.add(_inputs(4, 2), np.arange(4) % 4, other)
    asked = []

    def is_xplore(p):
        asked.append(p)
        return p.method == "xplore"

    for batch in corpus.batches(batch_size):
        got = batch.where(is_xplore)
        assert got.dtype == bool
        np.testing.assert_array_equal(got, [p.method == "xplore" for p in batch.provenance])
    assert len(asked) < 9 or batch_size == 1  # a run per shard piece, not an entry each
