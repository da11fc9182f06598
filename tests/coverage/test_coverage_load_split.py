"""The split a coverage action reads, loaded from a model's declared source (:func:`load_split`)."""

import pytest

from deepfault.coverage.inputs import load_split
from deepfault.errors import DeepFaultError
from deepfault.models.source import ModelSource


def test_load_split_refuses_another_name():
    with pytest.raises(DeepFaultError, match="--split must be 'test', 'train' or an .npz file; got 'val'"):
        load_split(ModelSource(), "val")


def test_the_pass_count_includes_the_training_split_when_a_state_is_fitted_first():
    loaded = load_split(ModelSource(), "test")
    test, train = len(loaded.data.x_test), len(loaded.model.data.x_train)
    assert loaded.label.endswith(" test")
    assert loaded.pass_count() == test
    assert loaded.pass_count(fit_first=True) == max(test, train)
