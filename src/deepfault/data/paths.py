"""Where data sets live: the data root (``--data-dir``, ``$DEEPFAULT_DATA``, the user cache).

Its own module so that the loaders' registry (:mod:`._api`) and the downloader
(:mod:`.download`) both read it without importing each other.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DATA_ENV", "default_data_dir"]

#: The environment variable naming the data root (``--data-dir`` wins over it).
DATA_ENV = "DEEPFAULT_DATA"


def _cache_data_dir() -> Path:
    from .._io import user_cache_dir

    return user_cache_dir() / "data"


def default_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """The data root: ``data_dir``, else ``$DEEPFAULT_DATA``, else ``data/`` in the user cache
    (``$DEEPFAULT_CACHE`` when set).
    """
    if data_dir is not None:
        return Path(data_dir).expanduser()
    env = os.environ.get(DATA_ENV)
    if env:
        return Path(env).expanduser()
    return _cache_data_dir()
