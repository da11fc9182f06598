import numpy as np
import pytest
import torch

from deepfault import DeepFaultError, TopRanked, evaluate
from helpers.tiny_models import identity_model, scaled_model


def test_distances_loss_accuracy_and_increase_by_hand():
    model = identity_model()  # logits = relu(x0, x1 - 1)
    x0 = torch.tensor([[2.0, 1.0], [0.5, 2.0]])  # predictions 0, 1
    x1 = torch.tensor([[2.0, 4.0], [0.6, 2.0]])  # predictions 1, 1
    y = np.array([0, 1])
    ev = evaluate(model, x0, x1, y, [("fc1", 0), ("fc1", 1)])
    np.testing.assert_allclose(ev.l1, [3.0, 0.1], rtol=1e-6)
    np.testing.assert_allclose(ev.l2, [3.0, 0.1], rtol=1e-6)
    np.testing.assert_allclose(ev.linf, [3.0, 0.1], rtol=1e-6)
    np.testing.assert_array_equal(ev.correct, [False, True])
    np.testing.assert_array_equal(ev.pred_original, [0, 1])
    np.testing.assert_array_equal(ev.pred_synthesized, [1, 1])
    # input 0: fc1[0] unchanged, fc1[1] 0 -> 3 ; input 1: fc1[0] up, fc1[1] unchanged
    np.testing.assert_allclose(ev.increased, [0.5, 0.5])
    logits = torch.tensor([[2.0, 3.0], [0.6, 1.0]])
    want = torch.nn.functional.cross_entropy(logits, torch.tensor([0, 1]), reduction="none")
    np.testing.assert_allclose(ev.loss, want.numpy(), rtol=1e-6)
    s = ev.summary()
    assert s["accuracy"] == 0.5
    assert s["changed"] == 0.5
    assert s["inputs"] == 2


def test_probability_outputs_use_log_of_the_probabilities():
    probs = torch.nn.Sequential(scaled_model(), torch.nn.Softmax(dim=1))
    x = torch.tensor([[0.2, 0.3]])
    ev_p = evaluate(probs, x, x, [0], [("0.fc1", 0)], output_kind="probabilities")
    ev_l = evaluate(scaled_model(), x, x, [0], [("fc1", 0)], output_kind="logits")
    np.testing.assert_allclose(ev_p.loss, ev_l.loss, rtol=1e-5)
    # treating probabilities as logits would give a different (wrong) loss
    wrong = evaluate(probs, x, x, [0], [("0.fc1", 0)], output_kind="logits")
    assert abs(wrong.loss[0] - ev_l.loss[0]) > 0.05


def test_k_prime_shares():
    model = scaled_model()
    x0 = torch.tensor([[0.5, 0.5]])
    x1 = torch.tensor([[0.6, 0.5]])  # fc1_0 = 3x0 + x1 up; fc1_1 = -2 x1 unchanged
    ranking = [("fc1", 0), ("fc1", 1)]
    ev = evaluate(model, x0, x1, [0], ranking[:1], top=TopRanked(ranking, [1, 2]))
    assert ev.increased_at[1][0] == 1.0
    assert ev.increased_at[2][0] == 0.5
    with pytest.raises(DeepFaultError, match="k'=3 must lie between k=1 and the 2 ranked"):
        evaluate(model, x0, x1, [0], ranking[:1], top=TopRanked(ranking, [3]))
    with pytest.raises(DeepFaultError, match="same inputs"):
        evaluate(model, x0, torch.zeros(2, 2), [0], ranking[:1])
    with pytest.raises(DeepFaultError, match="output_kind"):
        evaluate(model, x0, x1, [0], ranking[:1], output_kind="softmax")
