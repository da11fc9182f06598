"""The classifier architectures of the zoo, built as plain ``nn.Sequential`` code with named
layers; each registers itself in :data:`deepfault.models._api.ARCHITECTURES`.

``build_model``, ``list_architectures`` and ``ARCHITECTURES`` are also importable from here,
as they were before the registry got its own module.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from torch import nn

from ._api import ARCHITECTURES, build_model, list_architectures, register_architecture

__all__ = ["ARCHITECTURES", "register_architecture", "build_model", "list_architectures", "dense_stack",
           "keras_init"]


def dense_stack(in_features: int, hidden: Sequence[int], num_classes: int, *, bias: bool = True,
                alpha: float = 0.01) -> OrderedDict[str, nn.Module]:
    """``fc1, act1, ..., fcN, actN, logits``: Linear layers with LeakyReLU(alpha) between."""
    layers: OrderedDict[str, nn.Module] = OrderedDict()
    width = in_features
    for i, units in enumerate(hidden, start=1):
        layers[f"fc{i}"] = nn.Linear(width, units, bias=bias)
        layers[f"act{i}"] = nn.LeakyReLU(alpha)
        width = units
    layers["logits"] = nn.Linear(width, num_classes, bias=bias)
    return layers


@register_architecture("digits_mlp")
def digits_mlp(*, hidden: Sequence[int] = (24, 24, 24, 24), in_features: int = 64,
               num_classes: int = 10) -> nn.Module:
    """The embedded default: Flatten, 4 x [Linear(24), LeakyReLU(0.01)], Linear(10)."""
    return nn.Sequential(
        OrderedDict([("flatten", nn.Flatten()), *dense_stack(in_features, hidden, num_classes).items()])
    )


# --- the paper's models (spec section 6, paper Table 2) -------------------------------


def keras_init(model: nn.Module) -> nn.Module:
    """Keras's default initialisation (Glorot-uniform kernels, zero biases), which the
    paper's Keras prototype used; it trains these deep, narrow, bias-free MLPs better
    than PyTorch's default (benchmarks/train_zoo.py).
    """
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            nn.init.xavier_uniform_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
    return model


def _mnist_mlp(hidden: Sequence[int], num_classes: int) -> nn.Module:
    return keras_init(nn.Sequential(
        OrderedDict([
            ("flatten", nn.Flatten()),
            *dense_stack(28 * 28, hidden, num_classes, bias=False).items(),
        ])
    ))


@register_architecture("mnist_1")
def mnist_1(*, num_classes: int = 10) -> nn.Module:
    """Flatten, 5 x Dense(30) with LeakyReLU(0.01), Dense(10); no biases (27,420 parameters)."""
    return _mnist_mlp([30] * 5, num_classes)


@register_architecture("mnist_2")
def mnist_2(*, num_classes: int = 10) -> nn.Module:
    """Flatten, 6 x Dense(25) with LeakyReLU(0.01), Dense(10); no biases (22,975 parameters)."""
    return _mnist_mlp([25] * 6, num_classes)


@register_architecture("mnist_3")
def mnist_3(*, num_classes: int = 10) -> nn.Module:
    """Flatten, 8 x Dense(20) with LeakyReLU(0.01), Dense(10); no biases (18,680 parameters)."""
    return _mnist_mlp([20] * 8, num_classes)


def _cifar_front() -> OrderedDict[str, nn.Module]:
    """Conv(32, same), ReLU, Conv(32, valid), ReLU, MaxPool 2, Dropout 0.25, then the same
    with 64 channels, Flatten: 2,304 features for 3x32x32 inputs.
    """
    return OrderedDict([
        ("conv1", nn.Conv2d(3, 32, 3, padding=1)), ("relu1", nn.ReLU()),
        ("conv2", nn.Conv2d(32, 32, 3)), ("relu2", nn.ReLU()),
        ("pool1", nn.MaxPool2d(2)), ("drop1", nn.Dropout(0.25)),
        ("conv3", nn.Conv2d(32, 64, 3, padding=1)), ("relu3", nn.ReLU()),
        ("conv4", nn.Conv2d(64, 64, 3)), ("relu4", nn.ReLU()),
        ("pool2", nn.MaxPool2d(2)), ("drop2", nn.Dropout(0.25)),
        ("flatten", nn.Flatten()),
    ])


def _cifar(hidden: Sequence[int], num_classes: int) -> nn.Module:
    layers = OrderedDict([*_cifar_front().items(), *dense_stack(2304, hidden, num_classes).items()])
    return keras_init(nn.Sequential(layers))


@register_architecture("cifar_1")
def cifar_1(*, num_classes: int = 10) -> nn.Module:
    """Conv front, 4 x Dense(128) with LeakyReLU(0.01), Dense(10) (411,434 parameters)."""
    return _cifar([128] * 4, num_classes)


@register_architecture("cifar_2")
def cifar_2(*, num_classes: int = 10) -> nn.Module:
    """Conv front, 2 x Dense(256) with LeakyReLU(0.01), Dense(10) (724,010 parameters)."""
    return _cifar([256] * 2, num_classes)


@register_architecture("cifar_3")
def cifar_3(*, num_classes: int = 10) -> nn.Module:
    """Conv front, 1 x Dense(512) with LeakyReLU(0.01), Dense(10) (1,250,858 parameters)."""
    return _cifar([512], num_classes)


# --- LeNet variants for 28x28 inputs, as used by DeepXplore ---------------------------


def _lenet(channels: Sequence[int], hidden: Sequence[int], num_classes: int) -> nn.Module:
    """5x5 'same' convolutions with ReLU and 2x2 max pooling, then ReLU dense layers."""
    layers: OrderedDict[str, nn.Module] = OrderedDict()
    width = 1
    for i, c in enumerate(channels, start=1):
        layers[f"block{i}_conv1"] = nn.Conv2d(width, c, 5, padding=2)
        layers[f"block{i}_relu"] = nn.ReLU()
        layers[f"block{i}_pool1"] = nn.MaxPool2d(2)
        width = c
    layers["flatten"] = nn.Flatten()
    features = width * 7 * 7
    for i, units in enumerate(hidden, start=1):
        layers[f"fc{i}"] = nn.Linear(features, units)
        layers[f"fc{i}_relu"] = nn.ReLU()
        features = units
    layers["before_softmax"] = nn.Linear(features, num_classes)
    return nn.Sequential(layers)


@register_architecture("lenet1")
def lenet1(*, num_classes: int = 10) -> nn.Module:
    """LeNet-1 (DeepXplore's MNIST model 1): conv 4, pool, conv 12, pool, Dense(10)."""
    return _lenet([4, 12], [], num_classes)


@register_architecture("lenet4")
def lenet4(*, num_classes: int = 10) -> nn.Module:
    """LeNet-4 (DeepXplore's MNIST model 2): conv 6, pool, conv 16, pool, Dense(84), Dense(10)."""
    return _lenet([6, 16], [84], num_classes)


@register_architecture("lenet5")
def lenet5(*, num_classes: int = 10) -> nn.Module:
    """LeNet-5 (DeepXplore's MNIST model 3): conv 6, pool, conv 16, pool, Dense(120),
    Dense(84), Dense(10).
    """
    return _lenet([6, 16], [120, 84], num_classes)



@register_architecture("alexnet_fm")
def alexnet_fm(*, num_classes: int = 10, in_channels: int = 1, image_size: int = 28) -> nn.Module:
    """An AlexNet-style network for 28x28 images (DRFuzz's Fashion-MNIST model, scaled to
    the image): five 3x3 conv layers (32, 64, 96, 96, 64, ReLU) with max-pooling after the
    first, second and fifth, then Dense(256), Dense(256) with dropout 0.5, Dense(classes).
    """
    side = image_size // 2 // 2 // 2
    return nn.Sequential(OrderedDict([
        ("conv1", nn.Conv2d(in_channels, 32, 3, padding=1)), ("relu1", nn.ReLU()), ("pool1", nn.MaxPool2d(2)),
        ("conv2", nn.Conv2d(32, 64, 3, padding=1)), ("relu2", nn.ReLU()), ("pool2", nn.MaxPool2d(2)),
        ("conv3", nn.Conv2d(64, 96, 3, padding=1)), ("relu3", nn.ReLU()),
        ("conv4", nn.Conv2d(96, 96, 3, padding=1)), ("relu4", nn.ReLU()),
        ("conv5", nn.Conv2d(96, 64, 3, padding=1)), ("relu5", nn.ReLU()), ("pool5", nn.MaxPool2d(2)),
        ("flatten", nn.Flatten()),
        ("fc1", nn.Linear(64 * side * side, 256)), ("relu6", nn.ReLU()), ("drop1", nn.Dropout(0.5)),
        ("fc2", nn.Linear(256, 256)), ("relu7", nn.ReLU()), ("drop2", nn.Dropout(0.5)),
        ("fc3", nn.Linear(256, num_classes)),
    ]))
