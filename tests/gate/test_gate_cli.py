"""``deepfault gate`` end to end on tiny hand-set models: the exit statuses, the JSON, JUnit and
Markdown files, the corpus replay against numpy, bad input refused in one line before any work,
and an interruption that leaves the corpus whole."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest
import torch

from deepfault.corpus import Corpus
from helpers.gate_models import linear, save_pair, split
from helpers.hardening import assert_refused, cli


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("gate")
    save_pair(d)
    return d


BASE = ["gate", "--dataset", "data.npz", "--budget", "0", "--no-progress"]


def test_a_model_against_itself_exits_0(folder):
    status, out, _ = cli([*BASE, "--m1", "m1.ts", "--m2", "m1.ts"], folder)
    assert status == 0
    assert out.startswith("gate: PASS: m1.ts may replace m1.ts")


def test_a_damaged_model_exits_1_and_writes_json_junit_markdown(folder, tmp_path):
    out_files = [tmp_path / "r.json", tmp_path / "r.xml", tmp_path / "r.md"]
    status, out, _ = cli(
        [
            *BASE,
            "--m1",
            "m1.ts",
            "--m2",
            "m2.ts",
            "--out",
            out_files[0],
            "--junit",
            out_files[1],
            "--summary",
            out_files[2],
        ],
        folder,
    )
    assert status == 1
    assert out.startswith("gate: FAIL")
    doc = json.loads(out_files[0].read_text())
    assert doc["command"] == "gate"
    assert doc["verdict"] == "fail"
    assert doc["exit_status"] == 1
    failing = {c["name"] for c in doc["checks"] if c["status"] == "fail"}
    assert "class_flip_rate[2]" in failing
    assert "class_flip_rate[0]" not in failing
    x, y = split()
    with torch.no_grad():
        p1 = linear()(torch.as_tensor(x)).argmax(1).numpy()
        p2 = linear(0.5)(torch.as_tensor(x)).argmax(1).numpy()
    assert doc["heldout"]["negative_flips"] == int(((p1 == y) & (p2 != y)).sum())
    suite = ET.parse(out_files[1]).getroot()
    cases = suite.findall("testcase")
    assert len(cases) == len(doc["checks"]) == int(suite.get("tests"))
    assert int(suite.get("failures")) == len(failing) == sum(c.find("failure") is not None for c in cases)
    assert "**FAIL**" in out_files[2].read_text()
    assert "class_flip_rate[2]" in out_files[2].read_text()


def test_policy_file_and_options(folder, tmp_path):
    policy = tmp_path / "p.toml"
    policy.write_text(
        "max_negative_flip_rate = 0.5\nmax_class_flip_rate = 0.9\nnot_significantly_worse = false\n"
    )
    status, out, _ = cli([*BASE, "--m1", "m1.ts", "--m2", "m2.ts", "--policy", policy], folder)
    assert status == 0, out
    status, out, _ = cli(
        [*BASE, "--m1", "m1.ts", "--m2", "m2.ts", "--policy", policy, "--max-negative-flip-rate", "0.1"],
        folder,
    )
    assert status == 1
    assert "> 10.00% allowed (max_negative_flip_rate)" in out


def test_bad_input_is_one_line_and_exit_2_before_any_work(folder, tmp_path):
    assert_refused([*BASE, "--m1", "m1.ts", "--m2", "m4.ts"], folder, "4 outputs per input", "3 classes")
    np.save(folder / "unlabelled.npy", split()[0])
    assert_refused(
        [*BASE, "--m1", "m1.ts", "--m2", "m2.ts", "--split", "unlabelled.npy"],
        folder,
        "no labels, and the policy needs them",
    )
    (folder / "typo.toml").write_text("max_negative_flip_rte = 0.1\n")
    assert_refused(
        [*BASE, "--m1", "m1.ts", "--m2", "m2.ts", "--policy", "typo.toml"],
        folder,
        "unknown key 'max_negative_flip_rte'",
        "did you mean 'max_negative_flip_rate'",
    )
    (folder / "bad.toml").write_text("max_class_flip_rate = 2.0\n")
    assert_refused(
        [*BASE, "--m1", "m1.ts", "--m2", "m2.ts", "--policy", "bad.toml"],
        folder,
        "max_class_flip_rate must be",
    )
    assert_refused(
        [*BASE, "--m1", "m1.ts", "--m2", "m2.ts", "--max-negative-flip-rate", "-0.1"],
        folder,
        "--max-negative-flip-rate must be",
    )
    assert_refused([*BASE, "--m1", "m1.ts", "--m2", "m2.ts", "--out", "m1.ts"], folder, "--out")
    assert_refused(
        [*BASE, "--m1", "m1.ts", "--m2", "m2.ts", "--corpus", "c", "--junit", "c/r.xml"],
        folder,
        "outside the --corpus folder",
    )


def test_corpus_replay_counts_equal_numpy_and_grow_append_only(folder, tmp_path):
    corpus = tmp_path / "corpus"
    first, out, _ = cli([*BASE, "--m1", "m1.ts", "--m2", "m2.ts", "--corpus", corpus], folder)
    x, y = split()
    with torch.no_grad():
        p1 = linear()(torch.as_tensor(x)).argmax(1).numpy()
        p2 = linear(0.5)(torch.as_tensor(x)).argmax(1).numpy()
    flips = int(((p1 == y) & (p2 != y)).sum())
    assert f"added {flips} entries" in out
    assert len(Corpus.open(corpus)) == flips
    result = tmp_path / "again.json"
    status, out, _ = cli(
        [*BASE, "--m1", "m1.ts", "--m2", "m2.ts", "--corpus", corpus, "--out", result], folder
    )
    replay = json.loads(result.read_text())["replay"]
    assert status == first  # the same pair again: its own flips were judged once, the verdict holds
    assert replay["entries"] == flips == replay["own"]
    assert replay["regressions"] == 0 == replay["failing"]
    assert len(Corpus.open(corpus)) == flips  # the same flips again: deduplicated
    other = tmp_path / "m3.ts"  # another challenger: the earlier flips are earlier failures to it
    torch.jit.script(linear(0.45)).save(str(other))
    cli([*BASE, "--m1", "m1.ts", "--m2", other, "--corpus", corpus, "--out", result, "--no-add-to-corpus"],
        folder)
    replay = json.loads(result.read_text())["replay"]
    with torch.no_grad():
        p3 = linear(0.45)(torch.as_tensor(x)).argmax(1).numpy()
    earlier = (p1 == y) & (p2 != y)
    assert replay["own"] == 0
    assert replay["regressions"] == int((earlier & (p3 != y)).sum()) == replay["failing"] > 0
    status, out, _ = cli(
        [*BASE, "--m1", "m1.ts", "--m2", "m1.ts", "--corpus", corpus, "--out", result], folder
    )
    replay = json.loads(result.read_text())["replay"]
    assert status == 0
    assert replay["fixed"] == flips
    assert replay["failing"] == 0


def test_a_corpus_of_another_data_set_is_refused(folder, tmp_path):
    Corpus.create(tmp_path / "other", dataset="mnist", input_shape=(1, 28, 28), num_classes=10)
    assert_refused([*BASE, "--m1", "m1.ts", "--m2", "m2.ts", "--corpus", tmp_path / "other"], folder, "mnist")


def test_an_interruption_holds_says_what_finished_and_leaves_the_corpus_whole(folder, tmp_path, monkeypatch):
    from deepfault.gate import protocol

    corpus = tmp_path / "corpus"
    cli([*BASE, "--m1", "m1.ts", "--m2", "m2.ts", "--corpus", corpus], folder)
    before = len(Corpus.open(corpus))

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(protocol, "replay_corpus", interrupted)
    status, out, _ = cli([*BASE, "--m1", "m1.ts", "--m2", "m1.ts", "--corpus", corpus], folder)
    assert status == 130
    assert "interrupted during replay; finished: heldout; the corpus is whole" in out
    assert Corpus.open(corpus).check().ok
    assert len(Corpus.open(corpus)) == before


def test_the_fuzz_stage_finds_faults_judges_them_and_grows_the_corpus(folder, tmp_path):
    corpus, result = tmp_path / "corpus", tmp_path / "r.json"
    argv = [
        "gate",
        "--dataset",
        "data.npz",
        "--no-progress",
        "--m1",
        "m1.ts",
        "--m2",
        "m2.ts",
        "--budget",
        "30it",
        "--fidelity",
        "none",
        "--corpus",
        corpus,
        "--max-new-faults",
        "0",
        "--out",
        result,
    ]
    status, out, _ = cli(argv, folder)
    doc = json.loads(result.read_text())
    fuzz = doc["fuzz"]
    assert status == 1
    assert fuzz["faults"] > 0
    assert fuzz["complete"]
    assert {c["name"]: c["status"] for c in doc["checks"]}["new_faults"] == "fail"
    assert doc["corpus_added"] == len(Corpus.open(corpus)) >= doc["heldout"]["negative_flips"]
    status, out, _ = cli(
        [*argv[:-2], "--m2", "m1.ts", "--out", result], folder
    )  # M1 against itself: no fault
    assert json.loads(result.read_text())["fuzz"]["faults"] == 0
