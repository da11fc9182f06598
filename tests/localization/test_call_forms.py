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


def test_evaluate_old_ranking_keywords_warn_and_give_the_same_shares():
    from deepfault import DeepFaultError, TopRanked, evaluate
    from helpers.tiny_models import scaled_model

    model = scaled_model()
    x0, x1 = torch.tensor([[0.5, 0.5]]), torch.tensor([[0.6, 0.5]])
    ranking = [("fc1", 0), ("fc1", 1)]
    new = evaluate(model, x0, x1, [0], ranking[:1], top=TopRanked(ranking, [1, 2]))
    with pytest.warns(FutureWarning, match="top=TopRanked"):
        old = evaluate(model, x0, x1, [0], ranking[:1], ranking=ranking, k_primes=[1, 2])
    assert old.increased_at.keys() == new.increased_at.keys()
    for kp in new.increased_at:
        np.testing.assert_allclose(old.increased_at[kp], new.increased_at[kp])
    with pytest.warns(FutureWarning), pytest.raises(DeepFaultError, match="needs the full ranking"):
        evaluate(model, x0, x1, [0], ranking[:1], k_primes=[1])
    with pytest.warns(FutureWarning), pytest.raises(DeepFaultError, match="not both"):
        evaluate(model, x0, x1, [0], ranking[:1], top=TopRanked(ranking, [1]), ranking=ranking)
