"""``batch_size="auto"`` (deepfault.core.memory): sized from the memory, results unchanged.

The memory-growth tests (N vs 4N inputs) live with the methods' own tests.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from deepfault.core import memory
from deepfault.core.batches import activations, iterate_batches, predict
from deepfault.coverage import compute_profile, fit_surprise, measure_coverage, rank_inputs, surprise_scores
from deepfault.errors import DeepFaultError
from helpers.float_tolerance import assert_close_two_ways, assert_orders_agree


def _model() -> nn.Module:
    """Integer weights and inputs: every sum is exact in float32, whatever the batch."""
    g = torch.Generator().manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 3))
    with torch.no_grad():
        for m in model:
            if isinstance(m, nn.Linear):
                m.weight.copy_(torch.randint(-3, 4, m.weight.shape, generator=g).float())
                m.bias.copy_(torch.randint(-2, 3, m.bias.shape, generator=g).float())
    return model


def _data(n: int = 120):
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, 4, (n, 6), generator=g).float(), torch.randint(0, 3, (n,), generator=g)


@pytest.fixture
def tight(monkeypatch):
    """Free memory small enough that ``auto`` picks a batch of a few inputs."""
    def set_free(nbytes):
        monkeypatch.setattr(memory, "free_memory", lambda device="cpu": nbytes)
    return set_free


def _sizes(model, x, **kw) -> list[int]:
    return [b.stop - b.start for b in iterate_batches(model, x, **kw)]


def test_auto_picks_a_smaller_batch_when_less_memory_is_free(tight):
    model, (x, _) = _model(), _data()
    per = memory.input_bytes(model, x[:1])
    tight(4 * 40 * per)  # the CPU budget is a quarter of what is free: 40 inputs
    assert memory.choose_batch_size(model, x).size == 40
    tight(4 * 7 * per)
    choice = memory.choose_batch_size(model, x)
    assert choice.size == 7
    assert choice.per_input == per
    assert _sizes(model, x)[:2] == [7, 7]
    tight(0)  # nothing free: one input at a time, never zero
    assert memory.choose_batch_size(model, x).size == 1
    tight(1 << 40)  # plenty: at most AUTO_MAX, at most the inputs
    assert memory.choose_batch_size(model, x).size == len(x)
    assert memory.choose_batch_size(model, torch.zeros(5000, 6)).size == memory.AUTO_MAX


def test_backward_work_takes_more_per_input(tight):
    model, (x, _) = _model(), _data()
    fwd, both = memory.input_bytes(model, x[:1]), memory.input_bytes(model, x[:1], backward=True)
    assert both == pytest.approx(memory.BACKWARD_FACTOR * fwd, abs=1)
    tight(4 * 40 * fwd)
    assert memory.choose_batch_size(model, x, backward=True).size == 40 // memory.BACKWARD_FACTOR
    assert memory.input_bytes([model, model], x[:1]) == 2 * fwd


def test_an_integer_is_used_as_given():
    model, (x, _) = _model(), _data()
    choice = memory.choose_batch_size(model, x, 16)
    assert (choice.size, choice.auto) == (16, False)
    assert _sizes(model, x, batch_size=16)[0] == 16


@pytest.mark.parametrize("bad", [0, -3, "lots", 2.5, True])
def test_a_bad_batch_size_is_one_line(bad):
    with pytest.raises(DeepFaultError, match="batch_size must be") as info:
        list(iterate_batches(_model(), _data()[0], batch_size=bad))
    assert "\n" not in str(info.value)


def test_the_line_says_what_was_measured(tight):
    model, (x, _) = _model(), _data()
    tight(3 << 30)
    line = memory.choose_batch_size(model, x).describe()
    assert line.startswith(f"batch: {len(x)} inputs (auto: about ")
    assert line.endswith("each, 3.0 GiB free)")
    assert "\n" not in line
    assert memory.choose_batch_size(model, x, backward=True).describe().count("forward and backward") == 1


def test_free_memory_takes_the_cgroup_limit_where_lower(monkeypatch):
    files = {"/sys/fs/cgroup/memory.max": 3 << 30, "/sys/fs/cgroup/memory.current": 1 << 30}
    monkeypatch.setattr(memory, "_read_int", files.get)
    monkeypatch.setattr(memory, "_mem_available", lambda: 10 << 30)
    monkeypatch.setattr(memory, "_CPU_READING", [None, None])
    assert memory.free_memory("cpu") == 2 << 30
    monkeypatch.setattr(memory, "_read_int", {}.get)  # no limit: MemAvailable
    monkeypatch.setattr(memory, "_CPU_READING", [None, None])
    assert memory.free_memory("cpu") == 10 << 30
    assert memory.budget(10 << 30, "cpu") == memory.CPU_CAP
    assert memory.budget(1 << 30, "cpu") == (1 << 30) * memory.CPU_FRACTION


@pytest.mark.float_sensitive
def test_results_are_the_same_for_auto_and_a_fixed_batch(tight):
    model, (x, _) = _model(), _data()
    tight(4 * 9 * memory.input_bytes(model, x[:1]))  # auto: batches of 9, fixed: one of 120
    assert _sizes(model, x)[0] == 9
    torch.testing.assert_close(predict(model, x), predict(model, x, batch_size=1024), rtol=0, atol=0)
    torch.testing.assert_close(activations(model, x)[1], activations(model, x, batch_size=1024)[1],
                               rtol=0, atol=0)
    p_auto, p_fixed = compute_profile(model, x), compute_profile(model, x, batch_size=1024)
    np.testing.assert_array_equal(p_auto.low, p_fixed.low)  # the exact values' minimum
    # the mean: float64 sums over the 120 inputs, grouped by batch
    assert_close_two_ways(p_auto.mean, p_fixed.mean, n=len(x), dtype=torch.float64, err_msg="mean")
    kw = {"criteria": "nc,kmnc,tknp", "profile": p_fixed}
    c_auto, c_fixed = measure_coverage(model, x, **kw), measure_coverage(model, x, **kw, batch_size=1024)
    assert [r.covered for r in c_auto.results] == [r.covered for r in c_fixed.results]


@pytest.mark.float_sensitive
def test_rank_streams_a_loader_with_the_same_orders(tight):
    """A loader is no longer read whole; the orders equal the array's (the old path)."""
    model, (x, y) = _model(), _data()
    profile = compute_profile(model, x)
    kw = {"by": "gini,margin,cam,ctm", "criteria": "nc,kmnc,tknc,tknp", "profile": profile}
    whole = rank_inputs(model, x, y, **kw, batch_size=1024)
    tight(4 * 11 * memory.input_bytes(model, x[:1]))
    loader = DataLoader(TensorDataset(x, y), batch_size=32)
    for streamed in (rank_inputs(model, loader, **kw), rank_inputs(model, TensorDataset(x, y), **kw),
                     rank_inputs(model, x, y, **kw)):
        assert [r.name for r in streamed.rankings] == [r.name for r in whole.rankings]
        for a, b in zip(streamed.rankings, whole.rankings, strict=True):
            if a.prioritiser in ("cam", "ctm"):  # coverage counts of the exact values: exact
                np.testing.assert_array_equal(a.order, b.order, err_msg=a.name)
                assert a.apfd == b.apfd
                continue
            # gini and margin: float64 over the exact logits, a softmax summing 3 classes
            atol = assert_close_two_ways(a.scores, b.scores, n=3, dtype=torch.float64, err_msg=a.name)
            assert_orders_agree(b.order, a.order, b.scores, atol=atol, err_msg=a.name)
        np.testing.assert_array_equal(streamed.failing, whole.failing)


@pytest.mark.float_sensitive
def test_surprise_streams_a_loader_with_the_same_scores(tight):
    model, (x, _) = _model(), _data()
    y = (x.sum(1) % 3).long()  # one label per input value: equal traces of two classes make DSA 0/0
    state = fit_surprise(model, x, y, classes="labels", batch_size=1024)
    whole = surprise_scores(model, x, state, kinds="lsa,dsa", batch_size=1024)
    tight(4 * 13 * memory.input_bytes(model, x[:1]))
    loader = DataLoader(TensorDataset(x, y), batch_size=25)
    streamed_state = fit_surprise(model, loader, classes="labels")
    np.testing.assert_array_equal(streamed_state.ats, state.ats)
    np.testing.assert_array_equal(streamed_state.classes, state.classes)
    streamed = surprise_scores(model, loader, state, kinds="lsa,dsa")
    for kind in ("lsa", "dsa"):  # float64 over the exact traces: LSA's density sums 120 training
        # rows, each term a distance over the 8 units of the last hidden layer
        assert_close_two_ways(streamed[kind], whole[kind], n=len(x) + 8, dtype=torch.float64, err_msg=kind)
    np.testing.assert_array_equal(streamed.predictions, whole.predictions)


def test_a_uint8_array_is_converted_batch_by_batch():
    model, (x, _) = _model(), _data()
    x8 = x.numpy().astype(np.uint8)
    torch.testing.assert_close(predict(model, x8, batch_size=7), predict(model, x, batch_size=7))
    bad = x.double().numpy()
    bad[50, 2] = np.nan
    with pytest.raises(DeepFaultError, match="first at input 50"):
        predict(model, bad, batch_size=16)


def test_a_loader_is_recut_to_the_auto_batch(tight):
    model, (x, y) = _model(), _data()
    tight(4 * 10 * memory.input_bytes(model, x[:1]))
    loader = DataLoader(TensorDataset(x, y), batch_size=64)
    sizes = _sizes(model, loader)  # each of the loader's batches of 64 cut into tens (6 x 10 + 4)
    assert max(sizes) == 10
    assert sizes[:7] == [10] * 6 + [4]
    torch.testing.assert_close(predict(model, loader), predict(model, x, batch_size=1024), rtol=0, atol=0)


def test_the_cpu_probe_counts_every_output_once():
    """Freed outputs' addresses are reused by the next ones; each is still counted (in-place
    ReLUs share their input's storage and add nothing)."""
    model = nn.Sequential(*[nn.Linear(64, 64) for _ in range(10)], nn.ReLU(inplace=True), nn.Linear(64, 3))
    x = torch.zeros(1, 64)
    outputs = 10 * 64 * 4 + 3 * 4  # the ten hidden outputs and the logits (the ReLU's is the tenth's)
    whole = 3 * 4  # the Sequential's own output is the logits' storage
    assert memory.input_bytes(model, x) == outputs + x.numel() * 4 + whole
