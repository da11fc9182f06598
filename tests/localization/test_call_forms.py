"""The old call forms of the protocol's and the evaluation's public functions still answer
(with a FutureWarning), and give what the new forms give.
"""

import numpy as np
import pytest
import torch

from deepfault.localization.protocol import CellSpec, GroupInputs, RunConfig, run_group
from helpers.tiny_models import chain_model


def _data(n: int = 40):
    g = torch.Generator().manual_seed(0)
    x = torch.rand(n, 4, generator=g) * 2 - 1
    y = (x[:, 0] > 0).long().numpy()
    return x, y


def test_run_group_old_form_warns_and_gives_the_same_group():
    model, (x, y) = chain_model(), _data()
    cells = [CellSpec("tarantula", 2)]
    config = RunConfig(num_inputs=3)
    new = run_group(model, GroupInputs(x, y, (-1.0, 1.0), np.arange(len(y)) + 7), 1, cells, config=config)
    with pytest.warns(FutureWarning, match="GroupInputs"):
        old = run_group(model, x, y, 1, cells, bounds=(-1.0, 1.0), config=config,
                        indices=np.arange(len(y)) + 7)
    assert new.input_indices.tolist() == old.input_indices.tolist()
    assert len(new.input_indices)
    assert min(new.input_indices) >= 7
    (_, a), (_, b) = new.cells[0], old.cells[0]
    assert a.selection.to_dict() == b.selection.to_dict()
    np.testing.assert_allclose(a.synthesized, b.synthesized, rtol=1e-6, atol=1e-7)
