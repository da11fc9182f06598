"""Tiny hand-set models for the DeepXplore tests: three versions of one network that differ
by a small, known shift of their weights, so that they agree on most seeds and can be made
to disagree by a few gradient steps."""

from collections import OrderedDict

import torch
from torch import nn

# fc1 of the MLPs: three hand-chosen detectors of 4 inputs.
_FC1 = torch.tensor([[1.0, -1.0, 0.5, 0.0], [0.0, 1.0, -1.0, 0.5], [0.5, 0.0, 1.0, -1.0]])
_FC1_BIAS = torch.tensor([0.0, 0.125, -0.125])
# A rotation pattern added, times the model's shift, to the identity logits layer.
_TWIST = torch.tensor([[0.0, 1.0, -1.0], [-1.0, 0.0, 1.0], [1.0, -1.0, 0.0]])


def mlp(shift: float = 0.0, classes: int = 3) -> nn.Sequential:
    """x (N, 4) -> fc1 = _FC1 x + b -> ReLU -> logits = (I + shift * _TWIST) h + shift * (1, -1, 0).

    With ``shift = 0`` the logits are the three detectors themselves.
    """
    fc1 = nn.Linear(4, 3)
    logits = nn.Linear(3, classes)
    with torch.no_grad():
        fc1.weight.copy_(_FC1)
        fc1.bias.copy_(_FC1_BIAS)
        w = torch.zeros(classes, 3)
        w[:3, :3] = torch.eye(3) + shift * _TWIST
        logits.weight.copy_(w)
        logits.bias.zero_()
        logits.bias[:2] = torch.tensor([shift, -shift])
    return nn.Sequential(OrderedDict(fc1=fc1, relu=nn.ReLU(), logits=logits))


def conv(shift: float = 0.0) -> nn.Sequential:
    """x (N, 1, 6, 6) -> conv 3x3 (a Laplacian and a vertical-edge kernel) -> ReLU -> max pool 2
    -> flatten (18) -> logits (3), whose weights are a fixed integer pattern plus ``shift``."""
    c = nn.Conv2d(1, 2, 3, padding=1)
    logits = nn.Linear(18, 3)
    with torch.no_grad():
        c.weight[0, 0] = torch.tensor([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]]) * 0.25
        c.weight[1, 0] = torch.tensor([[1.0, 0.0, -1.0], [2.0, 0.0, -2.0], [1.0, 0.0, -1.0]]) * 0.25
        c.bias.copy_(torch.tensor([0.25, 0.125]))
        pattern = (torch.arange(54, dtype=torch.float32).reshape(3, 18) % 7 - 3) / 4
        logits.weight.copy_(pattern + shift * torch.tensor([1.0, -1.0, 0.0])[:, None])
        logits.bias.copy_(torch.tensor([0.0, 0.25, -0.25]) * (1 + shift))
    return nn.Sequential(OrderedDict(conv=c, relu=nn.ReLU(), pool=nn.MaxPool2d(2), flatten=nn.Flatten(),
                                     logits=logits))
