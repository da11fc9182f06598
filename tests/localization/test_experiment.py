"""The experiment grid: resume, no duplicates, workers, configuration hash, statistics."""

import os
import signal
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest
from scipy.stats import mannwhitneyu

from deepfault import DeepFaultError
from deepfault.experiment.stats import a12, compare
from deepfault.experiment.store import ResultStore
from deepfault.localization.preset import ExperimentConfig, ModelSpec, load_config, plan, run_experiment
from deepfault.localization.results import read_cells

SMALL = ExperimentConfig(
    name="small", dataset="digits", models=(ModelSpec("mlp", arch="digits_mlp"),), ks=(1, 3),
    classes=(0, 8), random_repetitions=2, inputs_per_class=5, train_epochs=15, train_lr=3e-3,
)


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


def _strip(cell):
    data = cell.data()
    data.pop("synthesis_seconds")
    data.pop("spectrum_seconds")
    return cell.key, data


def _cells(path, config_hash):
    with ResultStore(path) as store:
        return dict(_strip(c) for c in read_cells(store, config_hash))


def test_grid_runs_then_resumes_without_redoing(tmp_path, models_dir):
    store = tmp_path / "s.sqlite"
    first = run_experiment(SMALL, store, models_dir=models_dir)
    assert first.cells_total == first.cells_run == 2 * 2 * (3 + 2)
    again = run_experiment(SMALL, store, models_dir=models_dir)
    assert again.config_hash == first.config_hash
    assert (again.cells_run, again.cells_skipped) == (0, first.cells_total)
    cells = _cells(store, first.config_hash)
    assert set(cells) == set(plan(SMALL, _digits()))
    for key, data in cells.items():
        assert len(data["loss"]) == len(data["input_indices"]) <= 5
        assert len(data["neurons"]) == key.k
        assert max(data["linf"], default=0.0) <= SMALL.distance + 1e-6
    assert sum(len(d["loss"]) for d in cells.values()) > 0
    # the measures and the random baseline synthesize from the same inputs
    by_group = {}
    for key, data in cells.items():
        by_group.setdefault((key.model, key.cls), set()).add(tuple(data["input_indices"]))
    assert all(len(v) == 1 for v in by_group.values())
    # the random neurons avoid the three measures' neurons for the same class and k
    for key, data in cells.items():
        if key.approach == "random":
            taken = {n["index"] for a in ("tarantula", "ochiai", "dstar")
                     for n in cells[key.__class__(key.model, key.cls, a, key.k, 0)]["neurons"]}
            assert not taken & {n["index"] for n in data["neurons"]}


def _digits():
    from deepfault.data import load_dataset

    return load_dataset("digits")


def test_changed_configuration_never_reuses_cells(tmp_path, models_dir):
    store = tmp_path / "s.sqlite"
    a = run_experiment(SMALL, store, models_dir=models_dir)
    from dataclasses import replace

    b = run_experiment(replace(SMALL, step=0.5), store, models_dir=models_dir)
    assert a.config_hash != b.config_hash
    assert b.cells_run == b.cells_total
    with ResultStore(store) as s:
        assert len(s.experiments()) == 2


def test_workers_give_the_sequential_result(tmp_path, models_dir):
    seq = run_experiment(SMALL, tmp_path / "seq.sqlite", models_dir=models_dir)
    par = run_experiment(SMALL, tmp_path / "par.sqlite", models_dir=models_dir, workers=2)
    a, b = _cells(tmp_path / "seq.sqlite", seq.config_hash), _cells(tmp_path / "par.sqlite", par.config_hash)
    assert a.keys() == b.keys()
    for key in a:
        for field in ("neurons", "input_indices", "correct", "pred_synthesized"):
            assert a[key][field] == b[key][field], (key, field)
        np.testing.assert_allclose(a[key]["loss"], b[key]["loss"], rtol=1e-5, atol=1e-6)


def test_kill_9_midway_then_resume(tmp_path, models_dir):
    toml = tmp_path / "grid.toml"
    toml.write_text(
        'name = "killme"\ndataset = "digits"\nks = [1, 2]\nclasses = [0, 1, 2, 3]\n'
        'random_repetitions = 3\niterations = 30\ntrain_epochs = 15\ntrain_lr = 0.003\n'
        '[[models]]\nname = "mlp"\narch = "digits_mlp"\n'
    )
    store = tmp_path / "k.sqlite"
    cmd = [sys.executable, "-m", "deepfault", "experiment", "--config", str(toml), "--store", str(store),
           "--models-dir", str(models_dir), "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    count, deadline = 0, time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
        try:
            with sqlite3.connect(store) as db:
                count = db.execute("SELECT COUNT(*) FROM cells").fetchone()[0]
        except sqlite3.Error:
            continue
        if count >= 4:
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait()
    total = 4 * 2 * (3 + 3)
    assert 4 <= count < total, "the run should have been killed midway"
    config = load_config(toml)
    resumed_run = run_experiment(config, store, models_dir=models_dir)
    assert resumed_run.cells_total == total
    assert resumed_run.cells_skipped >= count
    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT COUNT(*), COUNT(DISTINCT cell_id) FROM cells")
        assert rows.fetchone() == (total, total)
    # the resumed store equals an uninterrupted run
    clean = tmp_path / "clean.sqlite"
    summary = run_experiment(config, clean, models_dir=models_dir)
    resumed = _cells(store, summary.config_hash)
    fresh = _cells(clean, summary.config_hash)
    assert resumed.keys() == fresh.keys()
    for key in fresh:
        assert resumed[key]["neurons"] == fresh[key]["neurons"]
        np.testing.assert_allclose(resumed[key]["loss"], fresh[key]["loss"], rtol=1e-5, atol=1e-6)


def test_config_file_errors(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\ndataset = "digits"\nks = [1]\ncolour = "red"\n')
    with pytest.raises(DeepFaultError, match=r"unknown key\(s\) \['colour'\]"):
        load_config(bad)
    bad.write_text('name = "x"\ndataset = "digits"\nks = [1]\n[[models]]\nname = "m"\n')
    with pytest.raises(DeepFaultError, match="exactly one of 'arch' or 'file'"):
        load_config(bad)
    bad.write_text("name = [")
    with pytest.raises(DeepFaultError, match="not valid TOML"):
        load_config(bad)
    with pytest.raises(DeepFaultError, match="does not exist"):
        load_config(tmp_path / "none.toml")


def test_a12_and_mann_whitney_by_hand():
    assert a12([4, 5, 6], [1, 2, 3]) == 1.0
    assert a12([1, 2], [2, 3]) == (0 + 0.5 + 0 + 0) / 4
    c = compare([4, 5, 6], [1, 2, 3], metric="loss")
    # exact one-sided p for complete separation of 3 vs 3: 1 / C(6, 3) = 0.05
    assert c.alternative == "greater"
    assert c.p_value == pytest.approx(0.05)
    assert c.a12 == 1.0
    assert not c.significant()
    x, y = [0, 0, 1, 0, 0, 0, 1, 0], [1, 1, 1, 0, 1, 1, 1, 1]
    c = compare(x, y, metric="correct")
    assert c.alternative == "less"
    assert c.p_value == pytest.approx(mannwhitneyu(x, y, alternative="less").pvalue)
    assert compare([1, 1], [1, 1], metric="correct").p_value == 1.0
