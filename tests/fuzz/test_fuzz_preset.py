"""The drfuzz-mnist preset on the user's own pairs (channels-last Keras files), its options
through the CLI, resuming, and the report."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

import deepfault as df
from deepfault.cli import main
from deepfault.errors import DeepFaultError
from deepfault.experiment.store import ResultStore
from deepfault.fuzz.preset import PresetConfig, run_drfuzz_mnist

pytest.importorskip("h5py")

from helpers.keras_files import write_lenet  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

OPTIONS = ["scenarios=supply", "seeds=0", "budget=12it", "fidelity=ssim:0.3", "shared-fidelity=ssim:0.3"]


@pytest.fixture
def user_pairs(tmp_path, monkeypatch):
    """A folder with a channels-last Keras SUPPLY pair, and an 'MNIST' of random images labelled
    by its M1 (the preset loads MNIST; no real data in the unit suite)."""
    pairs = tmp_path / "pairs"
    pairs.mkdir()
    files = [write_lenet(pairs / "supply-m1.h5", seed=0), write_lenet(pairs / "supply-m2.h5", seed=1)]
    x = np.random.default_rng(3).uniform(0, 1, (90, 1, 28, 28)).astype(np.float32)
    names = tuple(str(i) for i in range(10))
    zeros = np.zeros(len(x), np.int64)
    with torch.no_grad():
        p1, p2 = (df.prepare_model(f, df.Dataset("d", x, zeros, x, zeros, (0.0, 1.0), names)).module(
            torch.as_tensor(x)).argmax(1).numpy() for f in files)
    y = np.where(np.arange(len(x)) % 2 == 0, p1, p2)  # each model right on (at least) half: seeds for both
    data = df.Dataset("mnist", x[40:], y[40:], x[:40], y[:40], (0.0, 1.0), names)
    m1_accuracy = float((p1[:40] == y[:40]).mean())
    for where in ("deepfault.data.load_dataset", "deepfault.models.prepare.load_dataset"):
        monkeypatch.setattr(where, lambda name, **kw: data)
    monkeypatch.delenv("DEEPFAULT_DRFUZZ_PAIRS", raising=False)
    return SimpleNamespace(dir=pairs, m1_accuracy=m1_accuracy)


def test_the_preset_fuzzes_the_users_keras_pair_from_the_command_line(user_pairs, tmp_path, capsys):
    store = tmp_path / "d.sqlite"
    argv = ["experiment", "--preset", "drfuzz-mnist", "--store", str(store), "--models-dir",
            str(tmp_path / "models"), "--no-progress", "--preset-option", f"pairs={user_pairs.dir}"]
    for option in OPTIONS:
        argv += ["--preset-option", option]
    assert main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "2 cells, 2 run now" in out
    assert not (tmp_path / "models").exists() or not list((tmp_path / "models").glob("supply-*.pt"))
    with ResultStore(store, readonly=True) as opened:
        (experiment,) = opened.experiments()
        record = experiment["config"]
        cells = opened.done(experiment["config_hash"], "drfuzz")
    assert list(record["scenarios"]) == ["supply"]
    assert record["seeds"] == [0]
    assert record["budget"] == "12it"
    assert record["shared_filter"] == "ssim:0.3"
    assert "pairs_dir" not in record  # the weights' digests name the files, not where they lie
    assert len(record["model_digests"]["supply"]) == 2
    assert {"supply/drfuzz/seed0/result", "supply/deephunter/seed0/result"} <= cells
    assert main(argv) == 0
    assert "0 run now, 2 already in the store" in capsys.readouterr().out
    assert main(["report", str(store), "--out", str(tmp_path / "report")]) == 0
    page = (tmp_path / "report" / "report.html").read_text(encoding="utf-8")
    # the reproduction preset's report: both strategies ran, and the README's numbers are beside ours
    assert "DRFuzz against DeepHunter" in page
    assert "Beside the published numbers" in page
    assert not [f.name for f in (tmp_path / "report").iterdir() if "--" in f.name]


def test_user_pairs_are_prepared_in_the_data_layout(user_pairs, tmp_path):
    """Accuracies of the channels-last files are computed on channels-first data as the campaign
    sees it."""
    config = PresetConfig(scenarios=("supply",), seeds=(0,), budget="6it", fidelity="ssim:0.3",
                          shared_fidelity="none", strategies=("drfuzz",), pairs_dir=str(user_pairs.dir))
    summary = run_drfuzz_mnist(tmp_path / "s.sqlite", models_dir=tmp_path / "models", config=config)
    assert summary.model_accuracy["supply M1"] == pytest.approx(user_pairs.m1_accuracy)
    assert 0.5 <= user_pairs.m1_accuracy < 1.0
    assert summary.cells_run == 1


@pytest.mark.parametrize(("option", "message"), [
    ("seeds=a,b", "preset option seeds must be comma-separated integers"),
    ("scenarios=supply,apricot", "preset option scenarios must be a comma-separated list of"),
    ("max-seeds=0", "preset option max-seeds must be an integer >= 1"),
    ("budget=soon", "budget"),
    ("colour=red", "colour"),
])
def test_bad_preset_options_are_refused_by_name(user_pairs, tmp_path, option, message):
    from deepfault.fuzz.preset import DRFuzzMnist

    with pytest.raises(DeepFaultError, match=message):
        DRFuzzMnist().run(tmp_path / "s.sqlite", models_dir=tmp_path / "m", options=dict([option.split("=")]))
    assert not (tmp_path / "s.sqlite").exists()


def test_a_pairs_folder_without_a_scenario_names_the_missing_file(user_pairs, tmp_path):
    (user_pairs.dir / "supply-m2.h5").unlink()
    with pytest.raises(DeepFaultError, match="no supply-m2.* model file"):
        run_drfuzz_mnist(tmp_path / "s.sqlite", models_dir=tmp_path / "m",
                   options={"pairs": str(user_pairs.dir), "scenarios": "supply", "fidelity": "ssim"})


def test_seed_is_ignored_with_a_warning_by_a_preset_with_fixed_seeds(tmp_path, caplog):
    from deepfault.fuzz.preset import DRFuzzMnist

    with pytest.raises(DeepFaultError, match="preset option seeds"):
        DRFuzzMnist().run(tmp_path / "s.sqlite", models_dir=tmp_path / "m", seed=3, options={"seeds": "x"})
    assert "--seed is ignored by drfuzz-mnist" in caplog.text


def test_repeated_seeds_and_scenarios_run_once_with_a_note(caplog):
    """Issue 43: ``seeds=0,0`` planned the same campaign twice, and counted its cell twice."""
    from deepfault.fuzz.preset import _plan_jobs

    config = PresetConfig().with_options({"seeds": "0,0,1", "scenarios": "supply,supply"})
    assert (config.seeds, config.scenarios) == ((0, 1), ("supply",))
    assert "preset option seeds: 1 repeated value(s) dropped (0)" in caplog.text
    assert "preset option scenarios: 1 repeated value(s) dropped (supply)" in caplog.text
    jobs = _plan_jobs(config, {"supply": ("m1.pt", "m2.pt")}, store="s.sqlite", experiment="e", data_dir=None,
                      profile_dir="p", fidelity="ssim")
    cells = [j["cell"] for j in jobs]
    assert cells == ["supply/drfuzz/seed0", "supply/drfuzz/seed1", "supply/deephunter/seed0",
                     "supply/deephunter/seed1"]
    caplog.clear()
    assert PresetConfig().with_options({"seeds": "2,2"}, note=False).seeds == (2,)  # the plan reads it again
    assert PresetConfig(seeds=(3, 3)).seeds == (3,)
    assert caplog.text.count("dropped") == 1
