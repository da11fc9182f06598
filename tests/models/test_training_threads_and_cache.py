"""Training follows every command's thread rule, and nothing half-trained is ever cached
(issue 44, items 2 and 3).

An interruption is injected where Ctrl-C or SIGTERM lands in a real run: inside the training
loop, after the first epoch finished (the case that cached a model at 4% test accuracy).
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from deepfault.cli import main
from deepfault.core import entry as entry_module
from deepfault.core import threads as threads_module
from deepfault.data import Dataset
from deepfault.models import ModelFile, build_model, load_model, save_model
from deepfault.models import train as train_module
from deepfault.models.io import near_chance, training_finished
from deepfault.models.train import TrainConfig, fit, train_model, trained_model


def _tiny_digits(n=48, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.random((n, 1, 8, 8), dtype=np.float32)
    y = rng.integers(0, classes, n)
    return x, y


@pytest.fixture
def busy_machine(monkeypatch):
    """A 2-core machine with one core busy elsewhere, as ``auto`` sees it; PyTorch at 2 threads."""
    monkeypatch.delenv(entry_module.THREADS_ENV, raising=False)  # 'auto' as a user gets it
    monkeypatch.setattr(threads_module, "usable_cores", lambda: 2)
    monkeypatch.setattr(threads_module, "busy_cores", lambda *a, **k: 1.0)
    monkeypatch.setattr(entry_module, "_last_auto", [])
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def _interrupt_after_first_epoch(monkeypatch, loop=train_module._Loop, method="epoch"):
    """Make a training loop's ``method(self, epoch_index, ...)`` raise KeyboardInterrupt in its
    second epoch (Ctrl-C there).
    """
    epoch = getattr(loop, method)

    def interrupted(self, index, *args):
        if index >= 1:
            raise KeyboardInterrupt
        return epoch(self, index, *args)

    monkeypatch.setattr(loop, method, interrupted)


# --- one thread rule ------------------------------------------------------------------------------


def test_fit_at_auto_trains_on_the_free_cores_and_restores_the_setting(busy_machine, monkeypatch):
    seen = []
    epoch = train_module._Loop.epoch
    monkeypatch.setattr(train_module._Loop, "epoch",
                        lambda self, i, p: (seen.append(torch.get_num_threads()), epoch(self, i, p))[1])
    x, y = _tiny_digits()
    result = fit(build_model("digits_mlp", num_classes=3), x, y, TrainConfig(epochs=1, seed=0))
    assert seen == [1]
    assert result.threads == 1
    assert torch.get_num_threads() == 2  # restored


def test_fit_takes_a_count_as_given_and_none_as_pytorchs_setting(busy_machine):
    x, y = _tiny_digits()
    config = TrainConfig(epochs=1, seed=0)
    assert fit(build_model("digits_mlp", num_classes=3), x, y, config, threads=2).threads == 2
    assert fit(build_model("digits_mlp", num_classes=3), x, y, config, threads=None).threads == 2


def test_the_threads_environment_variable_overrides_auto(busy_machine, monkeypatch):
    monkeypatch.setenv(entry_module.THREADS_ENV, "2")
    x, y = _tiny_digits()
    assert fit(build_model("digits_mlp", num_classes=3), x, y, TrainConfig(epochs=1)).threads == 2


def test_the_thread_count_does_not_change_what_is_learnt(busy_machine):
    x, y = _tiny_digits()
    weights = []
    for threads in (1, 2):
        torch.manual_seed(0)
        model = build_model("digits_mlp", num_classes=3)
        fit(model, x, y, TrainConfig(epochs=2, seed=0), threads=threads)
        weights.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    torch.testing.assert_close(weights[0], weights[1], rtol=1e-4, atol=1e-5)


def test_train_command_at_default_threads_trains_on_the_free_cores(busy_machine, tmp_path, capsys):
    code = main(["train", "--arch", "digits_mlp", "--dataset", "digits", "--epochs", "1", "--no-progress",
                 "--out", str(tmp_path / "m.pt")])
    assert code == 0, capsys.readouterr().err
    assert load_model(tmp_path / "m.pt").meta["training"]["threads"] == 1
    assert torch.get_num_threads() == 2


# --- nothing half-trained is cached -------------------------------------------------------------


def test_an_interrupted_first_use_training_caches_nothing_and_exits_130(tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    monkeypatch.setenv("DEEPFAULT_CACHE", str(cache))
    _interrupt_after_first_epoch(monkeypatch)
    args = ["xplore", "--no-progress", "--model", "digits_mlp,digits_mlp", "--arch", "digits_mlp",
            "--dataset", "digits", "--models-dir", str(tmp_path / "none"), "--num-seeds", "4",
            "--iterations", "1", "--out", "-"]
    assert main(args) == 130
    assert not [p for p in cache.rglob("*") if p.is_file()]  # nothing cached, not even a temporary
    assert "trained digits_mlp" not in capsys.readouterr().err
    monkeypatch.undo()  # the next run is not interrupted: it trains to the end and caches that
    monkeypatch.setenv("DEEPFAULT_CACHE", str(cache))
    assert main(args) == 0
    (cached,) = (cache / "models").glob("digits_mlp-digits-*.pt")
    mf = load_model(cached)
    assert training_finished(mf)
    assert mf.meta["training"]["epochs_completed"] == 10
    assert 0.0 <= mf.meta["test_accuracy"] <= 1.0


def test_a_cached_file_left_by_an_interrupted_training_is_trained_again(tmp_path, monkeypatch):
    from deepfault.data import load_dataset
    from deepfault.models import several

    monkeypatch.setenv("DEEPFAULT_CACHE", str(tmp_path / "cache"))
    data = load_dataset("digits")
    path = several.zoo_cache_file("digits_mlp", data)
    meta = {"zoo_first_use": several.ZOO_RECIPE_VERSION, "test_accuracy": 0.04,
            "training": {"epochs_completed": 1, "interrupted": True}}
    stale = ModelFile(build_model("digits_mlp"), "digits_mlp", {"num_classes": 10}, dataset="digits",
                      bounds=(0.0, 1.0), meta=meta)
    save_model(path, stale)
    mf = several.open_xplore_model("digits_mlp", dataset="digits", data=data, models_dir=tmp_path,
                                   progress=False)
    assert training_finished(mf)
    assert training_finished(load_model(path))


def test_trained_model_interrupted_raises_and_writes_nothing(tmp_path, monkeypatch):
    _interrupt_after_first_epoch(monkeypatch)
    x, y = _tiny_digits(n=40, classes=3)
    data = Dataset("tiny", x, y, x[:10], y[:10], (0.0, 1.0), ("a", "b", "c"))
    with pytest.raises(KeyboardInterrupt):
        trained_model("digits_mlp", data, tmp_path / "m.pt", TrainConfig(epochs=3))
    assert not list(tmp_path.iterdir())


def test_an_interrupted_discriminator_training_caches_nothing(tmp_path, monkeypatch):
    from deepfault.fuzz.fidelity import gan

    monkeypatch.setenv("DEEPFAULT_CACHE", str(tmp_path / "cache"))
    recipe = gan.GanConfig(epochs=3, batch_size=16, images_per_epoch=32, seed=0)
    monkeypatch.setattr(gan, "AUTO_RECIPE", recipe)
    _interrupt_after_first_epoch(monkeypatch, gan._GanTraining, "_epoch")
    rng = np.random.default_rng(0)
    tiny = Dataset("mnist", rng.random((64, 1, 16, 16), dtype=np.float32), rng.integers(0, 2, 64),
                   rng.random((20, 1, 16, 16), dtype=np.float32), rng.integers(0, 2, 20), (0.0, 1.0),
                   ("a", "b"))
    with pytest.raises(KeyboardInterrupt):
        gan.cached_discriminator("mnist", data=tiny, progress=False)
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]


# --- what a model file records, and the warning at chance -------------------------------------


def test_a_trained_model_records_that_its_training_finished_and_its_accuracy():
    x, y = _tiny_digits(n=40, classes=3)
    data = Dataset("tiny", x, y, x[:10], y[:10], (0.0, 1.0), ("a", "b", "c"))
    mf, result = train_model("digits_mlp", data, TrainConfig(epochs=1), arch_kwargs={"num_classes": 3},
                             threads=1)
    assert result.finished
    assert mf.meta["training"]["finished"] is True
    assert mf.meta["training"]["threads"] == 1
    assert isinstance(mf.meta["test_accuracy"], float)


def test_a_model_at_chance_is_warned_about_wherever_it_is_opened(tmp_path, caplog, capsys, monkeypatch):
    def saved(name, accuracy):
        path = tmp_path / name
        save_model(path, ModelFile(build_model("digits_mlp"), "digits_mlp", {"num_classes": 10},
                                   dataset="digits", bounds=(0.0, 1.0), meta={"test_accuracy": accuracy}))
        return path

    chance, fine = saved("chance.pt", 0.0428), saved("fine.pt", 0.93)
    with caplog.at_level(logging.WARNING, logger="deepfault.models.io"):
        assert near_chance(load_model(chance))
        assert not near_chance(load_model(fine))
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1
    assert "chance.pt is at chance: its recorded test accuracy is 0.0428" in messages[0]
    assert "deepfault train" in messages[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        load_model(chance)
    assert "is at chance" not in caplog.text  # once per file and process
    import deepfault.models.io as model_io

    monkeypatch.setattr(model_io, "_WARNED", set())  # a new process: the command line
    with caplog.at_level(logging.WARNING):
        main(["inspect", str(chance)])
    assert "is at chance" in caplog.text
