"""The data-parallel passes on real workers: the process executor (no Ray), and Ray's two-node
test cluster (one session fixture, ``ray_cluster``). Each equals the serial pass (exact counts,
minima and maxima; float sums within FLOAT_TOLERANCE). Stopping the cluster mid-pass ends the
pass with one error that names the shard-state file, and a rerun finishes the pass from it.
"""

from __future__ import annotations

import sys
import time

import numpy as np
import pytest
import torch
from torch import nn

from deepfault.core.executors import Parallel
from deepfault.core.runtime import Runtime
from deepfault.core.shards import FLOAT_TOLERANCE
from deepfault.coverage import CoverageConfig, compute_profile, fit_surprise, measure_coverage, rank_inputs
from deepfault.coverage.profile import ProfileConfig
from deepfault.coverage.surprise import SurpriseConfig
from deepfault.errors import DeepFaultError


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 3)).eval()


def _problem():
    g = torch.Generator().manual_seed(1)
    return _model(), torch.randn(120, 4, generator=g), torch.randint(0, 3, (120,), generator=g)


def _same_profile(a, b) -> None:
    assert a.count == b.count
    np.testing.assert_array_equal(a.low, b.low)
    np.testing.assert_array_equal(a.high, b.high)
    np.testing.assert_allclose(b.mean, a.mean, rtol=FLOAT_TOLERANCE, atol=FLOAT_TOLERANCE)
    np.testing.assert_allclose(b.std, a.std, rtol=FLOAT_TOLERANCE, atol=FLOAT_TOLERANCE)


def _passes(runtime: Runtime) -> dict:
    """Every spread pass (its comparable result) under ``runtime``."""
    from deepfault.data import Dataset, as_dataset
    from deepfault.gate.config import GateConfig
    from deepfault.gate.protocol import gate
    from deepfault.localization.protocol import RunConfig, run_deepfault
    from helpers.gate_models import linear, split

    model, x, y = _problem()
    profile = compute_profile(model, x, ProfileConfig(), runtime=runtime)
    criteria = CoverageConfig(criteria="nc,kmnc,tknp", profile=profile)
    measured = measure_coverage(model, x, criteria, runtime=runtime)
    ranked = rank_inputs(model, (x, y), CoverageConfig(by="gini,cam", criteria="nc"), runtime=runtime)
    state = fit_surprise(model, (x, y), SurpriseConfig(layers=["2"], classes="labels"), runtime=runtime)
    data = Dataset("tiny", x[:20].numpy(), y[:20].numpy(), x.numpy(), y.numpy(), (-4.0, 4.0), ("a", "b", "c"))
    run = run_deepfault(model, data, RunConfig(k=2, classes=(0,), iterations=1, num_inputs=1, surprise=None,
                                               baseline=False), runtime=runtime)
    hx, hy = split(90)
    held = gate((linear(), linear(0.5)), as_dataset(hx, hy), GateConfig(budget="0"), runtime=runtime)
    spreads = [o.spread for o in (profile, measured, ranked, state, run, held)]
    return {
        "profile": profile, "spreads": spreads,
        "measure": ([r.to_dict() for r in measured.results], measured.growth),
        "rank": [(r.name, r.order.tolist()) for r in ranked.rankings],
        "surprise": (state.ats, state.classes),
        "spectrum": [(c.spectrum.a_s.tolist(), c.spectrum.a_f.tolist(), c.num_correct) for c in run.classes],
        "heldout": held.heldout.to_dict(),
    }


def _assert_equal(serial: dict, spread: dict) -> None:
    _same_profile(serial["profile"], spread["profile"])
    for key in ("measure", "rank", "spectrum", "heldout"):
        assert serial[key] == spread[key], key
    np.testing.assert_array_equal(serial["surprise"][0], spread["surprise"][0])
    np.testing.assert_array_equal(serial["surprise"][1], spread["surprise"][1])


@pytest.fixture(scope="module")
def serial():
    return _passes(Runtime(batch_size=16))


def test_the_profile_on_the_process_executor_equals_the_serial_one():
    model, x, _ = _problem()
    a = compute_profile(model, x, ProfileConfig())
    processes = Runtime(batch_size=16, parallel=Parallel(workers=2))
    b = compute_profile(model, x, ProfileConfig(), runtime=processes)
    _same_profile(a, b)
    assert b.spread.executor == "process"
    assert set(b.spread.devices) == {"cpu"}
    assert b.spread.summary() == "spread over 2 process workers on cpu (8 shards)"


def test_every_pass_on_a_two_node_ray_cluster_equals_the_serial_one(ray_cluster, serial):
    address = ray_cluster.address()
    spread = _passes(Runtime(batch_size=16, parallel=Parallel(workers=2, address=address)))
    _assert_equal(serial, spread)
    for s in spread["spreads"]:
        assert s.executor == "ray"
        assert all(d.startswith("node ") and d.endswith(" cpu") for d in s.devices)


class _Slow(nn.Module):
    """A model that takes a while per batch, so that the cluster can be stopped mid-pass."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3))

    def forward(self, x):
        time.sleep(0.3)
        return self.net(x)


def test_a_stopped_cluster_ends_the_pass_with_one_error_and_a_rerun_finishes_it(ray_cluster, tmp_path,
                                                                                monkeypatch):
    import ray

    from deepfault.core import shards

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import this file
    address = ray_cluster.address()
    model, x = _Slow().eval(), torch.randn(160, 4, generator=torch.Generator().manual_seed(2))
    state = tmp_path / "profile.npz.shards"
    keep = shards._State.add

    def stop_after_the_first(self, *args):
        keep(self, *args)
        if len(self.done) == 1:
            ray_cluster.kill()

    monkeypatch.setattr(shards._State, "add", stop_after_the_first)
    runtime = Runtime(batch_size=20, shard_state=str(state), parallel=Parallel(workers=2, address=address))
    lost = r"stopped mid-pass .* kept in .*profile\.npz\.shards; rerun"
    with pytest.raises(DeepFaultError, match=lost) as err:
        compute_profile(model, x, ProfileConfig(layers=["net.0"]), runtime=runtime)
    assert "\n" not in str(err.value)
    assert state.is_file()
    monkeypatch.setattr(shards._State, "add", keep)
    # the rerun: the same shards (two workers), here without the cluster
    rerun = runtime.with_(parallel=Parallel(executor="serial", workers=2))
    again = compute_profile(model, x, ProfileConfig(layers=["net.0"]), runtime=rerun)
    assert again.spread.kept >= 1
    assert not state.exists()
    _same_profile(compute_profile(model, x, ProfileConfig(layers=["net.0"])), again)
