"""What a method is to the engine: one record per method package, in one registry.

Each method package (DeepFault's :mod:`deepfault.localization`, :mod:`deepfault.coverage`,
:mod:`deepfault.xplore`, :mod:`deepfault.fuzz`, :mod:`deepfault.repair`) exposes one
:class:`Method` as ``METHOD``; :mod:`deepfault.methods` is the only place that lists them
and registers them here. The engine (``core``, ``models``, ``data``, ``experiment``)
imports no method: it looks methods up by name in :data:`METHODS` (torchvision's
``models/_api.py`` registry, which knows no entries).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.registry import Registry

if TYPE_CHECKING:
    from .report import ReportPaths
    from .runner import ExperimentPreset

__all__ = ["Method", "METHODS", "register_method", "get_method", "list_methods"]


@dataclass(frozen=True)
class Method:
    """A method package as the engine sees it.

    Attributes:
        name: The name its experiments and cells are stored under (``"deepfault"``, ...).
        title: How reports and help name it ("DeepFault", "DeepXplore", ...).
        description: One line for ``deepfault --help`` and the docs.
        presets: Its built-in experiments (``deepfault experiment --preset NAME``).
        result_type: The dataclass its main public function returns.
        report: ``report(store_path, experiment, out_dir) -> ReportPaths`` writes the report
            of one of its experiments into ``out_dir`` (``None``: it has no stored experiments).
        commands: Its CLI sub-commands: modules ``deepfault.cli.NAME`` with ``add_parser(sub)``.
        entries: Its public entries, each ``fn(model_or_models, data, config, *, runtime=None)
            -> Outcome`` (:func:`deepfault.core.entry.entry`), by name.
        texts: What its sub-commands (and their actions: ``"coverage rank"``) say of themselves
            in ``--help``: ``command -> (help line, description)``.
        renamed: Old spellings of its commands' options: ``command -> {old: new}`` (an old
            spelling is an error that names its new one; issue 19: one name for each concept).
    """

    name: str
    title: str
    description: str
    presets: tuple[ExperimentPreset, ...] = ()
    result_type: type | None = None
    report: Callable[[Path, dict, Path], ReportPaths] | None = None
    commands: tuple[str, ...] = ()
    entries: tuple[Callable, ...] = ()
    texts: Mapping[str, tuple[str, str]] = field(default_factory=dict, compare=False)
    renamed: Mapping[str, Mapping[str, str]] = field(default_factory=dict, compare=False)


#: Every registered method, by its stored name.
METHODS: Registry[Method] = Registry("method")


def register_method(method: Method) -> Method:
    """Register ``method`` and its presets.

    Raises:
        RuntimeError: A method or preset of that name is registered already.
    """
    from .presets import register_preset

    METHODS.register(method.name, method)
    for preset in method.presets:
        register_preset(preset)
    return method


def get_method(name: str) -> Method:
    """The method stored as ``name``.

    Raises:
        DeepFaultError: Unknown name; the message lists the registered ones.
    """
    return METHODS.get(name)


def list_methods() -> list[str]:
    """The registered methods' names, sorted."""
    return METHODS.names()
