"""DeepXplore's passes through the models, counted (issue 26: close to the model's own cost).

The bare work of a search is, per model, one forward pass per seed and one forward and
backward pass per step a seed took. The search adds one one-input pass per model (the
models' check and their layouts) and the "auto" batch's one-input memory probe; coverage
takes the values the step's own forward captured. A group of several chunks still redoes
each chunk's forward with a graph (memory: one chunk's graph, flat in the seeds).
"""

import importlib

import numpy as np
import pytest
import torch

from deepfault.xplore import XploreConfig, xplore
from helpers.xplore_models import conv

search_module = importlib.import_module("deepfault.xplore.search")

pytestmark = pytest.mark.filterwarnings("ignore:.*hardly images:UserWarning")


class _Passes:
    """Counts the inputs of every forward pass through a model and of every backward pass."""

    def __init__(self, model: torch.nn.Module):
        self.forward_inputs = 0
        self.backward_inputs = 0
        self.handle = model.register_forward_hook(self._hook)

    def _hook(self, module, args, out):
        self.forward_inputs += len(args[0])
        if out.requires_grad:
            rows = len(out)
            out.register_hook(lambda grad: self._backward(rows))

    def _backward(self, rows: int) -> None:
        self.backward_inputs += rows


def _count(monkeypatch, chunk, cpu_chunk=None):
    if cpu_chunk is not None:
        monkeypatch.setattr(search_module, "CPU_CHUNK", cpu_chunk)
    models = [conv(0.0), conv(0.02)]
    counters = [_Passes(m) for m in models]
    seeds = np.random.default_rng(0).uniform(0, 1, (32, 1, 6, 6)).astype(np.float32)
    config = XploreConfig(step_size=0.2, iterations=12, lambda1=2.0, lambda2=0.5, layers="deepxplore",
                          threshold=0.5, seeds=32, seed=0)
    result = xplore(models, seeds, config=config, batch_size=chunk)
    for c in counters:
        c.handle.remove()
    agree = int((~result.already_differ).sum())
    steps = int(np.sum(result.found.iteration)) + (agree - len(result.found)) * config.iterations
    assert len(result.found) > 0  # the counts are not vacuous
    assert result.already_differ.any()
    return result, counters, steps


def test_each_input_runs_forward_once_per_step(monkeypatch):
    """One chunk: every model runs each seed once per step, plus one one-input check and one
    one-input memory probe. The former code ran each found or already-differing input forward
    again for coverage, and checked the models and took their layouts in two more passes."""
    result, counters, steps = _count(monkeypatch, "auto")
    bare_forward = 32 + steps
    for c in counters:
        assert c.forward_inputs == bare_forward + 2
        # a step's backward runs over the rows of its forward: the rows found at that step too
        assert c.backward_inputs == steps + len(result.found) + int(result.already_differ.sum())


@pytest.mark.parametrize(("chunk", "cpu_chunk"), [("auto", 7), (7, None)])
def test_several_chunks_redo_their_forward_only(monkeypatch, chunk, cpu_chunk):
    """Several chunks (memory: one chunk's graph) predict without graphs and redo their forward
    with one before the backward: at most two forwards per row and step, no more."""
    result, counters, steps = _count(monkeypatch, chunk, cpu_chunk)
    alive = 32 + steps  # the rows forwarded, all steps together
    for c in counters:
        assert alive + 1 < c.forward_inputs <= 2 * alive + 2


def test_capture_also_gives_the_second_transform_of_the_same_pass():
    """``capture(also="layer-minmax")``: the raw values (with graph) and, detached, the values a
    separate ``layer-minmax`` capture gives, from one forward pass."""
    from deepfault.core.capture import capture

    model = conv(0.02)
    x = torch.as_tensor(np.random.default_rng(1).uniform(0, 1, (5, 1, 6, 6)).astype(np.float32))
    x.requires_grad_(True)
    with capture(model, "deepxplore", also="layer-minmax") as rec:
        model(x)
        raw = rec.collect()
    with torch.no_grad(), capture(model, "deepxplore", transform="layer-minmax") as ref:
        model(x)
        minmax = ref.collect()
    with torch.no_grad(), capture(model, "deepxplore") as ref_raw:
        model(x)
        plain = ref_raw.collect()
    assert raw.requires_grad
    assert rec.also_values is not None
    assert not rec.also_values.requires_grad
    torch.testing.assert_close(rec.also_values, minmax)
    torch.testing.assert_close(raw.detach(), plain)
