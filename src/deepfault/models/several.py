"""Several models on one data set, named as ``deepfault xplore --model`` names them.

:func:`open_xplore_model` opens one entry (a file, a zoo name resolved in a models folder
or trained on first use and cached, or Keras weights loaded into a zoo architecture);
:func:`load_xplore_inputs` prepares two or more of them
(:func:`~deepfault.models.prepare.prepare_model`) with one data set, in one value range,
as DeepXplore feeds the same inputs to every model.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypedDict, Unpack

from ..data import Dataset, load_dataset
from ..errors import DeepFaultError
from .io import ModelFile, warn_if_chance
from .keras_weights import is_weights_only, open_keras_weights
from .load import open_model
from .prepare import PreparedModel, model_label, prepare_model
from .zoo import list_architectures

__all__ = ["ModelLookup", "LookupKeywords", "open_xplore_model", "load_xplore_inputs", "zoo_cache_file",
           "ZOO_RECIPE_VERSION"]

log = logging.getLogger(__name__)

#: Bumped when the recipe of zoo models trained on first use changes (part of the cache check).
ZOO_RECIPE_VERSION = 1


def _aligned(values, count: int, option: str) -> list:
    if values is None:
        return [None] * count
    if len(values) == 1:
        return list(values) * count
    if len(values) != count:
        raise DeepFaultError(f"{option} gives {len(values)} entries for {count} models; give one per model "
                             "(or one for all)")
    return list(values)


@dataclass(frozen=True)
class ModelLookup:
    """How the entries of ``deepfault xplore --model`` are found and opened, the same for each.

    Attributes:
        models_dir: Where zoo names are looked up first (``NAME-DATASET.pt``); a name not
            there is trained on first use and cached (:func:`zoo_cache_file`).
        trust_pickle: Allow unpickling whole pickled modules; only for trusted files.
        progress: Show the progress of a zoo model's first-use training.
        arch_kwargs: Keyword arguments of a model's architecture (``arch``).
        threads: CPU threads of a first-use training (:func:`deepfault.models.train.fit`'s rule:
            ``"auto"``, a count or ``None``).
    """

    models_dir: str | os.PathLike = "."
    trust_pickle: bool = False
    progress: bool = True
    arch_kwargs: dict | None = None
    threads: int | str | None = "auto"


class LookupKeywords(TypedDict, total=False):
    """:class:`ModelLookup`'s fields as keywords (the older form of the functions that take one)."""

    models_dir: str | os.PathLike
    trust_pickle: bool
    progress: bool
    arch_kwargs: dict | None
    threads: int | str | None


def open_xplore_model(entry: str, *, arch: str | None = None, weights: str | None = None,
                      dataset: str | None = None, input_shape: tuple[int, ...] | None = None,
                      data: Dataset | None = None, lookup: ModelLookup | None = None,
                      **keywords: Unpack[LookupKeywords]) -> ModelFile:
    """One model of ``deepfault xplore --model`` opened (not prepared): a file, a zoo name
    (``NAME`` is ``MODELS_DIR/NAME-DATASET.pt``, as ``deepfault train`` names it; without that
    file, and given ``data``, the zoo model trained on first use and cached, see
    :func:`zoo_cache_file`), or a Keras weights file loaded into a zoo architecture.

    Args:
        entry: A model file, a zoo name or a Keras weights file.
        arch: Its architecture (a zoo name for Keras weights).
        weights: Keras weights for it.
        dataset: The data set's name (finds a zoo name's trained file).
        input_shape: Per-input shape of the data, for Keras weights after a Flatten.
        data: The data set a zoo model missing from ``models_dir`` is trained on.
        lookup: Where and how models are found (default: :class:`ModelLookup`'s).
        **keywords: :class:`ModelLookup`'s fields, one by one (they replace those of ``lookup``).

    Raises:
        DeepFaultError: A zoo name without a data set, or without a trained file and no
            ``data`` to train it on, or Keras weights without an architecture.
    """
    lookup = replace(lookup or ModelLookup(), **keywords)
    path = Path(entry)
    zoo = entry in list_architectures() and not path.exists()
    h5 = next((f for f in (weights, None if zoo else entry) if f and is_weights_only(f)), None)
    if h5 is not None and (arch or zoo):
        return open_keras_weights(h5, arch=arch or entry, input_shape=input_shape, dataset=dataset)
    if zoo:
        if dataset is None:
            raise DeepFaultError(f"zoo name {entry!r} needs --dataset to find its trained file")
        path = Path(lookup.models_dir) / f"{entry}-{dataset}.pt"
        if not path.is_file():
            if data is None:
                raise DeepFaultError(
                    f"no trained {entry} for {dataset} at {str(path)!r}; train it with 'deepfault train "
                    f"--arch {entry} --dataset {dataset} --out {path}' or give the model file"
                )
            return _trained_on_first_use(entry, data, progress=lookup.progress, threads=lookup.threads)
    if h5 is not None:
        raise DeepFaultError(f"{h5!r} holds Keras weights without an architecture; name it with --arch "
                             "(lenet1, lenet4, lenet5 for DeepXplore's MNIST models)")
    return open_model(path, weights=weights, arch=arch, arch_kwargs=lookup.arch_kwargs,
                      trust_pickle=lookup.trust_pickle)


def zoo_cache_file(arch: str, data: Dataset) -> Path:
    """Where zoo model ``arch`` trained on first use on ``data`` is kept: the user cache
    (``$DEEPFAULT_CACHE/models/``), keyed by the data set's name and a digest of its
    training split (labels, shape, first images), so another copy of MNIST trains its own.
    """
    from .._io import user_cache_dir

    digest = hashlib.sha1(usedforsecurity=False)
    digest.update(repr((data.x_train.shape, str(data.x_train.dtype))).encode())
    digest.update(data.y_train.tobytes())
    digest.update(data.x_train[:64].tobytes())
    return user_cache_dir() / "models" / f"{arch}-{data.name}-{digest.hexdigest()[:12]}.pt"


def _trained_on_first_use(arch: str, data: Dataset, *, progress: bool,
                          threads: int | str | None = "auto") -> ModelFile:
    """The zoo model ``arch`` on ``data`` from the cache, trained there first if missing.

    The recipe is :class:`~deepfault.models.train.TrainConfig`'s default (the one the
    ``deepxplore-mnist`` preset trains its models with), seeded, so every machine trains the
    same model; the time is announced when it is done. Only a training that finished is
    cached, and only a cached training that finished is reused (an older file left by an
    interrupted one is trained again).

    Raises:
        KeyboardInterrupt: The training was interrupted: nothing is cached.
    """
    import time

    from .io import load_cached, save_model, training_finished
    from .train import TrainConfig, train_model

    path = zoo_cache_file(arch, data)
    cached = load_cached(path, lambda mf: mf.meta.get("zoo_first_use") == ZOO_RECIPE_VERSION
                         and training_finished(mf), log, "cached %s unreadable (%s); training it again", path)
    if cached is not None:
        return cached
    config = TrainConfig()
    log.warning("training zoo model %s on %s (first use: %d epochs; cached in %s)...", arch, data.name,
                config.epochs, path)
    start = time.perf_counter()
    mf, result = train_model(arch, data, config, arch_kwargs={"num_classes": data.num_classes},
                             progress=progress, threads=threads)
    if result.interrupted:
        raise KeyboardInterrupt
    mf.meta["zoo_first_use"] = ZOO_RECIPE_VERSION
    save_model(path, mf)
    log.warning("trained %s on %s in %.0f s (test accuracy %.4f); cached in %s", arch, data.name,
                time.perf_counter() - start, mf.meta["test_accuracy"], path)
    warn_if_chance(mf, str(path))
    return mf


def load_xplore_inputs(entries: Sequence[str], *, dataset: str | None = None,
                       data_dir: str | os.PathLike | None = None, archs: Sequence[str | None] | None = None,
                       weights: Sequence[str | None] | None = None, lookup: ModelLookup | None = None,
                       **keywords: Unpack[LookupKeywords]) -> tuple[list[PreparedModel], Dataset]:
    """Two or more models, each opened by :func:`open_xplore_model` and prepared
    (:func:`~deepfault.models.prepare.prepare_model`) with one data set, and the data.

    Args:
        entries: Model files or zoo names (``deepfault xplore --model``).
        dataset: The data set (default: the one the first model file names).
        data_dir: Data root.
        archs: Architecture per model, any form of :func:`~deepfault.models.build_model` (one
            entry applies to all; ``None`` skips a model).
        weights: Keras weights per model, likewise.
        lookup: Where and how the models are found (:class:`ModelLookup`; its ``arch_kwargs``
            go to every model with an ``archs`` entry).
        **keywords: :class:`ModelLookup`'s fields, one by one (they replace those of ``lookup``).

    Raises:
        DeepFaultError: Fewer than two models, per-model lists of another length, no data set
            named, or models that take inputs in different ranges.
    """
    lookup = replace(lookup or ModelLookup(), **keywords)
    entries = list(entries)
    if len(entries) < 2:
        raise DeepFaultError(f"DeepXplore compares two or more models; got {len(entries)}: "
                             "give at least two: --model A --model B (or --model A,B)")
    arch_list = _aligned(archs, len(entries), "--arch")
    weight_list = _aligned(weights, len(entries), "--weights")
    data = load_dataset(dataset, data_dir=data_dir) if dataset else None
    prepared: list[PreparedModel] = []
    for entry, arch, w in zip(entries, arch_list, weight_list, strict=True):
        mf = open_xplore_model(entry, arch=arch, weights=w, dataset=dataset,
                               input_shape=data.input_shape if data is not None else None, data=data,
                               lookup=lookup if arch else replace(lookup, arch_kwargs=None))
        if data is None:
            if mf.dataset is None:
                raise DeepFaultError(f"model {entry!r} does not name its data set; add --dataset NAME")
            dataset = mf.dataset
            data = load_dataset(dataset, data_dir=data_dir)
        label = model_label(entry, mf)
        if label in [p.name for p in prepared]:
            label = f"{label}#{len(prepared)}"
        prepared.append(prepare_model(mf, data, data_dir=data_dir, name=label))
    bounds = {tuple(p.bounds or ()) for p in prepared}
    if len(bounds) > 1:
        raise DeepFaultError(f"the models take inputs in different ranges ({sorted(bounds)}); DeepXplore "
                             "feeds the same inputs to every model")
    first = prepared[0].data
    if first is None:  # prepared with a data set, so never
        raise DeepFaultError("the models were prepared without a data set")
    return prepared, first
