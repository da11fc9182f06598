"""The shared engine: registry, batch loop, accumulators, store, executors, preparation."""

import pickle
import sqlite3
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from deepfault import DeepFaultError, compute_spectrum
from deepfault.core.accumulator import Accumulator
from deepfault.core.batches import activations, iterate_batches, predict
from deepfault.core.registry import Registry
from deepfault.data import load_dataset
from deepfault.experiment.executors import get_executor, list_executors
from deepfault.experiment.store import ResultStore
from deepfault.localization.preset import ExperimentConfig, ModelSpec, plan, run_experiment
from deepfault.localization.protocol import CellSpec, GroupInputs, RunConfig, run_group
from deepfault.localization.results import Cell, CellKey, read_cells, write_cell
from deepfault.localization.spectrum import SpectrumAccumulator
from deepfault.models import ModelFile, save_model
from deepfault.models.prepare import prepare_model
from helpers.float_tolerance import assert_close_two_ways
from helpers.tiny_models import chain_model

# --- registry -------------------------------------------------------------------------------


def test_registry_names_duplicates_and_unknown():
    reg = Registry("widget")
    reg.register("b", 2)

    @reg.register("a")
    def a():
        return 1

    assert reg.names() == ["a", "b"]
    assert "a" in reg
    assert reg["b"] == 2
    with pytest.raises(RuntimeError, match="registered twice"):
        reg.register("a", 3)
    with pytest.raises(DeepFaultError, match=r"unknown widget 'c'; known: a, b"):
        reg.get("c")


def test_every_extension_point_is_a_registry():
    from deepfault.core.registry import Registry as R
    from deepfault.coverage.criteria import CRITERIA
    from deepfault.data import DATASETS
    from deepfault.experiment.executors import EXECUTORS
    from deepfault.experiment.method import METHODS
    from deepfault.experiment.presets import PRESETS
    from deepfault.fuzz.campaign.strategies import STRATEGIES
    from deepfault.localization.measures import MEASURES
    from deepfault.localization.selection import APPROACHES
    from deepfault.models._api import ARCHITECTURES
    from deepfault.models.load import MODEL_FORMATS

    for reg in (CRITERIA, DATASETS, EXECUTORS, METHODS, PRESETS, STRATEGIES, MEASURES, APPROACHES,
                MODEL_FORMATS, ARCHITECTURES):
        assert isinstance(reg, R)
        assert len(reg) > 0
    assert {"random", "uniform", "tarantula"} <= set(APPROACHES.names())
    assert APPROACHES.get("random").baseline
    assert not APPROACHES.get("ochiai").baseline
    assert set(list_executors()) == {"serial", "process", "ray"}


# --- one batch loop, accumulators -------------------------------------------------------------


def _data(n=60, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 4)).astype(np.float32), rng.integers(0, 3, n)


@pytest.mark.float_sensitive
def test_iterate_batches_outputs_and_values_match_whole_set():
    model, (x, y) = chain_model(), _data()
    layout, whole = activations(model, x)
    parts = list(iterate_batches(model, x, labels=y, batch_size=7))
    assert [b.start for b in parts] == list(range(0, 60, 7))
    # float32 sums regrouped by batch: the logits went through fc1 (4 + 1 terms), fc2 (6 + 1), fc3
    # (5 + 1) and the logits (4 + 1)
    assert_close_two_ways(torch.cat([b.values for b in parts]), whole, n=23, dtype=torch.float32)
    assert_close_two_ways(torch.cat([b.outputs for b in parts]), predict(model, x), n=23, dtype=torch.float32)
    assert all(b.layout == layout for b in parts)
    assert all(not m._forward_hooks for m in model.modules())


def test_iterate_batches_takes_the_neurons_as_one_spec_or_as_keywords():
    from deepfault.core.batches import Neurons

    model, (x, _) = chain_model(), _data()
    layer = next(n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear))
    by_keywords = list(iterate_batches(model, x, layers=[layer], transform="layer-minmax", batch_size=16))
    by_spec = list(iterate_batches(model, x, neurons=Neurons(layers=[layer], transform="layer-minmax"),
                                   batch_size=16))
    replaced = list(iterate_batches(model, x, neurons=Neurons(layers=[layer]), transform="layer-minmax",
                                    batch_size=16))
    for a, b, c in zip(by_keywords, by_spec, replaced, strict=True):
        assert a.layout == b.layout == c.layout
        assert a.layout.layers[0].name == layer
        assert torch.equal(a.values, b.values)
        assert torch.equal(a.values, c.values)
    assert all(b.values is None for b in iterate_batches(model, x, neurons=False, layers=[layer]))


@settings(max_examples=25, deadline=None, derandomize=True)
@given(st.lists(st.integers(1, 59), max_size=4, unique=True), st.integers(1, 64))
def test_spectrum_does_not_depend_on_batches_or_shards(cuts, batch_size):
    """Counts over shards merged in any order equal the counts over the whole set."""
    model, (x, y) = chain_model(), _data()
    whole = compute_spectrum(model, x, y, batch_size=batch_size)
    bounds = [0, *sorted(cuts), len(x)]
    shards = []
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        acc = SpectrumAccumulator(1)
        for b in iterate_batches(model, x[lo:hi], labels=y[lo:hi], batch_size=batch_size):
            passed = b.outputs.argmax(1).cpu() == b.labels
            acc.update(b.values, passed, torch.zeros(len(b.labels), dtype=torch.long))
        shards.append(acc)
    merged = SpectrumAccumulator(1)
    for acc in reversed(shards):
        merged.merge(acc)
    a_s, a_f, n_pass, n_fail = merged.compute()
    np.testing.assert_array_equal(a_s[0], whole.a_s)
    np.testing.assert_array_equal(a_f[0], whole.a_f)
    assert (int(n_pass[0]), int(n_fail[0])) == (whole.num_passed, whole.num_failed)


def test_accumulator_state_round_trip_and_reset():
    acc = SpectrumAccumulator(2)
    values = torch.tensor([[1.0, -1.0], [0.5, 2.0]])
    acc.update(values, torch.tensor([True, False]), torch.tensor([0, 1]))
    copy = SpectrumAccumulator(2).load_state_dict(pickle.loads(pickle.dumps(acc.state_dict())))
    for a, b in zip(acc.compute(), copy.compute(), strict=True):
        np.testing.assert_array_equal(a, b)
    acc.reset()
    with pytest.raises(DeepFaultError, match="empty"):
        acc.compute()
    with pytest.raises(DeepFaultError, match="threshold must be a finite number"):
        SpectrumAccumulator(1, threshold=float("nan"))
    assert issubclass(SpectrumAccumulator, Accumulator)


# --- the one protocol -------------------------------------------------------------------------


def test_run_group_times_synthesis_after_a_warm_up(monkeypatch):
    """Table 10's first cell must not pay one-off costs: one untimed warm-up call comes first."""
    import deepfault.localization.protocol as protocol

    calls = []
    real = protocol._synthesize_recording

    def counting(model, originals, *args, **kwargs):
        calls.append(len(originals))
        return real(model, originals, *args, **kwargs)

    monkeypatch.setattr(protocol, "_synthesize_recording", counting)
    model, (x, y) = chain_model(), _data(90)
    cls = int(np.bincount(y).argmax())
    group = run_group(model, GroupInputs(x, y, (-5.0, 5.0)), cls,
                      [CellSpec("tarantula", 2), CellSpec("random", 2)], config=RunConfig(num_inputs=4))
    assert calls[0] == 1
    assert calls[1:] == [len(group.input_indices)] * 2


def test_experiment_refuses_a_model_on_data_in_another_range(tmp_path):
    """A 0-255 model on 0-1 data used to run at chance accuracy without a word."""
    from deepfault.models.zoo import build_model

    mf = ModelFile(build_model("digits_mlp"), "digits_mlp", {}, dataset="digits", bounds=(0.0, 255.0))
    save_model(tmp_path / "m.pt", mf)
    config = ExperimentConfig(name="range", dataset="digits", ks=(1,), classes=(0,),
                              models=(ModelSpec("m", file=str(tmp_path / "m.pt")),))
    with pytest.raises(DeepFaultError, match=r"trained on inputs in \(0.0, 255.0\).*gives \(0.0, 1.0\)"):
        run_experiment(config, tmp_path / "s.sqlite")
    assert not (tmp_path / "s.sqlite").exists()
    with pytest.raises(DeepFaultError, match="trained on inputs"):
        prepare_model(mf, load_dataset("digits"))


def test_bad_grid_leaves_no_store_behind(tmp_path):
    def make_and_run(bad):  # a declared constraint refuses some when the grid is made, the others at the run
        config = ExperimentConfig(**{**dict(name="g", dataset="digits", ks=(1,), classes=(0,),
                                            models=(ModelSpec("m", arch="digits_mlp"),),
                                            train_epochs=1), **bad})
        run_experiment(config, tmp_path / "s.sqlite", models_dir=tmp_path / "models")

    for bad in (dict(ks=(1000,)), dict(layers=("nosuch",)), dict(ks=(1, 1)), dict(seed=-1),
                dict(name="../../x")):
        with pytest.raises(DeepFaultError):
            make_and_run(bad)
        assert not (tmp_path / "s.sqlite").exists(), bad


def test_group_jobs_carry_only_their_class(tmp_path):
    from deepfault.localization.preset import GroupJob

    data = load_dataset("digits")
    index = np.flatnonzero(data.y_test == 3)
    job = GroupJob(chain_model(in_features=64, classes=10), "m", 3, data.x_test[index], data.y_test[index],
                   index, (CellKey("m", 3, "ochiai", 1, 0),), data.bounds, RunConfig(), (1,), "logits", "cpu")
    assert len(pickle.dumps(job)) < data.x_test.nbytes / 5


# --- store ----------------------------------------------------------------------------------


def _cell(key):
    return Cell(key=key, seed=1, neurons=[], layer_distribution={}, layers=[], num_passed=1, num_failed=1,
                spectrum_seconds=0.1, synthesis_seconds=0.2, input_indices=[1], loss=[0.5], correct=[True],
                pred_original=[0], pred_synthesized=[1], l1=[1.0], l2=[1.0], linf=[0.1], increased=[1.0],
                examples={"originals": np.zeros((1, 2), np.float32)})


def test_store_keeps_every_method_apart_and_resumes(tmp_path):
    with ResultStore(tmp_path / "s.sqlite") as s:
        s.begin("h1", "grid", {"a": 1}, {"p": 1})
        s.begin("h2", "xp", {"b": 2}, {"p": 2}, method="deepxplore")
        write_cell(s, "h1", _cell(CellKey("m", 0, "ochiai", 1, 0)))
        s.put("h2", "deepxplore", "target-0", {"found": 3}, {"inputs": np.ones((3, 2))})
        s.put("h2", "deepxplore", "target-0", {"found": 4})  # idempotent
        s.put("h2", "drfuzz", "c0", {"it": 1})
        s.put("h2", "drfuzz", "c0", {"it": 2}, replace=True)  # a checkpoint overwrites
        assert s.done("h1") == {"m/0/ochiai/1/0"}
        assert s.get("h2", "deepxplore", "target-0").data == {"found": 3}
        assert s.get("h2", "deepxplore", "target-0").arrays["inputs"].shape == (3, 2)
        assert s.get("h2", "drfuzz", "c0").data == {"it": 2}
        assert [e["method"] for e in s.experiments()] == ["deepfault", "deepxplore"]
        assert [c.key for c in read_cells(s, "h1")] == [CellKey("m", 0, "ochiai", 1, 0)]


def test_store_written_by_version_1_is_migrated(tmp_path):
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as db:
        db.executescript(textwrap.dedent("""
            CREATE TABLE experiments (config_hash TEXT PRIMARY KEY, name TEXT NOT NULL, config TEXT NOT NULL,
                provenance TEXT NOT NULL, created TEXT NOT NULL DEFAULT (datetime('now')));
            CREATE TABLE cells (config_hash TEXT NOT NULL, model TEXT NOT NULL, cls INTEGER NOT NULL,
                approach TEXT NOT NULL, k INTEGER NOT NULL, repetition INTEGER NOT NULL,
                seed INTEGER NOT NULL,
                data TEXT NOT NULL, examples BLOB, created TEXT NOT NULL DEFAULT (datetime('now')),
                PRIMARY KEY (config_hash, model, cls, approach, k, repetition));
        """))
        data = _cell(CellKey("m", 2, "dstar", 5, 0)).data()
        seed = data.pop("seed")
        db.execute("INSERT INTO experiments (config_hash, name, config, provenance) "
                   "VALUES ('h', 'n', '{}', '{}')")
        import json

        db.execute("INSERT INTO cells (config_hash, model, cls, approach, k, repetition, seed, data) "
                   "VALUES ('h', 'm', 2, 'dstar', 5, 0, ?, ?)", (seed, json.dumps(data)))
    with pytest.raises(DeepFaultError, match="format of deepfault 0.1; open it once for writing"):
        ResultStore(path, readonly=True)
    with ResultStore(path) as s:
        (cell,) = list(read_cells(s, "h"))
        assert cell.key == CellKey("m", 2, "dstar", 5, 0)
        assert cell.seed == seed
        assert cell.loss == [0.5]
        assert s.experiments()[0]["method"] == "deepfault"


def test_store_refuses_another_programs_database_and_corrupt_cells(tmp_path):
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE customers (id INTEGER)")
    with pytest.raises(DeepFaultError, match="another program's SQLite database"):
        ResultStore(other)
    with sqlite3.connect(other) as db:
        assert [r[0] for r in db.execute("SELECT name FROM sqlite_master")] == ["customers"]
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database at all" * 100)
    with pytest.raises(DeepFaultError, match="cannot use .* as a results store"):
        ResultStore(junk)
    path = tmp_path / "s.sqlite"
    with ResultStore(path) as s:
        s.begin("h", "n", {}, {})
        s.put("h", "deepfault", "m/0/ochiai/1/0", {"x": 1})
    with sqlite3.connect(path) as db:
        db.execute("UPDATE cells SET data = '{broken'")
    with ResultStore(path) as s, pytest.raises(DeepFaultError, match="corrupt"):
        list(s.records("h", "deepfault"))


def test_a_second_writer_is_refused_at_once(tmp_path):
    """Two runs on one store used to compute every cell twice."""
    path = tmp_path / "s.sqlite"
    ResultStore(path).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from deepfault.experiment.store import ResultStore
            with ResultStore({str(path)!r}) as s, s.writer():
                print("locked", flush=True)
                time.sleep(30)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        busy = "another deepfault process is writing"
        with ResultStore(path) as s, pytest.raises(DeepFaultError, match=busy), s.writer():
            pass
    finally:
        holder.kill()
        holder.wait()
    with ResultStore(path) as s, s.writer():  # released when the holder died
        pass


# --- executors ---------------------------------------------------------------------------------


def _square(x):
    return x * x


def test_executors_map_every_job_once():
    for name in ("serial", "process"):
        with get_executor(name, workers=2) as ex:
            assert sorted(ex.map(_square, range(5))) == [(i, i * i) for i in range(5)]
    with pytest.raises(DeepFaultError, match="unknown executor 'cluster'"):
        get_executor("cluster")
    with pytest.raises(DeepFaultError, match="only applies to the 'ray' executor"):
        get_executor("process", address="ray://x:1")


TINY = ExperimentConfig(
    name="tiny", dataset="digits", models=(ModelSpec("mlp", arch="digits_mlp"),), ks=(1, 2),
    approaches=("ochiai", "random"), classes=(0, 5), random_repetitions=2, inputs_per_class=4,
    train_epochs=3, train_lr=3e-3,
)


def _stored(path, h):
    with ResultStore(path) as s:
        out = {}
        for c in read_cells(s, h):
            d = c.data()
            d.pop("synthesis_seconds")
            d.pop("spectrum_seconds")
            out[c.key] = d
        return out


def test_ray_grid_equals_serial_grid(tmp_path):
    pytest.importorskip("ray")
    models = tmp_path / "models"
    serial = run_experiment(TINY, tmp_path / "serial.sqlite", models_dir=models, executor="serial")
    on_ray = run_experiment(TINY, tmp_path / "ray.sqlite", models_dir=models, executor="ray", workers=2)
    assert on_ray.executor["executor"] == "ray"
    assert on_ray.cells_run == len(plan(TINY, load_dataset("digits")))
    a = _stored(tmp_path / "serial.sqlite", serial.config_hash)
    b = _stored(tmp_path / "ray.sqlite", serial.config_hash)
    assert a.keys() == b.keys()
    for key in a:
        for field in ("neurons", "input_indices", "correct", "pred_synthesized", "seed"):
            assert a[key][field] == b[key][field], (key, field)
        np.testing.assert_allclose(a[key]["loss"], b[key]["loss"], rtol=1e-5, atol=1e-6)


def test_prepare_names_the_file_and_records_the_layout(tmp_path):
    from deepfault.models.zoo import build_model

    mf = ModelFile(build_model("digits_mlp"), "digits_mlp", {}, dataset="digits", bounds=(0.0, 1.0),
                   meta={"input_shape": [64]})
    save_model(tmp_path / "flat.pt", mf)
    prepared = prepare_model(tmp_path / "flat.pt", data_dir=None)
    assert prepared.name == "flat.pt"
    assert prepared.layout == "flat"
    # the data stays native (channels first); the flat model is adapted to it
    assert prepared.data.input_shape == (1, 8, 8)
    assert prepared.adapter == "flat"
    assert prepared.module(torch.as_tensor(prepared.data.x_test[:2])).shape == (2, 10)
    default = prepare_model(None)
    assert default.layout
    assert default.name == "digits_mlp"


def test_grid_of_model_files_records_no_training_recipe(tmp_path):
    from deepfault.models.zoo import build_model

    mf = ModelFile(build_model("digits_mlp"), "digits_mlp", {}, dataset="digits", bounds=(0.0, 1.0))
    save_model(tmp_path / "m.pt", mf)
    config = ExperimentConfig(name="files", dataset="digits", ks=(1,), classes=(0,), approaches=("ochiai",),
                              models=(ModelSpec("m", file=str(tmp_path / "m.pt")),))
    run_experiment(config, tmp_path / "s.sqlite")
    with ResultStore(tmp_path / "s.sqlite") as s:
        recorded = s.experiments()[0]["config"]
    assert not {"train_epochs", "train_lr", "train_schedule"} & set(recorded)


def test_written_files_follow_the_umask(tmp_path):
    import os

    from deepfault._io import write_json
    from deepfault.checks import check_writable

    old = os.umask(0o022)
    try:
        write_json(tmp_path / "r.json", {"a": 1})
        assert (tmp_path / "r.json").stat().st_mode & 0o777 == 0o644
    finally:
        os.umask(old)
    check_writable(tmp_path / "new" / "sub" / "o.json")
    assert not (tmp_path / "new").exists()  # checking creates nothing
