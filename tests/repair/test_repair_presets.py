"""The two repair presets and their report, on a tiny stand-in for MNIST (offline)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from deepfault.data import Dataset
from deepfault.experiment.presets import get_preset
from deepfault.experiment.store import ResultStore
from deepfault.models import ModelFile, build_model, save_model
from deepfault.repair import RepairConfig
from deepfault.repair import preset as rp
from deepfault.repair.report import render_report

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _lenet(arch: str, seed: int, noise: float = 0.0):
    torch.manual_seed(0)
    m = build_model(arch).eval()
    if noise:
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in m.parameters():
                p.add_(torch.randn(p.shape, generator=g) * noise)
    return m


@pytest.fixture
def tiny_mnist(monkeypatch, tmp_path):
    """'MNIST' of random 28x28 images labelled by one LeNet-1 (60 test, 150 training)."""
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (210, 1, 28, 28)).astype(np.float32)
    with torch.no_grad():
        y = _lenet("lenet1", 0)(torch.as_tensor(x)).argmax(1).numpy()
    data = Dataset("mnist", x[60:], y[60:], x[:60], y[:60], (0.0, 1.0), tuple(str(i) for i in range(10)))
    monkeypatch.setattr("deepfault.data.load_dataset", lambda name, **kw: data)
    rp._dataset.cache_clear()
    yield data
    rp._dataset.cache_clear()


def test_presets_are_registered():
    for name, cls in (
        (rp.DEEPXPLORE_PRESET, rp.RepairDeepXploreMnist),
        (rp.DRFUZZ_PRESET, rp.RepairDRFuzzMnist),
    ):
        preset = get_preset(name)
        assert preset.method == "repair"
        assert isinstance(preset, cls)


def test_deepxplore_preset_cells_resume_and_report(tmp_path, tiny_mnist):
    models = tmp_path / "models"
    # three LeNet-1 that differ a little, so DeepXplore has differences to find (stand-ins for LeNet-1/4/5)
    for i, (arch, noise) in enumerate((("lenet1", 0.0), ("lenet4", 0.03), ("lenet5", 0.03))):
        save_model(
            models / f"{arch}-mnist.pt",
            ModelFile(_lenet("lenet1", i, noise), "lenet1", {"num_classes": 10}, "mnist", (0.0, 1.0)),
        )
    tiny = rp.DeepXploreRepairConfig(
        repeats=2,
        seeds=60,
        iterations=10,
        found_inputs=30,
        repair=RepairConfig(mix=1.0, epochs=1, ties="seed", baselines=("random-test", "fgsm")),
    )
    store_path = tmp_path / "r.sqlite"
    summary = rp.run_deepxplore_preset(store_path, models_dir=models, config=tiny, argv=["deepfault"])
    assert summary.cells_total == summary.cells_run == 2 + 2 * 3
    again = rp.run_deepxplore_preset(store_path, models_dir=models, config=tiny)
    assert again.cells_run == 0
    assert again.config_hash == summary.config_hash
    with ResultStore(store_path, readonly=True) as store:
        done = store.done(summary.config_hash, "repair")
        assert "deepxplore/repeat=1/model=lenet4" in done
        assert "deepxplore/repeat=0/found" in done
        cell = store.get(summary.config_hash, "repair", "deepxplore/repeat=0/model=lenet5")
        if "error" not in cell.data:
            assert [a["name"] for a in cell.data["approaches"]] == ["found", "random-test", "fgsm"]
        section = render_report(store, summary.config_hash, tmp_path / "report")
    assert section["title"] and "<table>" in section["html"] or "Cells without a repair" in section["html"]


def test_drfuzz_preset_cells_resume_and_report(tmp_path, tiny_mnist):
    tiny = rp.DRFuzzRepairConfig(
        arch="lenet1",
        scenarios=("supply",),
        seeds=(0,),
        budget="30it",
        sections=10,
        epochs=1,
        repair=RepairConfig(mix=1.0, epochs=1, baselines=()),
    )
    store_path = tmp_path / "d.sqlite"
    summary = rp.run_drfuzz_preset(store_path, models_dir=tmp_path / "models", config=tiny)
    assert summary.cells_total == summary.cells_run == 2 + 2
    again = rp.run_drfuzz_preset(store_path, models_dir=tmp_path / "models", config=tiny)
    assert again.cells_run == 0
    assert again.config_hash == summary.config_hash
    with ResultStore(store_path, readonly=True) as store:
        done = store.done(summary.config_hash, "repair")
        assert done >= {
            "supply/faults/drfuzz/seed0",
            "supply/faults/deephunter/seed0",
            "supply/repair/train=drfuzz/seed0",
            "supply/repair/train=deephunter/seed0",
        }
        faults = store.get(summary.config_hash, "repair", "supply/faults/drfuzz/seed0")
        assert set(faults.arrays) >= {"inputs", "seed_index", "label", "m1_pred"}
        section = render_report(store, summary.config_hash, tmp_path / "report")
    assert section["html"]
