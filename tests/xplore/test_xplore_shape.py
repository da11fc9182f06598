"""DeepXplore in the one call shape: ``xplore(models, data, config, *, runtime)``, its config's
declared constraints, the old keyword forms (a FutureWarning, the same result) and the outcome
that shows itself.
"""

import argparse
import warnings
from dataclasses import replace

import numpy as np
import pytest

import deepfault
from deepfault.cli._common import add_field
from deepfault.core.constraints import Flag, constraints, undeclared
from deepfault.core.runtime import Runtime
from deepfault.data import Dataset
from deepfault.errors import DeepFaultError
from deepfault.experiment.method import METHODS
from deepfault.xplore import XploreConfig, load_inputs, search, xplore
from helpers.xplore_models import conv

pytestmark = pytest.mark.filterwarnings("ignore:.*hardly images:UserWarning")

NAMES = ("a", "b", "c")
CONFIG = XploreConfig(seeds=24, step_size=0.3, iterations=10, lambda1=2, lambda2=0.5)


def _models():
    return [conv(0.0), conv(0.02), conv(-0.02)]


def _pool():
    rng = np.random.default_rng(0)
    return rng.uniform(0, 1, (40, 1, 6, 6)).astype(np.float32), rng.integers(0, 3, 40)


def _same(a, b):
    assert a.model_names == b.model_names
    for key in ("inputs", "seeds", "seed_index", "iteration", "predictions", "target", "l1"):
        np.testing.assert_array_equal(getattr(a.found, key), getattr(b.found, key))
    np.testing.assert_array_equal(a.seed_predictions, b.seed_predictions)
    da, db = a.to_dict(), b.to_dict()
    for d in (da, db):
        for key in ("seconds", "seconds_per_found", "first_found_seconds", "trace"):
            d.pop(key)
    assert da == db


def test_every_field_is_declared_and_the_api_and_the_cli_refuse_the_same_values():
    assert undeclared(XploreConfig) == []
    parser = argparse.ArgumentParser(exit_on_error=False)
    for name, c in constraints(XploreConfig).items():
        if name not in ("bounds", "fixed"):  # read from files by the command (--feature-bounds, --fix-*)
            add_field(parser, XploreConfig, name)
        for bad in c.invalid():
            with pytest.raises(DeepFaultError, match=rf"^{name} must be "):
                XploreConfig(**{name: bad})
            if isinstance(bad, str) and bad and not isinstance(c, Flag) and name not in ("bounds", "fixed"):
                with pytest.raises(DeepFaultError, match="must be"):
                    c.parse(name, bad)


def test_the_config_takes_random_and_lists():
    assert XploreConfig(target="random").target is None
    assert XploreConfig(seed_indices=[3, 1], occlusion=[1, 2, 3, 4]).seed_indices == (3, 1)
    assert "bounds" not in XploreConfig(bounds=(0.0, 1.0)).to_dict()  # result files keep their keys
    assert deepfault.XploreConfig is XploreConfig
    assert xplore in METHODS.get("deepxplore").entries


def test_the_one_shape_equals_the_old_keywords_which_warn():
    pool, labels = _pool()
    new = xplore(dict(zip(NAMES, _models(), strict=True)), (pool, labels),
                 replace(CONFIG, bounds=(0.0, 1.0)), runtime=Runtime(batch_size=7))
    with pytest.warns(FutureWarning, match="deprecated"):
        old = xplore(_models(), pool, config=CONFIG, bounds=(0.0, 1.0), names=list(NAMES), labels=labels,
                     batch_size=7)
    _same(new, old)
    np.testing.assert_array_equal(new.true_labels, old.true_labels)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        xplore(_models(), pool, CONFIG)


def test_search_keeps_its_old_keywords_with_a_warning():
    pool, _ = _pool()
    new = search(dict(zip(NAMES, _models(), strict=True)), pool[:12], CONFIG, runtime=Runtime(threads=None))
    with pytest.warns(FutureWarning, match="search"):
        old = search(_models(), pool[:12], config=CONFIG, names=list(NAMES), threads=None, chunk_size=5)
    _same(new, old)
    with pytest.raises(TypeError, match="unexpected keyword arguments: nosuch"):
        search(_models(), pool[:12], nosuch=1)


def test_a_dataset_brings_its_labels_bounds_and_names_to_the_summary(tmp_path):
    pool, labels = _pool()
    data = Dataset(name="tiny", x_train=pool, y_train=labels, x_test=pool, y_test=labels, bounds=(0.0, 1.0),
                   class_names=("zero", "one", "two"))
    result = xplore(dict(zip(NAMES, _models(), strict=True)), data, CONFIG)
    plain = xplore(dict(zip(NAMES, _models(), strict=True)), (pool, labels), CONFIG)
    _same(result, plain)
    text = result.summary()
    assert "data tiny: 24 seeds of 40 test inputs (seed 0), bounds 0..1" in text
    assert "neurons of a: " in text
    assert "Which model is right on the" in text
    body = result.payload()
    assert not {"config", "device"} & set(body)
    assert [m["name"] for m in body["models"]] == list(NAMES)
    written = {a.name: a.write(tmp_path / f"x{a.suffix}") for a in result.outputs()}
    assert len(load_inputs(written["inputs"])["inputs"]) == result.num_found > 0
    assert written["grid"].stat().st_size > 0


def test_bad_data_and_runtime_are_refused():
    pool, _ = _pool()
    with pytest.raises(DeepFaultError, match="config must be a XploreConfig"):
        xplore(_models(), pool, {"seeds": 3})
    with pytest.raises(DeepFaultError, match="runtime must be a deepfault Runtime"):
        xplore(_models(), pool, CONFIG, runtime="cpu")
    with pytest.raises(DeepFaultError, match=r"^bounds must be a pair"):
        XploreConfig(bounds=7)
