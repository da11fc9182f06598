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

__all__ = ["EXPERIMENT_COMMAND", "PRESETS", "register_preset", "get_preset", "list_presets",
           "describe_presets"]

#: ``deepfault experiment``'s help line and description (``{presets}``: :func:`describe_presets`).
EXPERIMENT_COMMAND = (
    "run (or resume) an experiment grid into a results store",
    "Run a built-in experiment (a preset of any method) or a DeepFault grid from a TOML file, and write "
    "every cell to an SQLite store as soon as it is done. Rerunning the same command skips finished cells, "
    "also after a crash or kill. Presets: {presets}.")

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


def describe_presets() -> str:
    """Every preset in one line each, ``; ``-joined: its name, description and options
    (``deepfault experiment --help``).
    """
    lines = []
    for name in list_presets():
        preset = get_preset(name)
        opts = getattr(preset, "options", {}) or {}
        extra = f" (options: {'; '.join(f'{k}: {v}' for k, v in opts.items())})" if opts else ""
        lines.append(f"{preset.name}: {preset.description}{extra}")
    return "; ".join(lines)
