"""Data sets: a registry of loaders returning :class:`Dataset` values.

Every data set knows its input shape, number of classes, class names and the valid
input range (``bounds``) that synthesis clips to. Loaders are registered by name with
:func:`register_dataset` (the registry is :mod:`._api`, the value :mod:`.dataset`) and
looked up with :func:`load_dataset`.
"""

from __future__ import annotations

from . import cifar, digits, mnist, svhn  # noqa: F401  (the registry's entries: importing them registers them)
from ._api import DATASETS, DatasetInfo, default_data_dir, list_datasets, load_dataset, register_dataset
from .dataset import Dataset, as_dataset, pixel_dataset

__all__ = [
    "DATASETS",
    "Dataset",
    "as_dataset",
    "DatasetInfo",
    "register_dataset",
    "load_dataset",
    "list_datasets",
    "default_data_dir",
    "pixel_dataset",
]
