"""The embedded default model: ``digits_mlp`` trained on the bundled digits, cached.

Trained in a few seconds with a fixed seed, saved in the user cache directory (or
``$DEEPFAULT_CACHE``) with its test accuracy, and retrained whenever the cached file is
missing, unreadable or from another recipe.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TypedDict

from .._io import user_cache_dir
from ..data import Dataset
from .io import ModelFile, load_cached, save_model, training_finished
from .train import TrainConfig, train_model

__all__ = ["default_model", "RECIPE"]

log = logging.getLogger(__name__)

class Recipe(TypedDict):
    """The keys of :data:`RECIPE`."""

    arch: str
    arch_kwargs: dict[str, list[int]]
    epochs: int
    batch_size: int
    lr: float
    seed: int
    schedule: str
    version: int


#: Everything that determines the default model; part of the cache key.
RECIPE: Recipe = {
    "arch": "digits_mlp",
    "arch_kwargs": {"hidden": [24, 24, 24, 24]},
    "epochs": 40,
    "batch_size": 32,
    "lr": 3e-3,
    "seed": 0,
    "schedule": "constant",
    "version": 1,
}


def _cache_file() -> Path:
    return user_cache_dir() / "models" / f"digits_mlp-v{RECIPE['version']}-seed{RECIPE['seed']}.pt"


def train_default(data: Dataset) -> ModelFile:
    """Train the default model from scratch (seeded, deterministic on the CPU)."""
    config = TrainConfig(epochs=RECIPE["epochs"], batch_size=RECIPE["batch_size"],
                         lr=RECIPE["lr"], val_fraction=0.0, seed=RECIPE["seed"],
                         schedule=RECIPE["schedule"])
    import sys

    mf, result = train_model(RECIPE["arch"], data, config, arch_kwargs=RECIPE["arch_kwargs"],
                             progress=sys.stderr.isatty())
    if result.interrupted:  # nothing half-trained is returned, nor cached by default_model
        raise KeyboardInterrupt
    mf.meta["recipe"] = RECIPE
    return mf


def default_model(data: Dataset) -> ModelFile:
    """The cached default model, trained first when the cache is missing or unreadable."""
    path = _cache_file()
    cached = load_cached(path, lambda mf: mf.meta.get("recipe") == RECIPE and training_finished(mf), log,
                         "cached default model unreadable (%s); retraining")
    if cached is not None:
        return cached
    log.info("training the default model (digits_mlp on the bundled digits, about 10-30 s, once; "
             "cached in %s)...", path)
    mf = train_default(data)
    try:
        save_model(path, mf)
    except OSError as err:
        log.warning("could not cache the default model at %s: %s", path, err)
    return mf
