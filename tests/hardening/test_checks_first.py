"""Issue 30: the late checks come before the work, and what a run writes together appears together.

Each check is tested to come first by replacing the expensive step after it with a function that
fails the test when called (the store, a preset's plan, a Ray start).
"""

from __future__ import annotations

import shutil

import pytest

from deepfault.experiment import executors
from deepfault.experiment.store import ResultStore
from helpers.hardening import (
    assert_refused,
    cli,
    files,
    pair,  # noqa: F401  (the shared files, as a fixture)
)


def _never(what):
    def fail(*args, **kwargs):
        raise AssertionError(f"{what} before the check")

    return fail


@pytest.fixture
def work(pair, tmp_path):  # noqa: F811
    for name in ("m1.pt", "m2.pt", "data.npz"):
        shutil.copy(pair / name, tmp_path / name)
    (tmp_path / "junk.pt").write_bytes(b"not a model at all")
    return tmp_path


@pytest.fixture
def no_plan(monkeypatch):
    from deepfault.fuzz.preset import DRFuzzMnist
    from deepfault.xplore.preset import DeepXploreMnist

    monkeypatch.setattr(DeepXploreMnist, "plan", _never("the preset's plan (data, models, discriminator)"))
    monkeypatch.setattr(DRFuzzMnist, "plan", _never("the preset's plan (data, models, discriminator)"))


def test_regress_checks_a_discriminator_file_before_the_store_is_made(work, monkeypatch):
    monkeypatch.setattr(ResultStore, "__init__", _never("the store was made"))
    assert_refused(["regress", "--m1", "m1.pt", "--m2", "m2.pt", "--dataset", "data.npz", "--budget", "5it",
                    "--fidelity", "discriminator:nothing.pt", "--store", "s.sqlite"], work, "--fidelity")
    status, _, err = cli(["regress", "--m1", "m1.pt", "--m2", "m2.pt", "--dataset", "data.npz", "--budget",
                          "5it", "--fidelity", "discriminator:junk.pt", "--store", "s.sqlite"], work)
    assert status == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert not (work / "s.sqlite").exists()


@pytest.mark.parametrize(("option", "needle"), [
    ("fidelity=discriminator:nothing.pt", "discriminator"),
    ("shared-fidelity=discriminator:no.pt", "discriminator"),
    ("pairs=no-such-folder", "no-such-folder"), ("pairs=empty", "'empty'")])
def test_drfuzz_preset_checks_its_pairs_and_discriminator_before_training(no_plan, tmp_path, option, needle):
    (tmp_path / "empty").mkdir()
    assert_refused(["experiment", "--preset", "drfuzz-mnist", "--preset-option", option, "--store",
                    "s.sqlite", "--no-progress"], tmp_path, needle)


@pytest.mark.parametrize(("option", "needle"), [
    ("fidelity=discriminator:junk.pt", "'junk.pt' is not a model file"),
    ("shared-fidelity=dsa::junk.npz", "'junk.npz' is not a readable surprise state"),
])
def test_drfuzz_preset_reads_its_fidelity_files_before_loading_the_data(no_plan, tmp_path, option, needle):
    """Issue 43: a file that exists but is no discriminator or surprise state was read only after
    MNIST was loaded (and, with it, the scenarios made)."""
    (tmp_path / "junk.pt").write_bytes(b"not a model")
    (tmp_path / "junk.npz").write_bytes(b"not a state")
    assert_refused(["experiment", "--preset", "drfuzz-mnist", "--preset-option", option, "--store",
                    "s.sqlite", "--no-progress"], tmp_path, needle)


@pytest.mark.parametrize("option", ["repeats=0", "bogus=1"])
def test_ray_is_not_started_before_the_options_are_checked(no_plan, tmp_path, monkeypatch, option):
    monkeypatch.setattr(executors.RayExecutor, "__init__", _never("Ray was started"))
    assert_refused(["experiment", "--preset", "deepxplore-mnist", "--executor", "ray", "--preset-option",
                    option, "--store", "s.sqlite", "--no-progress"], tmp_path, option.split("=")[0])


XPLORE = ["xplore", "--model", "m1.pt,m2.pt", "--dataset", "data.npz", "--out", "x.json", "--num-seeds", "4",
          "--iterations", "1", "--no-surprise", "--no-progress"]


def test_xplore_writes_its_npz_grid_and_json_together(work):
    status, _, err = cli(XPLORE, work)
    assert status == 0, err
    assert {"x.json", "x.npz", "x.png"} <= files(work)
    assert not [f for f in files(work) if f.endswith(".tmp")]


@pytest.mark.parametrize("where", ["image_grid", "write_result"])
def test_an_interrupted_xplore_leaves_no_npz_without_its_json(work, monkeypatch, where):
    import importlib

    import deepfault.experiment.saving as cmd  # writes every command's outcome and result document

    figures = importlib.import_module("deepfault.xplore.figures")  # the package exports a function xplore

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(figures if where == "image_grid" else cmd, where, interrupt)
    before = files(work)
    status, _, err = cli(XPLORE, work)
    assert status == 130, err
    assert files(work) == before, sorted(files(work) - before)  # no x.npz, x.png, x.json or temporary


def test_a_long_seed_indices_list_is_no_file_name(work):
    indices = ",".join(str(i % 10) for i in range(750))  # 1,499 characters
    assert len(indices) > 1400
    argv = [a for a in XPLORE if a not in ("--num-seeds", "4")]
    status, out, err = cli([*argv, "--seed-indices", indices], work)
    assert status == 0, err
    assert "File name too long" not in err


def test_data_list_names_a_file_that_fails_its_md5(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    (raw / "t10k-labels-idx1-ubyte.gz").write_bytes(b"damaged")
    status, out, err = cli(["data", "list", "--data-dir", str(tmp_path)])
    assert status == 0, err
    assert "wrong md5: t10k-labels-idx1-ubyte.gz" in out, out


@pytest.mark.parametrize("folder", ["no-such-folder", "empty", "afile"])
def test_deepxplore_preset_checks_its_weights_dir_before_loading_the_data(no_plan, tmp_path, folder):
    """Before issue 43: the folder was looked into after MNIST was loaded (or downloaded)."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "afile").write_text("x")
    assert_refused(["experiment", "--preset", "deepxplore-mnist", "--preset-option", f"weights-dir={folder}",
                    "--store", "s.sqlite", "--no-progress"], tmp_path, f"weights-dir '{folder}' lacks")


def test_a_report_folder_given_as_a_dangling_link_is_refused_before_the_work(tmp_path, monkeypatch):
    """Before issue 43: the report was computed, then the swap failed on the link's temporary name."""
    from deepfault.cli import experiment

    monkeypatch.setattr(experiment, "write_report", _never("the report was computed"))
    (tmp_path / "s.sqlite").write_bytes(b"")
    (tmp_path / "rep").symlink_to(tmp_path / "nowhere")
    assert_refused(["report", "s.sqlite", "--out", "rep"], tmp_path, "--out", "symbolic link",
                   "does not exist")
