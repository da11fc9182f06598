"""Built-in experiments of every method, by name (``deepfault experiment --preset NAME``).

A preset is an :class:`~deepfault.experiment.runner.ExperimentPreset`: it plans its cells
and runs one job, while the base class owns the loop (hash, store, skip what is done,
executor, progress, summary). Each method package lists its presets in its
:class:`~deepfault.experiment.method.Method` record; registering the method registers them
here. This registry knows no entries of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.registry import Registry

if TYPE_CHECKING:
    from .runner import ExperimentPreset

__all__ = ["PRESETS", "register_preset", "get_preset", "list_presets"]

PRESETS: Registry[ExperimentPreset] = Registry("preset")


def register_preset(preset: ExperimentPreset) -> ExperimentPreset:
    """Add ``preset`` under its name.

    Raises:
        RuntimeError: A preset of that name is registered already.
    """
    return PRESETS.register(preset.name, preset)


def list_presets() -> list[str]:
    """The registered presets' names, sorted."""
    return PRESETS.names()


def get_preset(name: str) -> ExperimentPreset:
    """The preset registered as ``name``.

    Raises:
        DeepFaultError: Unknown name; the message lists the registered ones.
    """
    return PRESETS.get(name)
