"""A folder checked, before any work, as the place a run's finds go (:meth:`check_destination`)."""

import pytest

from deepfault.corpus import Corpus
from deepfault.errors import DeepFaultError


def test_a_new_or_empty_folder_or_a_corpus_of_the_data_set_takes_the_finds(tmp_path):
    Corpus.check_destination(tmp_path / "new")
    Corpus.check_destination(tmp_path)
    Corpus.open(tmp_path / "c", create=True, dataset="digits", input_shape=(1, 8, 8), num_classes=10)
    Corpus.check_destination(tmp_path / "c", "digits")
    Corpus.check_destination(tmp_path / "c", "other/digits.npz")


def test_a_file_another_folder_or_another_data_set_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(DeepFaultError, match="--corpus"):
        Corpus.check_destination(tmp_path / "f")
    with pytest.raises(DeepFaultError):
        Corpus.check_destination(tmp_path)  # holds f: no corpus
    Corpus.open(tmp_path / "c", create=True, dataset="digits", input_shape=(1, 8, 8), num_classes=10)
    with pytest.raises(DeepFaultError, match="mnist"):
        Corpus.check_destination(tmp_path / "c", "mnist")
