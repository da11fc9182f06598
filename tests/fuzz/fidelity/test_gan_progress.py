"""The discriminator's first training shows its progress: plain lines when standard error is
not a terminal (here: pytest's capture), with the batches, the epoch, elapsed and time left."""

from __future__ import annotations

import logging

import numpy as np

from deepfault.data import Dataset


def _tiny():
    rng = np.random.default_rng(0)
    return Dataset("mnist", rng.random((64, 1, 16, 16), dtype=np.float32), rng.integers(0, 2, 64),
                   rng.random((20, 1, 16, 16), dtype=np.float32), rng.integers(0, 2, 20), (0.0, 1.0),
                   ("a", "b"))


def test_first_training_logs_lines_when_not_a_terminal(tmp_path, monkeypatch, caplog):
    from deepfault.core import progress
    from deepfault.fuzz.fidelity import gan

    monkeypatch.setenv("DEEPFAULT_CACHE", str(tmp_path / "cache"))
    recipe = gan.GanConfig(epochs=2, batch_size=16, images_per_epoch=32, seed=0)
    monkeypatch.setattr(gan, "AUTO_RECIPE", recipe)
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.0)  # a tiny interval: a line at every batch
    with caplog.at_level(logging.INFO, logger="deepfault.progress"):
        gan.cached_discriminator("mnist", data=_tiny())  # the default: progress shown
    lines = [r.getMessage() for r in caplog.records if r.name == "deepfault.progress"]
    assert len(lines) >= 4  # 2 epochs x 2 batches, and the closing line
    assert lines[0].startswith("gan: 1/4 batch, ")
    assert "s left" in lines[0]
    assert "epoch=1/2" in lines[0]
    assert any("epoch=2/2" in line for line in lines)
    assert all("\r" not in line for line in lines)


def test_no_progress_means_no_line(tmp_path, monkeypatch, caplog):
    from deepfault.core import progress
    from deepfault.fuzz.fidelity import gan

    monkeypatch.setenv("DEEPFAULT_CACHE", str(tmp_path / "cache"))
    recipe = gan.GanConfig(epochs=1, batch_size=16, images_per_epoch=32, seed=0)
    monkeypatch.setattr(gan, "AUTO_RECIPE", recipe)
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.0)
    with caplog.at_level(logging.INFO, logger="deepfault.progress"):
        gan.cached_discriminator("mnist", data=_tiny(), progress=False)
    assert not [r for r in caplog.records if r.name == "deepfault.progress"]
