"""Residual networks written as a user of deepfault would write them: plain ``nn.Module``
classes, no torchvision. ``benchmarks/bench_scale.py`` loads them with
``--arch benchmarks/models/resnet.py:ResNet50`` and a ``state_dict``.

* :class:`ResNet18Cifar`: the CIFAR variant of ResNet-18 (He et al. 2016): a 3x3 stem without
  max pooling, four stages of two basic blocks (64, 128, 256, 512 channels); 3x32x32 inputs,
  11.2M parameters at 10 classes.
* :class:`ResNet50`: the ImageNet ResNet-50 layout: a 7x7 stride-2 stem and max pooling, four
  stages of 3, 4, 6 and 3 bottleneck blocks (expansion 4, stride on the 3x3 convolution);
  3x224x224 inputs, 23.5M parameters at 10 classes (25.6M at 1,000).
"""

from __future__ import annotations

from torch import nn


def _conv_bn(cin: int, cout: int, kernel: int, stride: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=False), nn.BatchNorm2d(cout)]


class BasicBlock(nn.Module):
    """Two 3x3 convolutions and a shortcut (a 1x1 projection where the shape changes)."""

    expansion = 1

    def __init__(self, cin: int, width: int, stride: int = 1):
        super().__init__()
        cout = width * self.expansion
        self.body = nn.Sequential(*_conv_bn(cin, width, 3, stride), nn.ReLU(inplace=True),
                                  *_conv_bn(width, cout, 3))
        self.shortcut = (nn.Sequential(*_conv_bn(cin, cout, 1, stride))
                         if stride != 1 or cin != cout else nn.Identity())
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.act(self.body(x) + self.shortcut(x))


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (carrying the stride), 1x1 expand by 4, and a shortcut."""

    expansion = 4

    def __init__(self, cin: int, width: int, stride: int = 1):
        super().__init__()
        cout = width * self.expansion
        self.body = nn.Sequential(*_conv_bn(cin, width, 1), nn.ReLU(inplace=True),
                                  *_conv_bn(width, width, 3, stride), nn.ReLU(inplace=True),
                                  *_conv_bn(width, cout, 1))
        self.shortcut = (nn.Sequential(*_conv_bn(cin, cout, 1, stride))
                         if stride != 1 or cin != cout else nn.Identity())
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.act(self.body(x) + self.shortcut(x))


class ResNet(nn.Module):
    """A stem, four stages of ``block`` and a linear classifier on the global average."""

    def __init__(self, block: type[BasicBlock] | type[Bottleneck], depths: tuple[int, ...], *,
                 num_classes: int = 10, cifar_stem: bool = False):
        super().__init__()
        if cifar_stem:
            self.stem = nn.Sequential(*_conv_bn(3, 64, 3), nn.ReLU(inplace=True))
        else:
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                                      nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        cin, stages = 64, []
        for i, depth in enumerate(depths):
            width = 64 * 2**i
            blocks = []
            for j in range(depth):
                blocks.append(block(cin, width, 2 if (j == 0 and i > 0) else 1))
                cin = width * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.layer4(self.layer3(self.layer2(self.layer1(self.stem(x)))))
        return self.fc(self.pool(x).flatten(1))


class ResNet18Cifar(ResNet):
    """ResNet-18 for 3x32x32 inputs."""

    def __init__(self, num_classes: int = 10):
        super().__init__(BasicBlock, (2, 2, 2, 2), num_classes=num_classes, cifar_stem=True)


class ResNet50(ResNet):
    """ResNet-50 for 3x224x224 inputs."""

    def __init__(self, num_classes: int = 1000):
        super().__init__(Bottleneck, (3, 4, 6, 3), num_classes=num_classes)
