import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from deepfault import DeepFaultError, synthesize
from deepfault.testing.reference import synthesize_reference
from helpers.tiny_models import chain_model, conv_model, has_hooks, scaled_model, small_conv_net


def test_raw_gradient_step_by_hand():
    # fc1 = (3 x0 + x1, -2 x1): mean gradient of both = ((3 + 0)/2, (1 - 2)/2) = (1.5, -0.5)
    x = torch.tensor([[0.5, 0.5]])
    new = synthesize(scaled_model(), x, [("fc1", 0), ("fc1", 1)], step_size=0.1, distance=1.0,
                     normalize=False)
    torch.testing.assert_close(new, torch.tensor([[0.65, 0.45]]))


def test_normalised_gradient_step_by_hand():
    # g0 = (3, 1) / sqrt(5), g1 = (0, -2) / sqrt(2); mean = (3/sqrt5, 1/sqrt5 - sqrt2) / 2
    x = torch.tensor([[0.5, 0.5]])
    new = synthesize(scaled_model(), x, [("fc1", 0), ("fc1", 1)], step_size=0.1, distance=1.0)
    g = np.array([3 / np.sqrt(5), 1 / np.sqrt(5) - np.sqrt(2)]) / 2
    # RMS carries a 1e-5 in the denominator, so compare to 1e-5 relative
    np.testing.assert_allclose(new.numpy()[0], 0.5 + 0.1 * g, rtol=1e-5)


def test_distance_clips_then_bounds_clip():
    x = torch.tensor([[0.5, 0.95]])
    new = synthesize(scaled_model(), x, [("fc1", 0)], step_size=10.0, distance=0.2, normalize=False)
    # step*g = (30, 10) -> clipped to (0.2, 0.2) -> (0.7, 1.15) -> bounds -> (0.7, 1.0)
    torch.testing.assert_close(new, torch.tensor([[0.7, 1.0]]))


def test_conv_channel_gradient():
    # d mean(2x)/dx = 2/4 per pixel; normalised: RMS 0.5 -> 1 per pixel
    x = torch.full((1, 1, 2, 2), 0.5)
    new = synthesize(conv_model(), x, [("conv", 0)], step_size=0.05, distance=1.0)
    expected = 0.5 + 0.05 * 0.5 / (0.5 + 1e-5)
    torch.testing.assert_close(new, torch.full((1, 1, 2, 2), expected), atol=1e-7, rtol=0)


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("iterations", [1, 3])
def test_batched_equals_per_input_loop_oracle(normalize, iterations):
    model = small_conv_net()
    x = torch.rand(9, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    neurons = [("fc", 1), ("conv2", 3), ("conv1", 0), ("fc", 4)]
    kw = dict(step=0.5, distance=0.1, normalize=normalize, iterations=iterations)
    want = synthesize_reference(model, x, neurons, **kw)
    kw["step_size"] = kw.pop("step")
    for batch_size in (1, 4, 9):
        got = synthesize(model, x, neurons, batch_size=batch_size, **kw)
        torch.testing.assert_close(got, want, atol=2e-6, rtol=0)
    assert not has_hooks(model)


def test_vmap_fallback_gives_the_same_result(monkeypatch):
    model = chain_model()
    x = torch.rand(5, 4, generator=torch.Generator().manual_seed(1))
    neurons = [("fc1", 0), ("fc2", 3), ("fc3", 1)]
    fast = synthesize(model, x, neurons)
    real_grad = torch.autograd.grad

    def no_vmap(*args, **kwargs):
        if kwargs.get("is_grads_batched"):
            raise RuntimeError("vmap: not supported")
        return real_grad(*args, **kwargs)

    monkeypatch.setattr(torch.autograd, "grad", no_vmap)
    torch.testing.assert_close(synthesize(model, x, neurons), fast, atol=1e-6, rtol=0)


@settings(max_examples=25, deadline=None)
@given(
    step=st.floats(0, 50),
    distance=st.floats(0, 0.5),
    iterations=st.integers(1, 3),
    seed=st.integers(0, 1000),
)
def test_stays_within_distance_and_bounds(step, distance, iterations, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(6, 4, generator=gen) * 2 - 1
    new = synthesize(chain_model(seed % 3), x, [("fc2", seed % 5), ("fc1", 0)], step_size=step,
                     distance=distance, bounds=(-1.0, 1.0), iterations=iterations)
    assert (new - x).abs().max() <= distance + 1e-6
    assert new.min() >= -1.0
    assert new.max() <= 1.0


def test_caller_tensors_and_model_untouched():
    model = chain_model()
    model.train()
    x = torch.rand(3, 4)
    before = x.clone()
    params = [p.clone() for p in model.parameters()]
    synthesize(model, x, [("fc1", 0)])
    assert torch.equal(x, before)
    assert not x.requires_grad
    assert model.training
    assert all(torch.equal(a, b) for a, b in zip(params, model.parameters(), strict=True))
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"step_size": -1.0}, r"step_size must be a number from 0 to 3.40282e\+38; got -1.0"),
        ({"distance": -0.1}, r"distance must be a number from 0 to 3.40282e\+38; got -0.1"),
        ({"bounds": (1.0, 0.0)}, "lo < hi"),
        ({"iterations": 0}, "iterations must be an integer from 1 to 100,000"),
    ],
)
def test_argument_errors(kwargs, match):
    with pytest.raises(DeepFaultError, match=match):
        synthesize(chain_model(), torch.rand(2, 4), [("fc1", 0)], **kwargs)


def test_input_errors():
    model = chain_model()
    with pytest.raises(DeepFaultError, match=r"outside bounds \[0, 1\]"):
        synthesize(model, torch.full((1, 4), 200.0), [("fc1", 0)])
    with pytest.raises(DeepFaultError, match="unit 9 is out of range for layer 'fc1'"):
        synthesize(model, torch.rand(1, 4), [("fc1", 9)])
    with pytest.raises(DeepFaultError, match="unknown layer name"):
        synthesize(model, torch.rand(1, 4), [("nope", 0)])
    with pytest.raises(DeepFaultError, match="cannot take inputs of shape"):
        synthesize(model, torch.rand(1, 7), [("fc1", 0)])
    with pytest.raises(DeepFaultError, match="no neurons given"):
        synthesize(model, torch.rand(1, 4), [])
    assert not has_hooks(model)


def test_each_neurons_backward_pass_starts_at_its_own_layer():
    """A neuron's gradient goes back from its layer only: the later layer's output sees one
    backward pass (its own neuron's), not one per selected neuron (the spec's per-neuron loop)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 3, 3), torch.nn.ReLU(), torch.nn.Conv2d(3, 4, 3),
                              torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 4 * 4, 3))
    passes = []

    def count(_module, _args, out):
        if out.requires_grad:  # not the batch-size probe's forward
            out.register_hook(lambda grad: passes.append(1))

    net[2].register_forward_hook(count)
    x = torch.rand(2, 1, 8, 8)
    new = synthesize(net, x, [("0", 0), ("0", 1), ("2", 0)], step_size=0.1, distance=0.1)
    assert len(passes) == 1  # one backward from layer "2"; the two layer-"0" neurons' start below it
    expected = synthesize_reference(net, x, [("0", 0), ("0", 1), ("2", 0)], step=0.1, distance=0.1)
    torch.testing.assert_close(new, torch.as_tensor(expected), atol=1e-6, rtol=1e-5)
