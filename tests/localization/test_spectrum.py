import numpy as np
import pytest
import torch

from deepfault import DeepFaultError, compute_class_spectra, compute_spectrum, localize
from deepfault.testing.reference import spectrum_reference
from helpers.tiny_models import chain_model, identity_model, random_data, small_conv_net


def test_counts_by_hand():
    # fc1 = (x0, x1 - 1); logits = relu(fc1) -> class 0 iff relu(x0) >= relu(x1 - 1) (ties -> 0)
    x = np.array([[1.0, 0.0], [0.0, 3.0], [2.0, 5.0], [-1.0, 0.5]], dtype=np.float32)
    y = np.array([0, 1, 0, 1])
    # predictions: 0, 1, 1, 0 -> pass, pass, fail, fail
    spec = compute_spectrum(identity_model(), x, y)
    # fc1[0] active: inputs 0, 2 ; fc1[1] active: inputs 1, 2
    np.testing.assert_array_equal(spec.a_s, [1, 1])
    np.testing.assert_array_equal(spec.a_f, [1, 1])
    np.testing.assert_array_equal(spec.n_s, [1, 1])
    np.testing.assert_array_equal(spec.n_f, [1, 1])
    assert (spec.num_passed, spec.num_failed) == (2, 2)
    spec1 = compute_spectrum(identity_model(), x, y, target_class=1)
    np.testing.assert_array_equal(spec1.a_s, [0, 1])
    np.testing.assert_array_equal(spec1.n_f, [1, 1])


@pytest.mark.parametrize("threshold", [0.0, 0.3])
def test_matches_naive_loop_for_every_batch_size(threshold):
    model = small_conv_net()
    x, y = random_data(23, shape=(1, 8, 8), classes=3, seed=1)
    ref = spectrum_reference(model, x, y, threshold=threshold)
    for batch_size in (1, 7, len(x)):
        spec = compute_spectrum(model, x, y, threshold=threshold, batch_size=batch_size)
        for got, want in zip(spec.counts, ref, strict=True):
            np.testing.assert_array_equal(got, want)
        assert np.all(spec.a_s + spec.a_f + spec.n_s + spec.n_f == len(x))


def test_class_spectra_equal_single_class_spectra():
    model = chain_model()
    x, y = random_data(40, classes=3, seed=2)
    together = compute_class_spectra(model, x, y, [0, 2], batch_size=7)
    for c in (0, 2):
        alone = compute_spectrum(model, x, y, target_class=c)
        for got, want in zip(together[c].counts, alone.counts, strict=True):
            np.testing.assert_array_equal(got, want)
        assert together[c].num_inputs == int((y == c).sum())


def test_class_spectra_refuse_a_negative_class():
    """A negative class once took the lookup slot of the labels above every class, so a class
    that no input has got their counts (compute_spectrum says no input has the label)."""
    model = chain_model()
    x, y = random_data(40, classes=3, seed=2)
    with pytest.raises(DeepFaultError, match="non-negative class indices; got -1"):
        compute_class_spectra(model, x, y, [-1, 1])


def planted_model() -> torch.nn.Sequential:
    """x = (u, f): fc1 = (u + 1, -u - 1, f - 0.5); fc2 = (relu(fc1_0), -relu(fc1_0));
    logits = (fc2_0, 1.5). fc1 unit 2 is active exactly when f = 1."""
    from collections import OrderedDict

    fc1, fc2, out = torch.nn.Linear(2, 3), torch.nn.Linear(3, 2), torch.nn.Linear(2, 2)
    with torch.no_grad():
        fc1.weight.copy_(torch.tensor([[1.0, 0], [-1, 0], [0, 1]]))
        fc1.bias.copy_(torch.tensor([1.0, -1, -0.5]))
        fc2.weight.copy_(torch.tensor([[1.0, 0, 0], [-1, 0, 0]]))
        fc2.bias.zero_()
        out.weight.copy_(torch.tensor([[1.0, 0], [0, 0]]))
        out.bias.copy_(torch.tensor([0.0, 1.5]))
    return torch.nn.Sequential(OrderedDict(
        fc1=fc1, act1=torch.nn.ReLU(), fc2=fc2, act2=torch.nn.ReLU(), logits=out))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_planted_neuron_ranks_first(seed):
    """A neuron active on exactly the failing inputs is the most suspicious, even in the
    shallowest layer (so the deeper-layer tie-break cannot be what put it first)."""
    rng = np.random.default_rng(seed)
    u = rng.uniform(0, 1, 50)
    fail = rng.random(50) < 0.3
    x = np.stack([u, fail.astype(float)], axis=1).astype(np.float32)
    pred = (u + 1 <= 1.5).astype(int)  # class 0 when u + 1 > 1.5
    y = np.where(fail, 1 - pred, pred)
    spec = compute_spectrum(planted_model(), x, y)
    assert spec.num_failed == fail.sum() > 0
    for measure in ("tarantula", "ochiai", "dstar"):
        sel = localize(spec, measure=measure, k=2)
        assert (sel.neurons[0].layer, sel.neurons[0].unit) == ("fc1", 2), measure
        assert sel.neurons[0].score > sel.neurons[1].score


def test_errors():
    model = chain_model()
    x, y = random_data(5)
    with pytest.raises(DeepFaultError, match="no input has label 7"):
        compute_spectrum(model, x, y, target_class=7)
    with pytest.raises(DeepFaultError, match="outside the model's 3 classes"):
        compute_spectrum(model, x, np.array([0, 1, 2, 5, 0]))
    with pytest.raises(DeepFaultError, match="one label per input"):
        compute_spectrum(model, x, y[:3])
    with pytest.raises(DeepFaultError, match="input set is empty"):
        compute_spectrum(model, x[:0], y[:0])
