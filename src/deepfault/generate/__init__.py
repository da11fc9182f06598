"""Input generation: every method's way of making new test inputs, under one verb.

A :class:`Strategy` has a name, the method it belongs to, a description and one
callable, ``generate``. DeepFault's suspiciousness-guided ascent is registered here;
DeepXplore's joint gradient ascent and the fuzzers (DRFuzz, DeepHunter) register
theirs from their own packages, imported on first use of :func:`list_strategies`.

=================  ==========  ======================================================
strategy           method      ``generate(...)``
=================  ==========  ======================================================
``ascent``         deepfault   :func:`~deepfault.generate.ascent.synthesize`
``deepxplore``     deepxplore  joint gradient ascent over several models
``drfuzz``         drfuzz      MCMC-guided regression fuzzing of two versions
``deephunter``     drfuzz      coverage-guided fuzzing (the baseline)
=================  ==========  ======================================================
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from ..core.registry import Registry

__all__ = ["Strategy", "STRATEGIES", "register_strategy", "get_strategy", "list_strategies"]


@dataclass(frozen=True)
class Strategy:
    """A way to generate test inputs; ``generate`` is its one verb."""

    name: str
    method: str
    description: str
    generate: Callable


def _load_plugins() -> None:
    """Register the strategies of the other methods (imported on first use of the registry,
    so that importing ``deepfault`` stays light)."""
    xplore = importlib.import_module("deepfault.xplore")
    register_strategy(xplore.STRATEGY.name, method="deepxplore", description=xplore.STRATEGY.description,
                      generate=xplore.STRATEGY.generate)
    fuzz = importlib.import_module("deepfault.fuzz")
    for name in fuzz.STRATEGIES.names():
        entry = fuzz.STRATEGIES.get(name)
        register_strategy(name, method="drfuzz", description=getattr(entry, "description", name),
                          generate=fuzz.run_campaign)


STRATEGIES: Registry[Strategy] = Registry("generation strategy", load=_load_plugins)


def register_strategy(name: str, *, method: str, description: str, generate: Callable) -> Strategy:
    """Add a strategy under ``name``."""
    return STRATEGIES.register(name, Strategy(name, method, description, generate))


def list_strategies() -> list[str]:
    return STRATEGIES.names()


def get_strategy(name: str) -> Strategy:
    return STRATEGIES.get(name)


def _synthesize(*args, **kwargs):
    from .ascent import synthesize

    return synthesize(*args, **kwargs)


register_strategy("ascent", method="deepfault", generate=_synthesize,
                  description="DeepFault's Algorithm 2: gradient ascent on the k most suspicious neurons")
