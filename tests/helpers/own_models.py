"""Tiny models of the kinds users bring (issue 26), each written as the user's own ``.py`` class
file: a ResNet-like CNN with ``BasicBlock``s and BatchNorm, a ViT with a class token and
``Block``s, a tabular MLP on 20 features and a 1-D conv net on sequences; with a saved
``state_dict`` and random inputs in deepfault's ``.npz`` data format.

``write_case(kind, folder)`` writes ``net.py``, ``m1.pt`` (or ``m1.safetensors`` for the MLP),
a perturbed ``m2.pt`` and ``data.npz`` whose labels are M1's predictions with every fifth one
moved to another class (so each class has inputs M1 gets right and wrong).
"""

from __future__ import annotations

import copy
import importlib.util
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

#: A user's class for the digits data set's 1x8x8 inputs (``hidden`` and ``classes`` as
#: ``--arch-args``), for the tests of what is checked before a model is built or trained.
DIGITS_NET = '''
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, hidden=8, classes=10):
        super().__init__()
        self.fc1 = nn.Linear(64, hidden)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))
'''

RESNET = '''
import torch
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, num_classes=3, width=4):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.layer1 = nn.Sequential(BasicBlock(width, width))
        self.layer2 = nn.Sequential(BasicBlock(width, 2 * width, stride=2))
        self.fc = nn.Linear(2 * width, num_classes)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = self.layer2(self.layer1(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))
'''

VIT = '''
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self, num_classes=3, dim=8, depth=2, heads=2, patch=4, image=8):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        tokens = (image // patch) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(0.02 * torch.randn(1, tokens + 1, dim))
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(len(x), -1, -1), x], dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])
'''

MLP = '''
from torch import nn


class TabularMLP(nn.Module):
    def __init__(self, features=20, hidden=16, num_classes=3):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, num_classes))

    def forward(self, x):
        return self.net(x)
'''

CONV1D = '''
from torch import nn


class SeqNet(nn.Module):
    def __init__(self, num_classes=3, channels=4):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(1, channels, 5, padding=2), nn.ReLU(), nn.MaxPool1d(2),
            nn.Conv1d(channels, 2 * channels, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool1d(1))
        self.fc = nn.Linear(2 * channels, num_classes)

    def forward(self, x):
        return self.fc(self.features(x).flatten(1))
'''


@dataclass(frozen=True)
class Kind:
    """One kind of model: its source, class, constructor arguments and per-input shape."""

    source: str
    cls: str
    arch_kwargs: dict = field(default_factory=dict)
    input_shape: tuple = ()
    suffix: str = ".pt"


KINDS = {
    "resnet": Kind(RESNET, "ResNet", {"num_classes": 3, "width": 4}, (3, 8, 8)),
    "vit": Kind(VIT, "ViT", {"num_classes": 3, "dim": 8}, (3, 8, 8)),
    "mlp": Kind(MLP, "TabularMLP", {"features": 20, "num_classes": 3}, (20,), ".safetensors"),
    "conv1d": Kind(CONV1D, "SeqNet", {"num_classes": 3}, (1, 32)),
}


@dataclass(frozen=True)
class Case:
    """The files of one kind written into a folder."""

    kind: str
    folder: Path
    code: Path
    m1: Path
    m2: Path
    data: Path

    @property
    def arch(self) -> str:
        return f"{self.code}:{KINDS[self.kind].cls}"

    @property
    def arch_kwargs(self) -> dict:
        return dict(KINDS[self.kind].arch_kwargs)

    def arch_args(self) -> list[str]:
        import json

        return ["--arch", self.arch, "--arch-args", json.dumps(self.arch_kwargs)]


def build(kind: str, code: Path, seed: int = 0) -> torch.nn.Module:
    """The kind's network from the user's file, seeded, in eval mode with BatchNorm statistics set."""
    spec = importlib.util.spec_from_file_location(f"_own_{kind}_{seed}", code)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(seed)
    net = getattr(module, KINDS[kind].cls)(**KINDS[kind].arch_kwargs)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm2d):  # statistics other than the identity's
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    sys.modules.pop(spec.name, None)
    return net.eval()


def spread_classes(model: torch.nn.Module, x: torch.Tensor) -> None:
    """Standardise the last Linear layer's logits on ``x`` so that every class is predicted
    (random weights and random inputs otherwise give one class nearly everywhere)."""
    last = [m for m in model.modules() if isinstance(m, torch.nn.Linear)][-1]
    with torch.no_grad():
        logits = model(x)
        mean, std = logits.mean(0), logits.std(0) + 1e-6
        last.weight.div_(std[:, None])
        last.bias.copy_((last.bias - mean) / std)


def write_case(kind: str, folder: Path, *, n: int = 60, n_train: int = 90, seed: int = 0) -> Case:
    """Write the kind's class file, M1's and M2's weights and ``data.npz`` into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    info = KINDS[kind]
    code = folder / "net.py"
    code.write_text(textwrap.dedent(info.source))
    rng = np.random.default_rng(seed)
    x = rng.random((n, *info.input_shape), dtype=np.float32)
    x_train = rng.random((n_train, *info.input_shape), dtype=np.float32)
    m1 = build(kind, code, seed)
    spread_classes(m1, torch.from_numpy(x_train))
    m2 = copy.deepcopy(m1)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in m2.parameters():  # a perturbed new version
            p.add_(0.3 * p.abs().mean() * torch.randn(p.shape, generator=gen))
    with torch.no_grad():
        y = m1(torch.from_numpy(x)).argmax(1).numpy()
        y_train = m1(torch.from_numpy(x_train)).argmax(1).numpy()
    y[::5] = (y[::5] + 1) % 3  # some inputs M1 gets wrong
    y_train[::7] = (y_train[::7] + 1) % 3
    data = folder / "data.npz"
    np.savez(data, x=x, y=y, x_train=x_train, y_train=y_train, bounds=np.array([0.0, 1.0]))
    p1, p2 = folder / f"m1{info.suffix}", folder / "m2.pt"
    if info.suffix == ".safetensors":
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in m1.state_dict().items()}, p1)
    else:
        torch.save(m1.state_dict(), p1)
    torch.save(m2.state_dict(), p2)
    return Case(kind, folder, code, p1, p2, data)
