"""Tiny models with hand-set weights whose values and gradients can be worked out on paper."""

from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch
from torch import nn


def identity_model() -> nn.Sequential:
    """x (N, 2) -> fc1 = (x0, x1 - 1) -> ReLU -> logits = relu(fc1).

    Neuron values: fc1[0] = x0, fc1[1] = x1 - 1. Gradients: d fc1[0]/dx = (1, 0),
    d fc1[1]/dx = (0, 1). Prediction: class 0 when x0 > x1 - 1 and both not <= 0.
    """
    fc1 = nn.Linear(2, 2)
    logits = nn.Linear(2, 2)
    with torch.no_grad():
        fc1.weight.copy_(torch.eye(2))
        fc1.bias.copy_(torch.tensor([0.0, -1.0]))
        logits.weight.copy_(torch.eye(2))
        logits.bias.zero_()
    return nn.Sequential(OrderedDict(fc1=fc1, act1=nn.ReLU(), logits=logits))


def scaled_model() -> nn.Sequential:
    """x (N, 2) -> fc1 = (3*x0 + x1, -2*x1) -> LeakyReLU -> logits (identity).

    Gradients: d fc1[0]/dx = (3, 1) (RMS sqrt(5)), d fc1[1]/dx = (0, -2) (RMS sqrt(2)).
    """
    fc1 = nn.Linear(2, 2, bias=False)
    logits = nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        fc1.weight.copy_(torch.tensor([[3.0, 1.0], [0.0, -2.0]]))
        logits.weight.copy_(torch.eye(2))
    return nn.Sequential(OrderedDict(fc1=fc1, act1=nn.LeakyReLU(0.01), logits=logits))


def conv_model() -> nn.Sequential:
    """x (N, 1, 2, 2) -> conv (1x1): channel 0 = 2x, channel 1 = -x + 1 -> ReLU(inplace)
    -> flatten -> logits (Linear 8 -> 2).

    Channel means: 2*mean(x) and 1 - mean(x). d mean_c0 / dx = 2/4 per pixel.
    """
    conv = nn.Conv2d(1, 2, 1)
    logits = nn.Linear(8, 2)
    with torch.no_grad():
        conv.weight.copy_(torch.tensor([2.0, -1.0]).view(2, 1, 1, 1))
        conv.bias.copy_(torch.tensor([0.0, 1.0]))
        logits.weight.copy_(torch.cat([torch.ones(4), -torch.ones(4)]).repeat(2, 1))
        logits.weight[1].mul_(-1)
        logits.bias.zero_()
    return nn.Sequential(
        OrderedDict(conv=conv, relu=nn.ReLU(inplace=True), flatten=nn.Flatten(), logits=logits)
    )


def chain_model(seed: int = 0, widths=(6, 5, 4), classes: int = 3, in_features: int = 4) -> nn.Sequential:
    """A small random MLP with LeakyReLU, seeded; layers fc1.., act1.., logits."""
    gen = torch.Generator().manual_seed(seed)
    layers = OrderedDict()
    width = in_features
    for i, w in enumerate(widths, start=1):
        lin = nn.Linear(width, w)
        with torch.no_grad():
            lin.weight.copy_(torch.randn(w, width, generator=gen))
            lin.bias.copy_(torch.randn(w, generator=gen) * 0.5)
        layers[f"fc{i}"] = lin
        layers[f"act{i}"] = nn.LeakyReLU(0.01)
        width = w
    out = nn.Linear(width, classes)
    with torch.no_grad():
        out.weight.copy_(torch.randn(classes, width, generator=gen))
        out.bias.zero_()
    layers["logits"] = out
    return nn.Sequential(layers)


def small_conv_net(seed: int = 0) -> nn.Sequential:
    """Conv -> ReLU(inplace) -> MaxPool -> Conv -> ReLU -> Flatten -> Linear -> logits."""
    gen = torch.Generator().manual_seed(seed)
    net = nn.Sequential(
        OrderedDict(
            conv1=nn.Conv2d(1, 3, 3, padding=1),
            relu1=nn.ReLU(inplace=True),
            pool=nn.MaxPool2d(2),
            conv2=nn.Conv2d(3, 4, 3),
            relu2=nn.ReLU(),
            flatten=nn.Flatten(),
            fc=nn.Linear(4 * 2 * 2, 5),
            act=nn.LeakyReLU(0.01),
            logits=nn.Linear(5, 3),
        )
    )
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return net


def random_data(n: int, shape=(4,), classes: int = 3, seed: int = 0, lo=0.0, hi=1.0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(lo, hi, size=(n, *shape)).astype(np.float32)
    y = rng.integers(0, classes, size=n)
    return x, y


def has_hooks(model: nn.Module) -> bool:
    return any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def with_every_class(model: nn.Module, x: torch.Tensor, per_class: int = 2, seed: int = 0,
                     lo: float = 0.0, hi: float = 1.0) -> torch.Tensor:
    """``x`` and, for each class the model predicts fewer than ``per_class`` times on it, inputs in
    ``[lo, hi]`` it predicts as that class (a seeded gradient ascent on the class's margin): a
    surprise state needs two training traces of every class (issue 43)."""
    model = model.eval()
    with torch.no_grad():
        counts = torch.bincount(model(x).argmax(1), minlength=model(x[:1]).shape[1])
    gen = torch.Generator().manual_seed(seed)
    extra = []
    for c in (int(k) for k in torch.nonzero(counts < per_class).flatten()):
        shape = (per_class - int(counts[c]), *x.shape[1:])
        z = (lo + (hi - lo) * torch.rand(shape, generator=gen)).requires_grad_()
        for _ in range(500):
            out = model(z)
            others = out.clone()
            others[:, c] = -torch.inf
            margin = out[:, c] - others.max(1).values
            if (margin > 0.1).all():
                break
            (grad,) = torch.autograd.grad(-margin.clamp(max=0.2).sum(), z)
            with torch.no_grad():
                z -= 0.05 * (hi - lo) * grad.sign()
                z.clamp_(lo, hi)
        with torch.no_grad():
            assert (model(z).argmax(1) == c).all(), f"no input found for class {c}"
        extra.append(z.detach())
    return torch.cat([x, *extra]) if extra else x
def digits_model_file(folder) -> Path:
    """A seeded digits MLP (12 and 10 hidden units) saved as ``folder/m.pt`` on the bundled 8x8
    digits (no download): what the command-line tests give ``--model``.
    """
    from deepfault.models import ModelFile, build_model, save_model

    torch.manual_seed(0)
    path = Path(folder) / "m.pt"
    module = build_model("digits_mlp", hidden=[12, 10])
    save_model(path, ModelFile(module, "digits_mlp", {"hidden": [12, 10]}, dataset="digits",
                               bounds=(0.0, 1.0)))
    return path
