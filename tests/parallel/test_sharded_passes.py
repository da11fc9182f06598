"""Every data-parallel pass equals the serial one: counts, minima and maxima exactly, float sums
within the stated tolerance (docs/cluster.md). Here the shards run one after the other in this
process (``--executor serial --workers N``: the same split and merge without processes); the
process executor and a two-node Ray cluster run them in tests/parallel/test_executors_spread.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from deepfault.core.executors import Parallel
from deepfault.core.runtime import Runtime
from deepfault.core.shards import FLOAT_TOLERANCE, shard_bounds
from deepfault.coverage import CoverageConfig, compute_profile, fit_surprise, measure_coverage, rank_inputs
from deepfault.coverage.profile import ProfileConfig
from deepfault.coverage.surprise import SurpriseConfig
from deepfault.errors import DeepFaultError


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 3)).eval()


@pytest.fixture(scope="module")
def problem():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(157, 4, generator=g)
    y = torch.randint(0, 3, (157,), generator=g)
    return _model(), x, y


SERIAL = Runtime(batch_size=16)
SHARDED = Runtime(batch_size=16, parallel=Parallel(executor="serial", workers=3))


def test_shards_cover_every_input_once():
    for n in (0, 1, 5, 12, 157):
        for k in (1, 3, 12, 200):
            bounds = shard_bounds(n, k)
            assert [i for a, b in bounds for i in range(a, b)] == list(range(n))
            assert all(b > a for a, b in bounds)


def test_profile(problem):
    model, x, _ = problem
    a = compute_profile(model, x, ProfileConfig(), runtime=SERIAL)
    b = compute_profile(model, x, ProfileConfig(), runtime=SHARDED)
    assert a.count == b.count
    assert a.spread is None
    assert b.spread is not None
    assert b.spread.shards == 12
    assert b.spread.workers == 3
    np.testing.assert_array_equal(a.low, b.low)
    np.testing.assert_array_equal(a.high, b.high)
    np.testing.assert_allclose(b.mean, a.mean, rtol=FLOAT_TOLERANCE, atol=FLOAT_TOLERANCE)
    np.testing.assert_allclose(b.std, a.std, rtol=FLOAT_TOLERANCE, atol=FLOAT_TOLERANCE)


def test_measure_with_its_growth_curve(problem, tmp_path):
    model, x, _ = problem
    profile = compute_profile(model, x, ProfileConfig())
    config = CoverageConfig(criteria="nc,kmnc,nbc,tknc,tknp", threshold=[0.0, 0.3], profile=profile)
    a = measure_coverage(model, x, config, runtime=SERIAL)
    b = measure_coverage(model, x, config, runtime=SHARDED)
    assert [r.to_dict() for r in a.results] == [r.to_dict() for r in b.results]
    assert a.growth == b.growth
    np.testing.assert_array_equal(a.active, b.active)
    np.testing.assert_array_equal(a.always_active, b.always_active)
    assert b.spread is not None


def test_rank(problem):
    model, x, y = problem
    config = CoverageConfig(by="gini,margin,cam,ctm", criteria="nc,tknc")
    a = rank_inputs(model, (x, y), config, runtime=SERIAL)
    b = rank_inputs(model, (x, y), config, runtime=SHARDED)
    assert [r.name for r in a.rankings] == [r.name for r in b.rankings]
    for ra, rb in zip(a.rankings, b.rankings, strict=True):
        np.testing.assert_array_equal(ra.order, rb.order, err_msg=ra.name)
        assert ra.apfd == rb.apfd
    assert b.spread is not None


def test_surprise_fit_and_the_measure_that_reads_it(problem):
    model, x, y = problem
    config = SurpriseConfig(layers=["2"], classes="labels")  # every class has traces (issue 43's rule)
    a = fit_surprise(model, (x, y), config, runtime=SERIAL)
    b = fit_surprise(model, (x, y), config, runtime=SHARDED)
    np.testing.assert_array_equal(a.classes, b.classes)
    np.testing.assert_array_equal(a.ats, b.ats)
    assert b.spread is not None
    measured = CoverageConfig(criteria="dsc", surprise=a, sa_upper=2.0)
    ma = measure_coverage(model, x[:40], measured, runtime=SERIAL)
    mb = measure_coverage(model, x[:40], measured, runtime=SHARDED)
    # DSA's distances are matrix products whose rounding depends on the batch (docs/cluster.md):
    # the scores agree within 1e-5, so a bucket count may move by the input on a bucket's edge
    for ra, rb in zip(ma.results, mb.results, strict=True):
        assert abs(ra.covered - rb.covered) <= 1
        assert ra.total == rb.total
    assert len(ma.growth) == len(mb.growth)


def test_a_stopped_pass_keeps_its_shards_and_a_rerun_finishes_it(problem, tmp_path, monkeypatch):
    from deepfault.core import shards

    model, x, _ = problem
    state = tmp_path / "profile.npz.shards"
    runtime = SHARDED.with_(shard_state=str(state))
    calls = []
    real = shards._run_shard

    def stop_after_two(job):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(job.index)
        return real(job)

    monkeypatch.setattr(shards, "_run_shard", stop_after_two)
    with pytest.raises(KeyboardInterrupt):
        compute_profile(model, x, ProfileConfig(), runtime=runtime)
    assert state.is_file()
    monkeypatch.setattr(shards, "_run_shard", real)
    again = compute_profile(model, x, ProfileConfig(), runtime=runtime)
    assert again.spread is not None
    assert again.spread.kept == 2
    assert not state.exists()
    whole = compute_profile(model, x, ProfileConfig())
    np.testing.assert_array_equal(whole.low, again.low)
    np.testing.assert_allclose(again.mean, whole.mean, rtol=FLOAT_TOLERANCE, atol=FLOAT_TOLERANCE)


def test_deepfault_run_spectra(problem):
    from deepfault.data import Dataset
    from deepfault.localization.protocol import RunConfig, run_deepfault

    model, x, y = problem
    data = Dataset("tiny", x[:20].numpy(), y[:20].numpy(), x.numpy(), y.numpy(), (-4.0, 4.0), ("a", "b", "c"))
    config = RunConfig(k=2, classes=(0, 1), repeat=1, iterations=1, num_inputs=2, surprise=None,
                       baseline=False)
    a = run_deepfault(model, data, config, runtime=SERIAL)
    b = run_deepfault(model, data, config, runtime=SHARDED)
    for ca, cb in zip(a.classes, b.classes, strict=True):
        for name in ("a_s", "a_f", "n_s", "n_f"):
            np.testing.assert_array_equal(getattr(ca.spectrum, name), getattr(cb.spectrum, name))
        assert ca.num_correct == cb.num_correct
    assert a.test_accuracy == b.test_accuracy
    assert _timeless(a.to_dict()) == _timeless(b.to_dict())
    assert b.spread is not None
    assert a.spread is None


def _timeless(value):
    """A result dict without its timings (they differ between any two runs)."""
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items() if "seconds" not in k and k != "time"}
    if isinstance(value, list):
        return [_timeless(v) for v in value]
    return value


def test_gate_heldout_stage():
    from deepfault.data import as_dataset
    from deepfault.gate.config import GateConfig
    from deepfault.gate.protocol import gate
    from helpers.gate_models import linear, split

    x, y = split()
    config = GateConfig(budget="0", worst=5)
    a = gate((linear(), linear(0.5)), as_dataset(x, y), config, runtime=SERIAL)
    b = gate((linear(), linear(0.5)), as_dataset(x, y), config, runtime=SHARDED)
    assert a.heldout.to_dict() == b.heldout.to_dict()
    np.testing.assert_array_equal(a.heldout.flip_inputs, b.heldout.flip_inputs)
    assert b.spread is not None
    assert b.spread.shards == 12


def test_a_memory_mapped_data_set_is_read_by_path(problem, tmp_path):
    from deepfault.core.shards import _Mapped, _sources

    model, x, _ = problem
    path = tmp_path / "x.npy"
    np.save(path, x.numpy())
    mapped = np.load(path, mmap_mode="r")
    sources = _sources([mapped], shard_bounds(len(mapped), 3), "serial")
    assert all(isinstance(s[0], _Mapped) for s in sources)  # the path travels, not the rows
    a = compute_profile(model, x, ProfileConfig(), runtime=SERIAL)
    b = compute_profile(model, mapped, ProfileConfig(), runtime=SHARDED)
    np.testing.assert_array_equal(a.low, b.low)
    np.testing.assert_allclose(b.mean, a.mean, rtol=FLOAT_TOLERANCE, atol=FLOAT_TOLERANCE)



def _every_pass(problem, runtime_for):
    """Run each sharded pass once, each with ``runtime_for(name)``."""
    from deepfault.data import Dataset, as_dataset
    from deepfault.gate.config import GateConfig
    from deepfault.gate.protocol import gate
    from deepfault.localization.protocol import RunConfig, run_deepfault
    from helpers.gate_models import linear, split

    model, x, y = problem
    compute_profile(model, x, ProfileConfig(), runtime=runtime_for("profile"))
    state = fit_surprise(model, (x, y), SurpriseConfig(layers=["2"], classes="labels"),
                         runtime=runtime_for("surprise"))
    measured = CoverageConfig(criteria="dsc", surprise=state, sa_upper=2.0)
    measure_coverage(model, x[:40], measured, runtime=runtime_for("measure"))
    ranked = CoverageConfig(by=("gini", "dsa"), surprise=state)
    rank_inputs(model, (x[:40], y[:40]), ranked, runtime=runtime_for("rank"))
    data = Dataset("tiny", x[:20].numpy(), y[:20].numpy(), x.numpy(), y.numpy(), (-4.0, 4.0), ("a", "b", "c"))
    config = RunConfig(k=2, classes=(0,), repeat=1, iterations=1, num_inputs=2, surprise=None, baseline=False)
    run_deepfault(model, data, config, runtime=runtime_for("run"))
    gx, gy = split()
    gated = GateConfig(budget="0", worst=5)
    gate((linear(), linear(0.5)), as_dataset(gx, gy), gated, runtime=runtime_for("gate"))


def test_every_pass_keeps_its_shards_in_a_file_read_without_unpickling(problem, tmp_path, monkeypatch):
    """Every pass's shard results go through torch's weights-only reader (deepfault's classes and
    NumPy's arrays only); a file that names anything else is refused, never run."""
    import pickle

    from deepfault.core import shards

    monkeypatch.setattr(shards._State, "clear", lambda self: None)  # keep each pass's file
    _every_pass(problem, lambda name: SHARDED.with_(shard_state=str(tmp_path / f"{name}.shards")))
    files = sorted(tmp_path.glob("*.shards"))
    assert [f.stem for f in files] == ["gate", "measure", "profile", "rank", "run", "surprise"]
    for path in files:
        saved = shards._read_state(path)
        assert saved["format"] == shards.STATE_FORMAT
        assert len(saved["done"]) >= 1, path.name

    class Boom:
        def __reduce__(self):
            return (eval, ("1",))

    foreign = {"format": shards.STATE_FORMAT, "key": "x", "done": {0: ("cpu", Boom())}}
    bad = tmp_path / "bad.shards"
    torch.save(foreign, bad)
    with pytest.raises(DeepFaultError, match="builtins.eval"):  # refused by name, never run
        shards._read_state(bad)
    bad.write_bytes(pickle.dumps(foreign))  # a plain pickle is no torch file: refused too
    with pytest.raises(ValueError, match="torch.save"):
        shards._read_state(bad)
