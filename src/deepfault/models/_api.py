"""The architecture registry, apart from its entries (torchvision's ``models/_api.py``).

The entries live in their own modules (:mod:`.zoo` for the classifiers, :mod:`.dcgan` for the
GAN parts), which import :func:`register_architecture` from here; ``deepfault.models``
imports them so that the decorators have run before anyone looks a name up. This module
imports no entry, so no entry module can form a cycle with it.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from ..core.registry import Registry

__all__ = ["ARCHITECTURES", "register_architecture", "build_model", "list_architectures"]

#: Every zoo architecture, by name (``--arch``).
ARCHITECTURES: Registry[Callable[..., nn.Module]] = Registry("architecture")


def register_architecture(name: str) -> Callable[[Callable[..., nn.Module]], Callable[..., nn.Module]]:
    """Decorator registering ``builder(**kwargs) -> nn.Module`` under ``name``."""

    def add(builder: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
        ARCHITECTURES.register(name, builder)
        return builder

    return add


def list_architectures() -> list[str]:
    """The names of the registered zoo architectures."""
    return ARCHITECTURES.names()


def build_model(name: str, **kwargs) -> nn.Module:
    """A freshly initialised model of architecture ``name`` (initialised from the global RNG;
    seed it with ``torch.random.fork_rng`` for reproducible weights).
    """
    return ARCHITECTURES.get(name)(**kwargs)
