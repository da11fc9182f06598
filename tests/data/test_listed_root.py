"""The data root ``deepfault data list`` lists (:func:`listed_root`)."""

import pytest

from deepfault.data import default_data_dir
from deepfault.data.listing import listed_root
from deepfault.errors import DeepFaultError


def test_a_given_folder_must_exist(tmp_path):
    assert listed_root(str(tmp_path)) == tmp_path
    assert listed_root(None) == default_data_dir(None)
    with pytest.raises(DeepFaultError, match="is not a folder; give the folder that holds the data sets"):
        listed_root(str(tmp_path / "missing"))
