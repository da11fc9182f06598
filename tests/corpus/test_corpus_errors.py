"""Bad input to a corpus: one line naming the problem and the fix, and nothing lost."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from deepfault.corpus import Corpus, Provenance
from deepfault.errors import DeepFaultError

SHAPE = (1, 2, 2)
PROV = Provenance("xplore", "run-1", ("a.pt", "b.pt"))


@pytest.fixture
def corpus(tmp_path):
    made = Corpus.create(tmp_path / "c", dataset="digits", input_shape=SHAPE, num_classes=3)
    made.add(np.arange(12, dtype=np.float32).reshape(3, *SHAPE), np.array([0, 1, 2]), PROV)
    return made


def _one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text
    return text


def _shard(corpus):
    return corpus.path / corpus.manifest.shards[0].name


@pytest.mark.parametrize(("given", "named"), [
    ({"dataset": "mnist"}, "not for data set 'mnist'"),
    ({"input_shape": (1, 28, 28)}, "not for input shape (1, 28, 28)"),
    ({"num_classes": 10}, "not for 10 classes"),
    ({"dataset": "cifar10", "input_shape": (3, 32, 32)}, "data set 'cifar10' and input shape (3, 32, 32)"),
])
def test_a_corpus_for_another_data_set_or_shape_is_refused(corpus, given, named):
    with pytest.raises(DeepFaultError, match="was made for data set 'digits'") as err:
        Corpus.open(corpus.path, **given)
    assert named in _one_line(err)
    with pytest.raises(DeepFaultError, match="was made for"):
        Corpus.open(corpus.path, create=True, **{"dataset": "digits", "input_shape": SHAPE, **given})


def test_a_folder_with_other_files_is_refused(corpus, tmp_path):
    (corpus.path / "notes.txt").write_text("mine")
    with pytest.raises(DeepFaultError, match=r"holds files that are not a corpus's \(notes.txt\)"):
        Corpus.open(corpus.path)
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "cat.jpg").write_bytes(b"\xff")
    with pytest.raises(DeepFaultError, match=r"cat.jpg\); give a new or empty folder"):
        Corpus.create(tmp_path / "photos", dataset="digits", input_shape=SHAPE)
    assert (tmp_path / "photos" / "cat.jpg").read_bytes() == b"\xff"
    assert not (tmp_path / "photos" / "corpus.json").exists()


def test_a_sub_folder_is_another_file(corpus):
    (corpus.path / "more").mkdir()
    with pytest.raises(DeepFaultError, match=r"\(more/\)"):
        Corpus.open(corpus.path)


def test_not_a_corpus(tmp_path):
    with pytest.raises(DeepFaultError, match="does not exist"):
        Corpus.open(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DeepFaultError, match=r"is not a corpus \(no corpus.json\)"):
        Corpus.open(tmp_path / "empty")
    (tmp_path / "file").write_text("x")
    with pytest.raises(DeepFaultError, match="is a file, not a folder"):
        Corpus.create(tmp_path / "file", dataset="digits", input_shape=SHAPE)
    with pytest.raises(DeepFaultError, match="making one needs the data set"):
        Corpus.open(tmp_path / "new", create=True)


def test_creating_twice_is_refused_unless_asked(corpus):
    with pytest.raises(DeepFaultError, match="is a corpus already"):
        Corpus.create(corpus.path, dataset="digits", input_shape=SHAPE)
    assert len(Corpus.create(corpus.path, dataset="digits", input_shape=SHAPE, exist_ok=True)) == 3


def test_a_shard_of_another_size_is_damaged_at_open(corpus):
    shard = _shard(corpus)
    shard.write_bytes(shard.read_bytes()[:-10])
    damaged = r"is damaged \(\d+ bytes, the manifest says \d+\).*--damaged"
    with pytest.raises(DeepFaultError, match=damaged) as err:
        Corpus.open(corpus.path)
    _one_line(err)


def test_a_missing_shard_is_damaged(corpus):
    _shard(corpus).unlink()
    with pytest.raises(DeepFaultError, match=r"is damaged \(missing\)"):
        Corpus.open(corpus.path)


def test_a_shard_with_flipped_bytes_is_refused_before_its_entries_are_used(corpus):
    shard = _shard(corpus)
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    opened = Corpus.open(corpus.path)  # same size: found when read
    with pytest.raises(DeepFaultError, match=r"SHA-256 is not the manifest's"):
        list(opened.batches(2))
    check = opened.check()
    assert not check.ok
    assert check.damaged[0][0] == shard.name
    assert opened.prune(damaged=True) == 3  # the explicit way out: the damaged shard's entries go
    assert len(Corpus.open(corpus.path)) == 0
    assert not shard.exists()


@pytest.mark.parametrize("text", ["{", "[]", '{"deepfault_corpus": 1}'])
def test_a_damaged_manifest_is_refused(corpus, text):
    (corpus.path / "corpus.json").write_text(text)
    with pytest.raises(DeepFaultError, match=r"corpus.json is damaged .*restore the folder"):
        Corpus.open(corpus.path)


def test_a_newer_format_is_refused(corpus):
    path = corpus.path / "corpus.json"
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "deepfault_corpus": 99}))
    with pytest.raises(DeepFaultError, match="format 99, newer than .*upgrade deepfault"):
        Corpus.open(corpus.path)


@pytest.mark.parametrize(("inputs", "labels", "match"), [
    (np.zeros((2, 1, 3, 3)), np.array([0, 1]), r"shape \(N, 1, 2, 2\) of this corpus; got \(2, 1, 3, 3\)"),
    (np.full((1, *SHAPE), np.nan), np.array([0]), "must be finite"),
    (np.zeros((2, *SHAPE)), np.array([0]), "must be 2 integer labels"),
    (np.zeros((2, *SHAPE)), np.array([0.0, 1.0]), "integer labels"),
    (np.zeros((1, *SHAPE)), np.array([3]), r"labels must be >= 0 and < 3; got 3"),
    (np.zeros((1, *SHAPE)), np.array([-1]), r"got -1"),
    (np.array([["a"]]), np.array([0]), "must be numbers"),
])
def test_bad_entries_are_refused_and_nothing_is_written(corpus, inputs, labels, match):
    before = sorted(os.listdir(corpus.path))
    with pytest.raises(DeepFaultError, match=match):
        corpus.add(inputs, labels, PROV)
    assert sorted(os.listdir(corpus.path)) == before
    assert len(Corpus.open(corpus.path)) == 3


def test_add_needs_a_provenance(corpus):
    with pytest.raises(DeepFaultError, match="needs a Provenance"):
        corpus.add(np.zeros((1, *SHAPE)), np.array([0]), {"method": "x"})


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"ids": ["abc"]}, "at least 8 hex digits"),
    ({"ids": ["0" * 64]}, "matches no entry"),
    ({"before": "yesterday"}, "ISO 8601"),
])
def test_bad_prunes_delete_nothing(corpus, kwargs, match):
    with pytest.raises(DeepFaultError, match=match):
        corpus.prune(**kwargs)
    assert len(Corpus.open(corpus.path)) == 3


@pytest.mark.parametrize("size", [0, -1, 1.5, True, "2"])
def test_a_bad_batch_size_is_refused(corpus, size):
    with pytest.raises(DeepFaultError, match="batch_size must be an integer >= 1"):
        corpus.batches(size)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only folders")
def test_a_read_only_corpus_replays_and_refuses_an_add(corpus):
    for name in (".lock", ".readers"):
        (corpus.path / name).unlink()
    os.chmod(corpus.path, 0o555)
    try:
        opened = Corpus.open(corpus.path)
        assert sum(len(b) for b in opened.batches(2)) == 3
        with pytest.raises(DeepFaultError, match="cannot be written"):
            opened.add(np.ones((1, *SHAPE)), np.array([0]), PROV)
    finally:
        os.chmod(corpus.path, 0o755)


def test_provenance_is_checked():
    with pytest.raises(DeepFaultError, match="method must be a non-empty name"):
        Provenance("", "run")
    with pytest.raises(DeepFaultError, match="models must be names"):
        Provenance("run", "r", (1, 2))
    assert Provenance("run", "r", "m.pt").models == ("m.pt",)
