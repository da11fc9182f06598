"""Names that moved or were renamed still import from their old place, with a DeprecationWarning."""

import importlib

import pytest

MOVED = [
    ("deepfault.checks", "MAX_BATCH", "deepfault.checks", "MAX_INPUTS"),
    ("deepfault.fuzz.pairs.deploy", "make_deployment", "deepfault.models.deploy", "make_deployment"),
    ("deepfault.fuzz.pairs.deploy", "DEPLOY_FORMATS", "deepfault.models.deploy", "DEPLOY_FORMATS"),
    ("deepfault.fuzz.pairs.scenarios", "quantize_int8", "deepfault.models.deploy", "quantize_int8"),
    ("deepfault.fuzz.pairs.scenarios", "prune_weights", "deepfault.models.deploy", "prune_weights"),
    ("deepfault.fuzz.preset", "run_preset", "deepfault.fuzz.preset", "run_drfuzz_mnist"),
    ("deepfault.xplore.preset", "run_preset", "deepfault.xplore.preset", "run_deepxplore_mnist"),
    ("deepfault.xplore.results", "SSIM_THRESHOLD", "deepfault.xplore.realism", "VISIBLE_CHANGE_SSIM"),
]


@pytest.mark.parametrize(("old_module", "old", "new_module", "new"), MOVED)
def test_an_old_name_warns_and_is_the_new_one(old_module, old, new_module, new):
    with pytest.warns(DeprecationWarning, match=f"{old_module}.{old} is deprecated; use {new_module}.{new}"):
        value = getattr(importlib.import_module(old_module), old)
    assert value is getattr(importlib.import_module(new_module), new)


def test_an_unknown_name_is_still_an_attribute_error():
    module = importlib.import_module("deepfault.fuzz.pairs.deploy")
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        module.nothing  # noqa: B018
