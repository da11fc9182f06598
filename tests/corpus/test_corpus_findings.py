"""Each method's ``findings()``: the inputs it found failing and the labels they should get."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from deepfault.corpus import Corpus
from deepfault.errors import DeepFaultError
from deepfault.xplore import XploreConfig, xplore
from helpers.hardening import lenet


@pytest.fixture(scope="module")
def found():
    """DeepXplore on two LeNet-1s (one with weight noise) from unlabelled random inputs."""
    x = torch.rand(12, 1, 28, 28, generator=torch.Generator().manual_seed(3))
    result = xplore([lenet(0), lenet(0, noise=0.3)], x, XploreConfig(seeds=12, iterations=4))
    assert result.num_found > 0
    return result


def test_xplore_without_labels_expects_the_class_every_model_gave_the_seed(found, tmp_path):
    findings = found.findings(dataset="random")
    assert found.true_labels is None
    np.testing.assert_array_equal(findings.labels, found.found.common_class)
    np.testing.assert_array_equal(findings.inputs, found.found.inputs)
    assert findings.provenance.method == "xplore"
    assert findings.input_shape == (1, 28, 28)
    assert findings.add_to(tmp_path / "c") == len(set(Corpus.open(tmp_path / "c").ids().tolist()))
    assert Corpus.open(tmp_path / "c").dataset == "random"
    assert findings.add_to(tmp_path / "c") == 0


def test_xplore_findings_need_a_data_set_name(found):
    with pytest.raises(DeepFaultError, match="need the data set's name"):
        found.findings()


def test_nothing_found_makes_no_corpus(found, tmp_path):
    empty = found.findings(dataset="random")
    none = replace(empty, inputs=empty.inputs[:0], labels=empty.labels[:0])
    assert none.add_to(tmp_path / "c") == 0
    assert not (tmp_path / "c").exists()
