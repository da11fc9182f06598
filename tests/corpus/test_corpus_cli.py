"""``--corpus DIR`` on regress, xplore and run, and ``deepfault corpus list|check|prune``, on a
tiny LeNet-1 pair (offline)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from deepfault.cli import main
from deepfault.corpus import Corpus, Provenance, entry_ids
from helpers.hardening import write_regress_pair


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """M1, M2 (M1 with weight noise), ``data.npz`` labelled by M1, and ``mixed.npz``: the same
    inputs with eight of them relabelled 7, so that M1 fails some of class 7 (DeepFault's run).
    """
    d = tmp_path_factory.mktemp("corpus-cli")
    write_regress_pair(d, 60)
    with np.load(d / "data.npz") as f:
        x, y, names = f["x"], f["y"].copy(), f["class_names"]
    y[np.flatnonzero(y != 7)[:8]] = 7
    np.savez(d / "mixed.npz", x=x, y=y, class_names=names)
    return d


def _regress(d, corpus, *extra):
    return ["regress", "--m1", str(d / "m1.pt"), "--m2", str(d / "m2.pt"), "--dataset", str(d / "data.npz"),
            "--budget", "10it", "--inputs-per-step", "5", "--threads", "1", "--store",
            str(corpus.parent / "s.sqlite"), "--no-progress", "--fidelity", "ssim:0.5", "--corpus",
            str(corpus), *extra]


def _entries(corpus):
    batches = list(Corpus.open(corpus).batches(1000))
    return (np.concatenate([b.inputs.numpy() for b in batches]), np.concatenate([b.labels for b in batches]),
            [p for b in batches for p in b.provenance])


def test_regress_adds_every_fault_with_m1s_label(files, tmp_path, capsys):
    corpus = tmp_path / "corpus"
    assert main(_regress(files, corpus)) == 0
    out = capsys.readouterr().out
    with np.load(tmp_path / "s-drfuzz-seed0-faults.npz") as f:
        inputs = np.concatenate([f["inputs"], f["initial_inputs"]])
        labels = np.concatenate([f["label"], f["initial_label"]])
    expected = set(entry_ids(inputs, labels).tolist())
    assert set(Corpus.open(corpus).ids().tolist()) == expected
    assert f"corpus {corpus}: {len(expected)} new of {len(inputs)} found ({len(expected)} entries)" in out
    _, _, provenance = _entries(corpus)
    assert {(p.method, p.run, p.models) for p in provenance} == {
        ("regress", "drfuzz-seed0", ("m1.pt", "m2.pt"))}
    assert Corpus.open(corpus).dataset == "data"
    # the same command again (the finished campaign, from the store): nothing new
    assert main(_regress(files, corpus)) == 0
    again = capsys.readouterr().out
    assert f"corpus {corpus}: 0 new of {len(inputs)} found ({len(expected)} entries)" in again


def test_xplore_adds_the_difference_inducing_inputs_with_their_seeds_labels(files, tmp_path, capsys):
    corpus = tmp_path / "corpus"
    args = ["xplore", "--model", f"{files / 'm1.pt'},{files / 'm2.pt'}", "--dataset", str(files / "data.npz"),
            "--num-seeds", "20", "--iterations", "5", "--out", str(tmp_path / "x.json"), "--no-progress",
            "--corpus", str(corpus)]
    assert main(args) == 0
    capsys.readouterr()
    with np.load(tmp_path / "x.npz") as f:
        found, seed_index = f["inputs"], f["seed_index"]
    with np.load(files / "data.npz") as f:
        labels = f["y"][seed_index]
    assert len(found) > 0
    inputs, stored, provenance = _entries(corpus)
    np.testing.assert_array_equal(inputs, found)
    np.testing.assert_array_equal(stored, labels)
    assert provenance[0].method == "xplore"
    assert provenance[0].models == ("m1.pt", "m2.pt")


def test_run_adds_the_synthesized_inputs_it_no_longer_gets_right(files, tmp_path, capsys):
    corpus = tmp_path / "corpus"
    assert main(["run", "--model", str(files / "m1.pt"), "--dataset", str(files / "mixed.npz"), "--class",
                 "7", "--out", str(tmp_path / "r.json"), "--no-progress", "--no-surprise", "--corpus",
                 str(corpus)]) == 0
    capsys.readouterr()
    with np.load(tmp_path / "r.npz") as f:
        failing = f["pred_synthesized"] != f["labels"]
        synthesized, labels = f["synthesized"][failing], f["labels"][failing]
    assert len(synthesized) > 0
    inputs, stored, provenance = _entries(corpus)
    np.testing.assert_array_equal(inputs, synthesized)
    np.testing.assert_array_equal(stored, labels)
    assert provenance[0].method == "run"
    assert Corpus.open(corpus).dataset == "mixed"


@pytest.fixture
def corpus(tmp_path):
    folder = tmp_path / "c"
    made = Corpus.create(folder, dataset="data", input_shape=(1, 28, 28), num_classes=10)
    x = np.random.default_rng(0).random((5, 1, 28, 28), dtype=np.float32)
    made.add(x[:3], np.array([1, 2, 3]), Provenance("regress", "one", ("m1.pt", "m2.pt"),
                                                    time="2026-01-01T00:00:00+00:00"))
    made.add(x[3:], np.array([4, 5]), Provenance("xplore", "two", ("m1.pt", "m2.pt")))
    return folder


def test_corpus_list_and_check(corpus, capsys):
    assert main(["corpus", "list", str(corpus)]) == 0
    out = capsys.readouterr().out
    assert f"corpus {corpus}: 5 entries in 2 shards; data set data, input shape (1, 28, 28), 10 classes" \
        in out
    assert "regress" in out
    assert "xplore" in out
    assert main(["corpus", "list", str(corpus), "--entries"]) == 0
    out = capsys.readouterr().out
    ids = Corpus.open(corpus).ids().tolist()
    assert all(i in out for i in ids)
    assert main(["corpus", "check", str(corpus)]) == 0
    assert "corpus check: ok" in capsys.readouterr().out


def test_corpus_check_names_a_damaged_shard_and_prune_damaged_drops_it(corpus, capsys):
    shard = corpus / Corpus.open(corpus).manifest.shards[1].name
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF
    shard.write_bytes(bytes(data))
    assert main(["corpus", "check", str(corpus)]) == 1
    out = capsys.readouterr().out
    assert f"damaged: {shard.name}" in out
    assert f"'deepfault corpus prune {corpus} --damaged'" in out
    assert main(["corpus", "prune", str(corpus), "--damaged"]) == 0
    assert "corpus prune: 2 entries deleted, 3 left" in capsys.readouterr().out
    assert main(["corpus", "check", str(corpus)]) == 0


def test_corpus_prune(corpus, capsys):
    assert main(["corpus", "prune", str(corpus), "--method", "xplore"]) == 0
    assert "corpus prune: 2 entries deleted, 3 left" in capsys.readouterr().out
    first = Corpus.open(corpus).ids()[0]
    assert main(["corpus", "prune", str(corpus), "--ids", first[:10]]) == 0
    assert "1 entries deleted, 2 left" in capsys.readouterr().out
    assert main(["corpus", "prune", str(corpus), "--before", "2026-06-01"]) == 0
    assert "2 entries deleted, 0 left" in capsys.readouterr().out


def test_corpus_prune_without_a_criterion_deletes_nothing(corpus, capsys):
    assert main(["corpus", "prune", str(corpus)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "needs what to delete" in err
    assert len(Corpus.open(corpus)) == 5


def _refused(capsys, argv, words):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("deepfault: error: "), err
    assert err.count("\n") == 1, err
    assert words in err, err


def test_bad_corpus_folders_are_refused_before_any_work(files, corpus, tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    _refused(capsys, _regress(files, tmp_path / "file"),
             "--corpus must be a folder; got")
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    _refused(capsys, _regress(files, other), "holds files that are not a corpus's (notes.txt)")
    made_for = tmp_path / "mnist-corpus"
    Corpus.create(made_for, dataset="mnist", input_shape=(1, 28, 28))
    _refused(capsys, _regress(files, made_for), "was made for data set 'mnist'")
    _refused(capsys, ["corpus", "list", str(tmp_path / "absent")], "does not exist")
    assert not (tmp_path / "s.sqlite").exists()  # no campaign started
    assert (other / "notes.txt").read_text() == "mine"


def test_an_output_in_the_corpus_folder_is_refused(files, corpus, tmp_path, capsys):
    _refused(capsys, _regress(files, corpus, "--out", str(corpus / "faults.npz")),
             "must be a path outside the --corpus folder")
    _refused(capsys, ["xplore", "--model", f"{files / 'm1.pt'},{files / 'm2.pt'}", "--dataset",
                      str(files / "data.npz"), "--out", str(corpus / "x.json"), "--corpus", str(corpus)],
             "--out must be a path outside the --corpus folder")
    _refused(capsys, ["run", "--model", str(files / "m1.pt"), "--dataset", str(files / "data.npz"), "--out",
                      str(tmp_path / "r.json"), "--report", str(corpus), "--corpus", str(corpus)],
             "--report must be a path outside the --corpus folder")
    assert sorted(p.name for p in corpus.iterdir() if not p.name.startswith(".")) == sorted(
        ["corpus.json", *(s.name for s in Corpus.open(corpus).manifest.shards)])
    assert json.loads((corpus / "corpus.json").read_text())["entries"] == 5
