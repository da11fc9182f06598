import numpy as np
import pytest
import torch
from torch import nn

from deepfault import DeepFaultError, activations, capture
from helpers.float_tolerance import assert_close_two_ways
from helpers.tiny_models import chain_model, conv_model, has_hooks, identity_model, small_conv_net


def test_dense_values_by_hand():
    layout, v = activations(identity_model(), np.array([[0.5, 3.0], [2.0, -1.0]]))
    assert layout.names == ("fc1",)  # logits layer excluded by default
    assert torch.allclose(v, torch.tensor([[0.5, 2.0], [2.0, -2.0]]))


def test_conv_unit_is_channel_mean_and_survives_inplace_relu():
    x = torch.tensor([[[[1.0, 2.0], [3.0, 6.0]]]])  # mean 3
    layout, v = activations(conv_model(), x, layers=["conv"])
    # channel 0: 2*mean = 6; channel 1: 1 - mean = -2, negative although the in-place
    # ReLU afterwards zeroes the map: the hook copied the pre-activation values.
    assert torch.allclose(v, torch.tensor([[6.0, -2.0]]))
    _, post = activations(conv_model(), x, layers=["relu"])
    assert torch.allclose(post, torch.tensor([[6.0, 0.0]]))


def test_default_layers_and_execution_order():
    class Reordered(nn.Module):
        def __init__(self):
            super().__init__()
            self.out = nn.Linear(3, 2)  # defined first, runs last
            self.hidden = nn.Linear(4, 3)

        def forward(self, x):
            return self.out(torch.relu(self.hidden(x)))

    layout, v = activations(Reordered(), torch.zeros(2, 4))
    assert layout.names == ("hidden",)
    assert v.shape == (2, 3)
    layout, _ = activations(chain_model(), torch.zeros(1, 4))
    assert layout.names == ("fc1", "fc2", "fc3")
    assert [la.depth for la in layout.layers] == [0, 1, 2]
    assert [la.offset for la in layout.layers] == [0, 6, 11]


def test_named_layers_any_module():
    layout, v = activations(small_conv_net(), torch.rand(3, 1, 8, 8), layers=["relu1", "act"])
    assert layout.names == ("relu1", "act")
    assert v.shape == (3, 3 + 5)
    assert (v[:, :3] >= 0).all()


def test_unknown_layer_lists_valid_names():
    message = r"unknown layer name\(s\) 'fc9' \(did you mean 'fc1' or 'fc2' or 'fc3'\?\); valid: fc1, act1"
    with pytest.raises(DeepFaultError, match=message):
        activations(chain_model(), torch.zeros(1, 4), layers=["fc9"])


def test_model_with_one_linear_needs_layers():
    with pytest.raises(DeepFaultError, match="fewer than two Linear/Conv"):
        activations(nn.Sequential(nn.Linear(2, 2)), torch.zeros(1, 2))


def test_module_called_twice_is_refused():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(2, 2)
            self.b = nn.Linear(2, 2)

        def forward(self, x):
            return self.b(self.a(self.a(x)))

    model = Twice()
    with pytest.raises(DeepFaultError, match="runs more than once"):
        activations(model, torch.zeros(1, 2))
    assert not has_hooks(model)


def test_capture_removes_hooks_even_on_error():
    model = chain_model()

    def fail_while_capturing():
        with capture(model):
            assert has_hooks(model)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fail_while_capturing()
    assert not has_hooks(model)


@pytest.mark.float_sensitive
def test_batch_size_does_not_matter_and_mode_restored():
    model = small_conv_net()
    model.train()
    x = torch.rand(10, 1, 8, 8)
    _, a = activations(model, x, batch_size=1)
    _, b = activations(model, x, batch_size=7)
    _, c = activations(model, x)
    # float32 sums regrouped by batch; the deepest values (the logits) went through conv1 (1*3*3 + 1
    # terms), conv2 (3*3*3 + 1), fc (16 + 1) and the logits (5 + 1)
    assert_close_two_ways(a, b, n=10 + 28 + 17 + 6, dtype=torch.float32)
    assert_close_two_ways(a, c, n=10 + 28 + 17 + 6, dtype=torch.float32)
    assert model.training


def test_nan_inputs_and_activations_are_errors():
    with pytest.raises(DeepFaultError, match="NaN or infinite values"):
        activations(chain_model(), torch.tensor([[0.0, float("nan"), 0.0, 0.0]]))
    model = chain_model()
    with torch.no_grad():
        model.fc2.weight[1, 0] = float("inf")
    with pytest.raises(DeepFaultError, match=r"neuron fc2\[1\] is NaN or infinite for input 0"):
        activations(model, torch.ones(1, 4))


def test_wrong_input_shape_is_explained():
    with pytest.raises(DeepFaultError, match=r"cannot take inputs of shape \(5,\)"):
        activations(chain_model(), torch.zeros(2, 5))
