"""A registry of architectures, built as plain ``nn.Sequential`` code with named layers."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

from torch import nn

from ..errors import DeepFaultError

__all__ = ["register_architecture", "build_model", "list_architectures"]

_REGISTRY: dict[str, Callable[..., nn.Module]] = {}


def register_architecture(name: str):
    """Decorator registering ``builder(**kwargs) -> nn.Module`` under ``name``."""

    def decorate(builder):
        if name in _REGISTRY:
            raise RuntimeError(f"architecture {name!r} is registered twice")
        _REGISTRY[name] = builder
        return builder

    return decorate


def list_architectures() -> list[str]:
    return sorted(_REGISTRY)


def build_model(name: str, **kwargs) -> nn.Module:
    """A freshly initialised model of architecture ``name`` (initialised from the global RNG;
    seed it with ``torch.random.fork_rng`` for reproducible weights)."""
    try:
        builder = _REGISTRY[name]
    except KeyError:
        raise DeepFaultError(
            f"unknown architecture {name!r}; known: {', '.join(list_architectures())}"
        ) from None
    return builder(**kwargs)


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
