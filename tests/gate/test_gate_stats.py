"""The gate's numbers against independent computations: plain numpy for the flips, statsmodels
for the Clopper-Pearson intervals and the exact McNemar test."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from deepfault.gate import GateConfig, gate
from deepfault.gate.stats import accuracy_interval, mcnemar_exact
from helpers.gate_models import linear, split

statsmodels = pytest.importorskip("statsmodels")
from statsmodels.stats.contingency_tables import mcnemar  # noqa: E402
from statsmodels.stats.proportion import proportion_confint  # noqa: E402

OFF = GateConfig(budget="0")


@pytest.mark.parametrize(("k", "n"), [(0, 1), (1, 1), (0, 10), (3, 10), (10, 10), (97, 100), (512, 1000)])
@pytest.mark.parametrize("alpha", [0.05, 0.01])
def test_interval_is_statsmodels_clopper_pearson(k, n, alpha):
    lo, hi = proportion_confint(k, n, alpha=alpha, method="beta")
    got = accuracy_interval(k, n, alpha)
    np.testing.assert_allclose(got, (lo, hi), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(("b", "c"), [(0, 0), (1, 0), (0, 5), (3, 4), (10, 2), (66, 4), (200, 180)])
def test_mcnemar_is_statsmodels_exact(b, c):
    expected = mcnemar(np.array([[50, b], [c, 50]]), exact=True).pvalue
    np.testing.assert_allclose(mcnemar_exact(b, c), expected, rtol=1e-9)


def _oracle(x, y, m1, m2):
    """The flips and accuracies written straight from their definitions, input by input."""
    with torch.no_grad():
        p1 = m1(torch.as_tensor(x)).argmax(1).numpy()
        p2 = m2(torch.as_tensor(x)).argmax(1).numpy()
    out = {
        "neg": 0,
        "pos": 0,
        "r1": 0,
        "r2": 0,
        "dis": 0,
        "class_neg": np.zeros(3, int),
        "support": np.zeros(3, int),
        "class_r1": np.zeros(3, int),
        "class_r2": np.zeros(3, int),
    }
    for i in range(len(y)):
        a, b = p1[i] == y[i], p2[i] == y[i]
        out["r1"] += a
        out["r2"] += b
        out["dis"] += p1[i] != p2[i]
        out["neg"] += a and not b
        out["pos"] += b and not a
        out["support"][y[i]] += 1
        out["class_neg"][y[i]] += a and not b
        out["class_r1"][y[i]] += a
        out["class_r2"][y[i]] += b
    return out


@pytest.mark.parametrize("batch_size", [1, 7, 300])
def test_flips_and_accuracies_equal_the_oracle_at_every_batch_size(batch_size):
    from deepfault import Runtime
    from deepfault.data import as_dataset

    x, y = split()
    m1, m2 = linear(), linear(0.5)
    o = _oracle(x, y, m1, m2)
    h = gate((m1, m2), as_dataset(x, y), OFF, runtime=Runtime(batch_size=batch_size)).heldout
    n = len(y)
    assert (h.negative_flips, h.positive_flips, h.disagree) == (o["neg"], o["pos"], o["dis"])
    assert h.accuracy_m1 == pytest.approx(o["r1"] / n)
    assert h.accuracy_m2 == pytest.approx(o["r2"] / n)
    assert h.accuracy_delta == pytest.approx((o["r2"] - o["r1"]) / n)
    assert h.negative_flip_rate == pytest.approx(o["neg"] / n)
    assert [c.negative_flips for c in h.classes] == list(o["class_neg"])
    assert [c.support for c in h.classes] == list(o["support"])
    for c in h.classes:
        assert c.recall_delta == pytest.approx((o["class_r2"][c.label] - o["class_r1"][c.label]) / c.support)
    np.testing.assert_allclose(
        h.interval_m1, proportion_confint(o["r1"], n, alpha=0.05, method="beta"), rtol=1e-9
    )
    table = [[0, o["neg"]], [o["pos"], 0]]
    np.testing.assert_allclose(h.mcnemar_p, mcnemar(np.array(table), exact=True).pvalue, rtol=1e-9)


def test_worst_flips_come_first_by_m2_confidence_and_disagreements_by_m1_margin():
    from deepfault.data import as_dataset

    x, y = split()
    m1, m2 = linear(), linear(0.5)
    h = gate((m1, m2), as_dataset(x, y), GateConfig(budget="0", worst=5)).heldout
    with torch.no_grad():
        q1 = torch.softmax(m1(torch.as_tensor(x)), 1).numpy()
        q2 = torch.softmax(m2(torch.as_tensor(x)), 1).numpy()
    p1, p2 = q1.argmax(1), q2.argmax(1)
    neg = np.flatnonzero((p1 == y) & (p2 != y))
    expected = neg[np.lexsort((neg, -q2[neg].max(1)))][:5]
    assert [r["index"] for r in h.worst_flips] == list(expected)
    np.testing.assert_array_equal(h.flip_inputs, x[expected])
    top = np.sort(q1, 1)
    margin = top[:, -1] - top[:, -2]
    dis = np.flatnonzero(p1 != p2)
    assert [r["index"] for r in h.disagreements] == list(dis[np.lexsort((dis, margin[dis]))][:5])


def test_unlabelled_inputs_give_the_disagreement_only():
    x, y = split()
    h = gate(
        (linear(), linear(0.5)),
        x,
        GateConfig(
            budget="0",
            max_negative_flip_rate="off",
            max_class_flip_rate="off",
            not_significantly_worse=False,
            max_disagreement_rate=0.5,
        ),
    ).heldout
    with torch.no_grad():
        dis = int((linear()(torch.as_tensor(x)).argmax(1) != linear(0.5)(torch.as_tensor(x)).argmax(1)).sum())
    assert not h.labelled
    assert h.disagree == dis
    assert h.accuracy_m1 is None
    assert h.negative_flips is None


def test_the_callers_modes_come_back():
    """The two models' loops interleave: grad mode and each model's training mode are restored."""
    from deepfault.data import as_dataset

    m1, m2 = linear().train(), linear(0.5)
    gate((m1, m2), as_dataset(*split()), OFF)
    gate((m1, m1), as_dataset(*split()), OFF)
    assert torch.is_grad_enabled()
    assert not torch.is_inference_mode_enabled()
    assert m1.training
    assert not m2.training
