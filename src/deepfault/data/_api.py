"""The data-set registry, apart from its entries (torchvision's ``models/_api.py``).

The loaders live in their own modules (:mod:`.digits`, :mod:`.mnist`, :mod:`.cifar`,
:mod:`.svhn`), which import :func:`register_dataset` from here; ``deepfault.data`` imports
them so that the decorators have run before anyone looks a name up. This module imports no
loader (``.npz`` files are read through :mod:`.npz`, imported when one is asked for).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..core.registry import Registry, suggestion
from ..errors import DeepFaultError
from .dataset import Dataset
from .paths import DATA_ENV, _cache_data_dir, default_data_dir

__all__ = ["DATASETS", "DatasetInfo", "register_dataset", "load_dataset", "list_datasets", "default_data_dir",
           "DATA_ENV", "data_dir_to_record", "usable_recorded_dir"]

@dataclass(frozen=True)
class DatasetInfo:
    """What the registry knows about a data set without loading it."""

    name: str
    loader: Callable[..., Dataset]
    description: str


#: Every built-in data set, by name (``--dataset``).
DATASETS: Registry[DatasetInfo] = Registry("data set")


def register_dataset(name: str, *, description: str = ""):
    """Decorator registering ``loader(data_dir: Path | None, **kwargs) -> Dataset``."""

    def decorate(loader: Callable[..., Dataset]) -> Callable[..., Dataset]:
        DATASETS.register(name, DatasetInfo(name, loader, description or (loader.__doc__ or "").strip()))
        return loader

    return decorate


def list_datasets() -> list[str]:
    """The names of the registered data sets, sorted."""
    return DATASETS.names()


def data_dir_to_record(data: Dataset) -> str | None:
    """The data root a model trained on ``data`` remembers: the folder it was loaded from
    (absolute), or ``None`` where that is the default (the user cache) or the set is embedded.
    """
    root = data.meta.get("data_dir")
    if not root:
        return None
    if Path(root).resolve() == _cache_data_dir().expanduser().resolve():
        return None
    return str(root)


def usable_recorded_dir(data_dir: str | os.PathLike | None, recorded: str | None) -> str | os.PathLike | None:
    """The data root to use given ``--data-dir`` (``data_dir``) and the one a model file
    recorded: ``data_dir`` when given; else ``None`` (the default) when ``$DEEPFAULT_DATA`` is
    set or nothing usable was recorded; else the recorded folder (when it still exists).

    So the precedence is ``--data-dir``, then ``$DEEPFAULT_DATA``, then the model file's
    folder, then the user cache.
    """
    if data_dir is not None or os.environ.get(DATA_ENV) or not recorded:
        return data_dir
    return recorded if Path(recorded).is_dir() else None


def load_dataset(name: str, *, data_dir: str | os.PathLike | None = None, **kwargs) -> Dataset:
    """Load a registered data set by name, or a user's ``.npz`` file by its path.

    Raises:
        DeepFaultError: ``name`` is not registered (the message lists the known names),
            or the loader found missing or corrupt files.
    """
    if str(name).lower().endswith(".npz"):
        from .npz import load_npz

        return load_npz(name, **kwargs)
    info = DATASETS.get(name)
    import inspect

    options = [p for p in list(inspect.signature(info.loader).parameters)[1:] if p not in ("args", "kwargs")]
    unknown = sorted(set(kwargs) - set(options))
    if unknown:
        takes = f"its options: {', '.join(options)}" if options else "it takes no options"
        hint = "; --scale01 is for 0-255 data sets such as cifar10 and svhn" if "scale01" in unknown else ""
        hint = hint or suggestion(unknown[0], options)
        raise DeepFaultError(f"data set {name!r} does not take {', '.join(unknown)} ({takes}){hint}")
    root = default_data_dir(data_dir)
    data = info.loader(root, **kwargs)
    from .download import SOURCES

    if name in SOURCES:  # read from files under the root, which a model trained on it remembers
        data.meta.setdefault("data_dir", str(root.resolve()))
    return data
