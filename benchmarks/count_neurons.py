"""Neuron counts of ResNet-18 (CIFAR), ResNet-50 and a ViT-tiny under each layer selection
(the table of ``docs/coverage.md``, "What a neuron is").

The three networks are written out here with torchvision's and timm's module and class
names (``BasicBlock``, ``Bottleneck``, ``Block`` in ``blocks``), so no torchvision or timm is
needed: ResNet-18 in its CIFAR form (3x3 stem, no max-pool, 32x32 inputs), torchvision's
ResNet-50 (224x224) and timm's ``vit_tiny_patch16_224`` (192 features, 12 blocks, 3 heads).
The weights are random: a count does not depend on them. Each selection is resolved by
:func:`deepfault.core.capture.capture` on one input, as every command does.

Usage:
    .venv/bin/python benchmarks/count_neurons.py [--out FILE.json]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torch import nn

from deepfault._io import write_json
from deepfault.core.capture import capture, default_layers

REPO = Path(__file__).resolve().parents[1]


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or cin != planes:
            self.downsample = nn.Sequential(nn.Conv2d(cin, planes, 1, stride, bias=False),
                                            nn.BatchNorm2d(planes))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + (x if self.downsample is None else self.downsample(x)))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != planes * 4:
            self.downsample = nn.Sequential(nn.Conv2d(cin, planes * 4, 1, stride, bias=False),
                                            nn.BatchNorm2d(planes * 4))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet(nn.Module):
    def __init__(self, block, layers, num_classes: int, *, cifar: bool):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False) if cifar else nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.Identity() if cifar else nn.MaxPool2d(3, 2, 1)
        cin, stages = 64, []
        for i, (planes, count) in enumerate(zip((64, 128, 256, 512), layers, strict=True)):
            blocks = []
            for j in range(count):
                blocks.append(block(cin, planes, 2 if i > 0 and j == 0 else 1))
                cin = planes * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class PatchEmbed(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.proj = nn.Conv2d(3, dim, 16, 16)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        n, t, d = x.shape
        q, k, v = self.qkv(x).reshape(n, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        out = nn.functional.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(n, t, d))


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, 4 * dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    """timm's ``vit_tiny_patch16_224``: 196 patches and a class token, 192 features."""

    def __init__(self, dim: int = 192, depth: int = 12, heads: int = 3, num_classes: int = 1000):
        super().__init__()
        self.patch_embed = PatchEmbed(dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, 197, dim))
        self.blocks = nn.Sequential(*(Block(dim, heads) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(len(x), -1, -1), x], dim=1) + self.pos_embed
        return self.head(self.norm(self.blocks(x))[:, 0])


NETWORKS = {
    "resnet18-cifar": (lambda: ResNet(BasicBlock, (2, 2, 2, 2), 10, cifar=True), (3, 32, 32)),
    "resnet50": (lambda: ResNet(Bottleneck, (3, 4, 6, 3), 1000, cifar=False), (3, 224, 224)),
    "vit-tiny": (VisionTransformer, (3, 224, 224)),
}
SELECTIONS = (None, "blocks", "linear-conv", "deepxplore")


def count(model: nn.Module, shape, layers) -> dict:
    with torch.no_grad(), capture(model, layers) as rec:
        model(torch.rand(1, *shape))
        rec.collect()
    assert rec.layout is not None
    return {"neurons": rec.layout.num_neurons, "layers": len(rec.layout.layers)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "count_neurons.json"))
    args = p.parse_args(argv)
    torch.manual_seed(0)
    rows = {}
    for name, (build, shape) in NETWORKS.items():
        model = build().eval()
        row: dict = {"default_selection": default_layers(model)}
        for layers in SELECTIONS:
            row["default" if layers is None else layers] = count(model, shape, layers)
        rows[name] = row
        print(name, row, flush=True)
    write_json(args.out, {"benchmark": "count_neurons", "networks": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
