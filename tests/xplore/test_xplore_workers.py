"""DeepXplore's seeds over worker processes (issue 42, :mod:`deepfault.xplore.workers`): with
``lambda2 = 0`` a seed's search reads no coverage, so two workers find exactly what one process
finds, coverage included; with the coverage term the merge still holds every seed once."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from deepfault.xplore.config import XploreConfig
from deepfault.xplore.search import search
from deepfault.xplore.workers import shares
from helpers.xplore_models import mlp


def _seeds(n: int = 40) -> torch.Tensor:
    return torch.rand(n, 4, generator=torch.Generator().manual_seed(0))


def test_shares_deal_groups_contiguously():
    groups = [np.arange(i, i + 2) for i in range(0, 10, 2)]
    dealt = [[g.tolist() for g in s] for s in shares(groups, 2)]
    assert dealt == [[[0, 1], [2, 3], [4, 5]], [[6, 7], [8, 9]]]
    assert len(shares([np.arange(3)], 8)) == 3  # no empty worker


@pytest.mark.parametrize("step", [None, 8])
def test_two_workers_equal_one_process_without_the_coverage_term(step):
    models = [mlp(0.0), mlp(0.05), mlp(-0.05)]
    config = XploreConfig(lambda2=0.0, iterations=20, bounds=(0.0, 1.0), inputs_per_step=step)
    one = search(models, _seeds(), config)
    two = search(models, _seeds(), replace(config, workers=2))
    assert len(one.found) > 0
    for key in ("rows", "inputs", "iteration", "predictions", "target"):
        np.testing.assert_array_equal(getattr(two.found, key), getattr(one.found, key), err_msg=key)
    np.testing.assert_array_equal(two.seed_predictions, one.seed_predictions)
    assert [c.covered for c in two.coverage] == [c.covered for c in one.coverage]
    assert "workers" not in config.to_dict()


def test_two_workers_with_the_coverage_term_hold_each_seed_once():
    models = [mlp(0.0), mlp(0.05), mlp(-0.05)]
    config = XploreConfig(iterations=20, bounds=(0.0, 1.0), workers=2)
    two = search(models, _seeds(), config)
    assert len(np.unique(two.found.rows)) == len(two.found.rows)
    assert two.config.to_dict()["workers"] == 2


def test_two_workers_on_a_two_node_ray_cluster_equal_one_process(ray_cluster):
    import ray

    import helpers.xplore_models
    from deepfault.core.executors import Parallel
    from deepfault.core.runtime import Runtime

    ray.cloudpickle.register_pickle_by_value(helpers.xplore_models)  # the workers cannot import tests/
    address = ray_cluster.address()
    models = [mlp(0.0), mlp(0.05), mlp(-0.05)]
    config = XploreConfig(lambda2=0.0, iterations=20, bounds=(0.0, 1.0))
    one = search(models, _seeds(), config)
    spread = search(models, _seeds(), replace(config, workers=2),
                    runtime=Runtime(parallel=Parallel(address=address)))
    for key in ("rows", "inputs", "iteration", "predictions", "target"):
        np.testing.assert_array_equal(getattr(spread.found, key), getattr(one.found, key), err_msg=key)
    assert [c.covered for c in spread.coverage] == [c.covered for c in one.coverage]
