"""The cached surprise state of run/xplore: fitted once per model, layers and training data, and
never reused for another."""

import logging

import numpy as np
import pytest
import torch

from deepfault.coverage.surprise import fit_surprise
from deepfault.coverage.surprise_cache import SurpriseScorer, cached_surprise
from deepfault.errors import DeepFaultError
from helpers.tiny_models import chain_model


@pytest.fixture
def setup():
    model = chain_model(seed=4).eval()
    x = torch.randn(150, 4, generator=torch.Generator().manual_seed(0))
    return model, x


def test_second_call_loads_the_same_state(tmp_path, setup):
    model, x = setup
    first = cached_surprise(model, x, cache_dir=tmp_path)
    assert first.source == "fitted"
    assert first.path is not None
    assert first.path.is_file()
    assert first.describe().startswith("surprise state fitted and cached (")  # a fresh cache: fitted now
    again = cached_surprise(model, x, cache_dir=tmp_path)
    assert again.source == "cache"
    assert again.describe().startswith("surprise state loaded from the cache (")
    uncached = cached_surprise(model, x, cache_dir=None).describe()
    assert uncached.startswith("surprise state fitted without a cache (")
    assert again.path == first.path
    np.testing.assert_array_equal(again.surprise.ats, first.surprise.ats)
    np.testing.assert_array_equal(again.surprise.classes, first.surprise.classes)
    ref = fit_surprise(model, x)
    assert again.surprise.layers == ref.layers
    np.testing.assert_array_equal(again.surprise.ats, ref.ats)


def test_other_weights_layers_or_data_fit_a_new_state(tmp_path, setup):
    model, x = setup
    base = cached_surprise(model, x, cache_dir=tmp_path).path
    other = chain_model(seed=1).eval()
    paths = {base,
             cached_surprise(other, x, cache_dir=tmp_path).path,
             cached_surprise(model, x, layers=["fc1"], cache_dir=tmp_path).path,
             cached_surprise(model, x[:-1], cache_dir=tmp_path).path,
             cached_surprise(model, x, transform="layer-minmax", cache_dir=tmp_path).path}
    assert len(paths) == 5
    assert len(list(tmp_path.glob("*.npz"))) == 5


def test_a_damaged_cache_file_is_fitted_again(tmp_path, setup, caplog):
    model, x = setup
    path = cached_surprise(model, x, cache_dir=tmp_path).path
    path.write_bytes(b"not an npz")
    with caplog.at_level(logging.WARNING):
        fit = cached_surprise(model, x, cache_dir=tmp_path)
    assert fit.source == "fitted"
    assert "fitting it again" in caplog.text
    assert cached_surprise(model, x, cache_dir=tmp_path).source == "cache"


def test_no_cache_folder_and_an_unwritable_one(tmp_path, setup, caplog):
    model, x = setup
    fit = cached_surprise(model, x, cache_dir=None)
    assert fit.source == "fitted"
    assert fit.path is None
    blocker = tmp_path / "file"
    blocker.write_text("a file where the folder should be")
    with caplog.at_level(logging.WARNING):
        fit = cached_surprise(model, x, cache_dir=blocker / "sub")
    assert fit.path is None
    assert "could not cache" in caplog.text


def test_no_training_inputs_is_an_error(setup):
    model, _ = setup
    with pytest.raises(DeepFaultError, match="needs the training split"):
        cached_surprise(model, np.zeros((0, 4), np.float32), cache_dir=None)


def test_scorer_equals_surprise_score_and_refuses_another_model(setup):
    model, x = setup
    state = fit_surprise(model, x)
    scorer = SurpriseScorer(model, state, kinds="dsa,lsa,mdsa")
    new = torch.randn(20, 4, generator=torch.Generator().manual_seed(9))
    from deepfault.core.batches import activations, predict

    _, ats = activations(model, new, layers=list(state.layers))
    pred = predict(model, new).argmax(1)
    got = scorer(new)
    for kind in ("dsa", "lsa", "mdsa"):
        np.testing.assert_allclose(got[kind], state.score(kind, ats, pred), rtol=1e-6)
    assert {k: v.shape for k, v in scorer(new[:0]).items()} == {"dsa": (0,), "lsa": (0,), "mdsa": (0,)}
    with pytest.raises(DeepFaultError, match="fitted for another model"):
        SurpriseScorer(chain_model(seed=1), state)
