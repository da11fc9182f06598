"""The deepxplore-mnist preset and its report, on a tiny stand-in for MNIST (offline)."""

import numpy as np
import pytest
import torch

from deepfault.data import Dataset
from deepfault.experiment.presets import get_preset
from deepfault.experiment.store import ResultStore
from deepfault.models import ModelFile, build_model, save_model
from deepfault.xplore.preset import (
    DEEPXPLORE_MNIST,
    DeepXploreMnist,
    XplorePresetConfig,
    run_deepxplore_mnist,
)
from deepfault.xplore.report import render_report

TINY = XplorePresetConfig(seeds=12, repeats=1, iterations=3, figure9_inputs=4, figure9_seeds=12,
                    thresholds=(0.0, 0.5))


@pytest.fixture
def tiny_mnist(monkeypatch, tmp_path):
    """30 random 28x28 'MNIST' test images and untrained LeNets in a models folder."""
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (30, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, 30)
    data = Dataset("mnist", x[:0], y[:0], x, y, (0.0, 1.0), tuple(str(i) for i in range(10)))
    monkeypatch.setattr("deepfault.data.load_dataset", lambda name, **kw: data)
    models = tmp_path / "models"
    for i, arch in enumerate(("lenet1", "lenet4", "lenet5")):
        torch.manual_seed(i)
        save_model(models / f"{arch}-mnist.pt", ModelFile(build_model(arch), arch, dataset="mnist",
                                                          bounds=(0.0, 1.0)))
    return models


def test_preset_is_registered():
    preset = get_preset(DEEPXPLORE_MNIST)
    assert preset.method == "deepxplore"
    assert isinstance(preset, DeepXploreMnist)


def test_preset_writes_every_cell_resumes_and_reports(tmp_path, tiny_mnist):
    store_path = tmp_path / "x.sqlite"
    summary = run_deepxplore_mnist(store_path, models_dir=tiny_mnist, config=TINY,
                                   argv=["deepfault", "experiment"])
    assert summary.cells_total == summary.cells_run == 3 + 2 + 2
    again = run_deepxplore_mnist(store_path, models_dir=tiny_mnist, config=TINY)
    assert again.cells_run == 0
    assert again.config_hash == summary.config_hash
    with ResultStore(store_path, readonly=True) as store:
        ids = sorted(store.done(summary.config_hash, "deepxplore"))
        assert ids == ["figure9/t=0", "figure9/t=0.5", "table2/target=lenet1/seed=0",
                       "table2/target=lenet4/seed=0", "table2/target=lenet5/seed=0",
                       "table5/lambda2=0/seed=0", "table5/lambda2=1/seed=0"]
        cell = store.get(summary.config_hash, "deepxplore", "table2/target=lenet4/seed=0")
        assert cell.data["config"]["target"] == 1
        assert cell.data["seeds"] == 12
        assert set(cell.data["per_target"][0]) >= {"target", "found", "mean_l1"}
        fig = store.get(summary.config_hash, "deepxplore", "figure9/t=0.5").data["figure9"]
        assert set(fig["methods"]) == {"deepxplore", "random", "fgsm"}
        report = render_report(store, summary.config_hash, tmp_path / "report")
    assert "Table 2" in report["markdown"]
    assert "Table 5" in report["markdown"]
    assert "Figure 9" in report["html"]
    names = {p.rsplit("/", 1)[-1] for p in report["files"]}
    assert {"table2.md", "table2.csv", "table2.json", "table5.md", "figure9.csv", "figure9.png"} <= names
    assert "| lenet1 | 1 | 12 |" in (tmp_path / "report" / "table2.md").read_text()


def test_compat_settings_reach_every_cell_and_options_override(tmp_path, tiny_mnist):
    from deepfault.xplore import XploreConfig

    summary = run_deepxplore_mnist(tmp_path / "a.sqlite", models_dir=tiny_mnist, config=TINY)
    with ResultStore(tmp_path / "a.sqlite", readonly=True) as store:
        cell = store.get(summary.config_hash, "deepxplore", "table2/target=lenet5/seed=0").data
        t5 = store.get(summary.config_hash, "deepxplore", "table5/lambda2=1/seed=0").data
    published = XploreConfig.published()
    for key in ("clip", "neurons", "layers", "replace", "step", "transform"):
        assert cell["config"][key] == getattr(published, key) == t5["config"][key]
    assert cell["config"]["target"] == 2
    assert t5["config"]["target"] == 0
    assert t5["config"]["threshold"] == 0.25
    assert set(cell["realism"]) >= {"mean_l1", "mean_linf", "saturated", "still_differ_clipped"}
    other = run_deepxplore_mnist(tmp_path / "b.sqlite", models_dir=tiny_mnist, config=TINY,
                       options={"settings": "default", "iterations": "2"})
    assert other.config_hash != summary.config_hash
    with ResultStore(tmp_path / "b.sqlite", readonly=True) as store:
        cfg = store.get(other.config_hash, "deepxplore", "table2/target=lenet1/seed=0").data["config"]
    assert cfg["clip"] is True
    assert cfg["step"] == XploreConfig().step
    assert cfg["iterations"] == 2


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"colour": "red"}, "preset 'deepxplore-mnist' has no option 'colour'; its options: iterations, "
                            "repeats, seeds, settings, weights-dir"),
        ({"seeds": "many"}, "preset option seeds must be an integer >= 1; got 'many'"),
        ({"settings": "paper"}, "preset option settings must be one of compat, default; got 'paper'"),
        ({"weights-dir": "nowhere"}, "weights-dir 'nowhere' lacks Model1.h5, Model2.h5, Model3.h5"),
    ],
)
def test_bad_preset_options_are_named(tmp_path, tiny_mnist, options, message):
    from deepfault.errors import DeepFaultError

    with pytest.raises(DeepFaultError, match=message.replace("(", r"\(").replace(")", r"\)")):
        run_deepxplore_mnist(tmp_path / "x.sqlite", models_dir=tiny_mnist, config=TINY, options=options)


def test_published_weights_are_loaded_from_the_weights_dir(tmp_path, tiny_mnist):
    pytest.importorskip("h5py")
    from helpers.keras_files import keras_arrays as _keras_arrays
    from helpers.keras_files import write_save_weights as _write_save_weights

    folder = tmp_path / "published"
    folder.mkdir()
    for i, arch in enumerate(("lenet1", "lenet4", "lenet5")):
        torch.manual_seed(10 + i)
        _write_save_weights(folder / f"Model{i + 1}.h5", _keras_arrays(build_model(arch)))
    summary = run_deepxplore_mnist(tmp_path / "w.sqlite", models_dir=tiny_mnist, config=TINY,
                         options={"weights_dir": str(folder)})
    trained = run_deepxplore_mnist(tmp_path / "t.sqlite", models_dir=tiny_mnist, config=TINY)
    assert summary.cells_run == 7
    assert summary.config_hash != trained.config_hash
    with ResultStore(tmp_path / "w.sqlite", readonly=True) as store:
        assert "'weights': 'published'" in str(store.experiments())


def test_the_cli_passes_preset_options_and_refuses_bad_ones(tmp_path, capsys):
    from deepfault.cli import main

    code = main(["experiment", "--preset", DEEPXPLORE_MNIST, "--store", str(tmp_path / "s.sqlite"),
                 "--preset-option", "colour=red", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert "has no option 'colour'" in err
    assert err.count("\n") == 1
    code = main(["experiment", "--preset", DEEPXPLORE_MNIST, "--preset-option", "colour"])
    err = capsys.readouterr().err
    assert code == 2
    assert "expected KEY=VALUE; got 'colour'" in err
