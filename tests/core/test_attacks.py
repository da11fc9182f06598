"""The adversarial attacks in core/attacks.py (FGSM, BIM, C&W L2), shared by fuzz's scenarios,
repair's baselines and DeepXplore's Figure 9.

Each is checked against a reference written here, in this run, straight from its formula:
on a linear model ``z = W x + b`` the cross-entropy's input gradient is
``W^T (softmax(z) - onehot(y))``, so FGSM and BIM are recomputed with numpy in float64,
input by input; C&W L2 is recomputed one input at a time by a plain loop over its binary
search and Adam steps.
"""

import numpy as np
import pytest
import torch
from torch import nn

from deepfault.core.attacks import CarliniWagner, bim, carlini_wagner_l2, fgsm
from deepfault.errors import DeepFaultError
from deepfault.models import build_model


def _linear(seed: int = 0, features: int = 16, classes: int = 3) -> nn.Sequential:
    g = torch.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Flatten(), nn.Linear(features, classes))
    with torch.no_grad():
        model[1].weight.copy_(torch.randn(classes, features, generator=g))
        model[1].bias.copy_(torch.randn(classes, generator=g) * 0.1)
    return model.eval()


def _ce_grad(model: nn.Sequential, x: np.ndarray, y: int) -> np.ndarray:
    """d CE(W x + b, y) / d x for one input, in float64: W^T (softmax(z) - onehot(y))."""
    w = model[1].weight.detach().double().numpy()
    b = model[1].bias.detach().double().numpy()
    z = w @ x.reshape(-1) + b
    p = np.exp(z - z.max())
    p /= p.sum()
    p[y] -= 1.0
    return (w.T @ p).reshape(x.shape)


def _problem(n: int = 10, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, 4, 4, generator=g)
    y = torch.randint(0, 3, (n,), generator=g)
    return x, y


def test_fgsm_is_the_formula_input_by_input():
    model = _linear()
    x, y = _problem()
    got = fgsm(model, x, y, eps=0.1, bounds=(0.0, 1.0), batch_size=4)
    want = np.stack([np.clip(x[i].double().numpy() + 0.1 * np.sign(_ce_grad(model, x[i].double().numpy(),
                                                                              int(y[i]))), 0.0, 1.0)
                     for i in range(len(x))])
    np.testing.assert_allclose(got.double().numpy(), want, atol=1e-6, rtol=0)


def test_bim_is_the_formula_input_by_input():
    model = _linear(2)
    x, y = _problem(seed=3)
    eps, steps, lo, hi = 0.1, 5, 0.0, 1.0
    got = bim(model, x, y, bounds=(lo, hi), eps=eps, steps=steps, batch_size=3)
    want = []
    for i in range(len(x)):
        x0 = x[i].double().numpy()
        low, high = np.maximum(x0 - eps, lo), np.minimum(x0 + eps, hi)
        xa = x0.copy()
        for _ in range(steps):
            xa = np.minimum(np.maximum(xa + eps / 4 * np.sign(_ce_grad(model, xa, int(y[i]))), low), high)
        want.append(xa)
    np.testing.assert_allclose(got.double().numpy(), np.stack(want), atol=1e-5, rtol=0)


def _naive_cw(model, x0, y, *, lo, hi, c_init, binary_steps, steps, lr):
    """Carlini-Wagner L2 for one input, as the paper states it: a binary search over ``c``,
    Adam on ``w`` with ``x' = lo + (hi - lo) (tanh(w) + 1) / 2``, the smallest successful ``x'`` kept."""
    span = hi - lo
    w0 = torch.atanh((((x0 - lo) / span).clamp(0, 1) * 2 - 1) * 0.999999)
    c, lower, upper = c_init, 0.0, 1e10
    best, best_l2 = x0.clone(), float("inf")
    for _ in range(binary_steps):
        w = w0.clone().requires_grad_(True)
        opt = torch.optim.Adam([w], lr=lr)
        found = False
        for _ in range(steps):
            xa = lo + span * (torch.tanh(w) + 1) / 2
            z = model(xa[None])[0]
            other = torch.cat([z[:y], z[y + 1 :]]).max()
            l2 = (((xa - x0) / span) ** 2).sum()
            loss = l2 + c * torch.clamp(z[y] - other, min=0)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if int(z.argmax()) != y:
                found = True
                if float(l2.detach()) < best_l2:
                    best_l2, best = float(l2.detach()), xa.detach().clone()
        if found:
            upper = min(upper, c)
        else:
            lower = max(lower, c)
        c = (lower + upper) / 2 if upper < 1e9 else c * 10
    return best


def test_carlini_wagner_is_the_per_input_loop():
    model = _linear(4)
    x, _ = _problem(6, seed=5)
    with torch.no_grad():
        y = model(x).argmax(1)
    kw = dict(c_init=1.0, binary_steps=3, steps=40, lr=0.1)
    got = carlini_wagner_l2(model, x, y, bounds=(0.0, 1.0), **kw)
    want = torch.stack([_naive_cw(model, x[i], int(y[i]), lo=0.0, hi=1.0, **kw) for i in range(len(x))])
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    assert (model(got).argmax(1) != y).any()


@pytest.mark.parametrize("attack", [fgsm, bim, carlini_wagner_l2])
def test_attacks_leave_the_model_alone(attack):
    model = _linear().train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x, y = _problem(4)
    kw = {"eps": 0.1} if attack is fgsm else {"steps": 2}
    attack(model, x, y, bounds=(0.0, 1.0), **kw)
    assert model.training
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_bim_stays_in_the_ball_and_raises_the_loss():
    torch.manual_seed(2)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
    x = torch.rand(40, 1, 4, 4)
    y = torch.randint(0, 3, (40,))
    adv = bim(model, x, y, bounds=(0.0, 1.0), eps=0.1, steps=5, batch_size=7)
    assert adv.shape == x.shape
    assert (adv - x).abs().max() <= 0.1 + 1e-6
    assert adv.min() >= 0
    assert adv.max() <= 1
    loss = nn.functional.cross_entropy
    with torch.no_grad():
        assert loss(model(adv), y) > loss(model(x), y)
    # batch size does not change the result; eps is a share of the range
    torch.testing.assert_close(bim(model, x, y, bounds=(0.0, 1.0), eps=0.1, steps=5, batch_size=64), adv)
    adv255 = bim(model, x * 255, y, bounds=(0.0, 255.0), eps=0.1, steps=5)
    assert (adv255 - x * 255).abs().max() <= 25.5 + 1e-4


def test_carlini_wagner_is_vectorised_stays_in_bounds_and_fools_the_model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 3)).eval()
    x = torch.rand(12, 1, 4, 4)
    y = model(x).argmax(1)
    adv = carlini_wagner_l2(model, x, y, bounds=(0.0, 1.0), steps=60, binary_steps=3, lr=0.1)
    assert adv.shape == x.shape
    assert adv.min() >= 0
    assert adv.max() <= 1
    fooled = model(adv).argmax(1) != y
    assert fooled.float().mean() > 0.8
    # one input at a time gives the same answer (per-input search, no cross-talk)
    one = torch.cat([carlini_wagner_l2(model, x[i : i + 1], y[i : i + 1], bounds=(0.0, 1.0), steps=60,
                                       binary_steps=3, lr=0.1) for i in range(3)])
    torch.testing.assert_close(one, adv[:3], atol=1e-5, rtol=0)
    # unfooled inputs come back unchanged
    same = ~fooled
    assert torch.equal(adv[same], x[same])
    # the hyper-parameters as one settings object give the same inputs; a keyword replaces its field
    settings = CarliniWagner(steps=60, binary_steps=3, lr=0.1)
    assert torch.equal(carlini_wagner_l2(model, x, y, bounds=(0.0, 1.0), settings=settings), adv)
    assert torch.equal(carlini_wagner_l2(model, x, y, bounds=(0.0, 1.0), settings=CarliniWagner(steps=5),
                                         steps=60, binary_steps=3, lr=0.1), adv)
    with pytest.raises(DeepFaultError, match="c_init and lr must be positive"):
        carlini_wagner_l2(model, x, y, bounds=(0.0, 1.0), settings=CarliniWagner(lr=0.0))


def test_fgsm_moves_every_pixel_by_eps_within_bounds():
    torch.manual_seed(0)
    model = build_model("lenet1")
    x = torch.full((3, 1, 28, 28), 0.5)
    adv = fgsm(model, x, [1, 2, 3], eps=0.1, bounds=(0.0, 1.0))
    moved = (adv - x).abs()
    step = (moved - 0.1).abs() < 1e-6
    assert torch.all(step | (moved == 0))  # sign(g) is 0 only where g is
    assert step.float().mean() > 0.9
    assert adv.min() >= 0
    assert adv.max() <= 1
    assert torch.equal(adv, fgsm(model, x, [1, 2, 3], eps=0.1, batch_size=1))
