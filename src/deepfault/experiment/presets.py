"""Built-in experiments of every method, by name (``deepfault experiment --preset NAME``).

A preset is a method and a runner. DeepFault's grids (``paper-mnist``, ``paper-cifar``,
``digits``) are registered here; DeepXplore's and DRFuzz's reproductions register
themselves from their own packages (``deepfault.xplore.preset``, ``deepfault.fuzz.preset``),
which :func:`list_presets` imports on first use.

A runner is called as ``runner(store_path, *, data_dir, models_dir, executor, progress,
argv)`` with an :class:`~deepfault.experiment.executors.Executor` and returns a summary
dict; it writes every cell to the store at ``store_path`` as it goes, so a rerun resumes.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from ..core.registry import Registry

__all__ = ["Preset", "PRESETS", "register_preset", "get_preset", "list_presets"]


@dataclass(frozen=True)
class Preset:
    """A built-in experiment: its method, a one-line description and its runner."""

    name: str
    method: str
    description: str
    runner: Callable[..., dict]


#: Packages whose import registers more presets (optional: a missing one is skipped).
_PLUGINS = ("deepfault.xplore.preset", "deepfault.fuzz.preset")


def _load_plugins() -> None:
    for module in _PLUGINS:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as err:
            if err.name != module:  # a real missing dependency inside the plugin
                raise


PRESETS: Registry[Preset] = Registry("preset", load=_load_plugins)


def register_preset(name: str, *, method: str, runner: Callable[..., dict], description: str) -> Preset:
    """Add a preset; see the module docstring for the runner's signature."""
    return PRESETS.register(name, Preset(name, method, description, runner))


def list_presets() -> list[str]:
    return PRESETS.names()


def get_preset(name: str) -> Preset:
    return PRESETS.get(name)


def _deepfault_runner(config_name: str) -> Callable[..., dict]:
    def run(store_path, *, data_dir=None, models_dir=None, executor=None, progress=False, argv=None,
            device="cpu", seed=None) -> dict:
        from .grid import PRESETS as GRIDS
        from .grid import run_experiment, with_overrides

        config = with_overrides(GRIDS[config_name], seed=seed)
        summary = run_experiment(config, store_path, data_dir=data_dir, models_dir=models_dir,
                                 executor=executor, device=device, progress=progress, argv=argv)
        return {"name": config.name, **summary.__dict__}

    return run


def _register_deepfault() -> None:
    from .grid import PRESETS as GRIDS

    descriptions = {
        "paper-mnist": "DeepFault's MNIST experiment (mnist_1..3, k in 1,2,3,5,10), paper Tables 3-10",
        "paper-cifar": "DeepFault's CIFAR-10 experiment (cifar_1..3, k in 10..50)",
        "digits": "a small DeepFault grid on the embedded digits (seconds)",
    }
    for name in GRIDS:
        register_preset(name, method="deepfault", runner=_deepfault_runner(name),
                        description=descriptions.get(name, f"DeepFault grid {name}"))


_register_deepfault()
