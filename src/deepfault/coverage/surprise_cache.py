"""Surprise adequacy of generated inputs, with the fitted state kept in the user cache.

``deepfault run`` and ``deepfault xplore`` report the DSA and LSA of every input they generate
beside its L1/L_inf distance to the original: how far the new input's activations lie from the
training data's, for the model that judges it. Fitting a :class:`~.surprise.Surprise` takes
one forward pass over the training split, so the state is fitted once per (model weights,
layers, transform, training inputs) and kept as ``.npz`` in ``$DEEPFAULT_CACHE/surprise/``;
a later run with the same model and data loads it.

The cache key is the SHA-256 of the model's weights
(:func:`~deepfault.coverage.profile.model_hash`), the layer selection, the transform, the
fitting settings and a SHA-256 of the training inputs' bytes, so another model, other layers
or other training data never reuse a state. A cached file that cannot be read, or that
belongs to another model, is fitted again and replaced (with a logged warning); a cache
folder that cannot be written only costs the next run another fit.

Examples:
    >>> import torch
    >>> from torch import nn
    >>> torch.manual_seed(0) and None
    >>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    >>> fit = cached_surprise(model, torch.randn(200, 4), layers=["0"], cache_dir=None)
    >>> fit.source, fit.surprise.num_inputs
    ('fitted', 200)
    >>> scores = SurpriseScorer(model, fit.surprise)(torch.randn(5, 4))
    >>> sorted(scores), scores["dsa"].shape
    (['dsa', 'lsa'], (5,))
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from ..core.mapped import release
from ..errors import DeepFaultError
from .profile import _module, model_hash
from .surprise import (
    SURPRISE_FORMAT,
    Surprise,
    load_surprise,
    parse_kinds,
    save_surprise,
    surprise_scores,
)
from .surprise import _fit_by_keywords as fit_surprise

if TYPE_CHECKING:
    from ..models.prepare import PreparedModel

__all__ = ["GENERATED_KINDS", "CachedSurprise", "SurpriseScorer", "cache_key", "cached_surprise",
           "surprise_state", "surprise_states", "training_fingerprint"]

log = logging.getLogger(__name__)

#: The scores reported for generated inputs (LSA costs about as little as DSA on a LeNet).
GENERATED_KINDS = ("dsa", "lsa")

#: Bytes :func:`training_fingerprint` hashes between two releases of a mapped data set's pages.
_HASH_CHUNK = 16 << 20


def training_fingerprint(inputs) -> str:
    """SHA-256 of the inputs' shape and float32 bytes (what the fit sees)."""
    x = inputs.detach().cpu().numpy() if isinstance(inputs, torch.Tensor) else np.asarray(inputs)
    x = np.ascontiguousarray(x, dtype=np.float32)
    h = hashlib.sha256(repr(x.shape).encode())
    flat = x.reshape(-1).view(np.uint8)  # the same bytes as x.tobytes(), without a copy of them
    for start in range(0, len(flat), _HASH_CHUNK):  # a chunk at a time: a mapped set's pages go back
        h.update(flat[start : start + _HASH_CHUNK].data)
        release()
    return h.hexdigest()


def cache_key(model_sha256: str, data_sha256: str, *, layers: Sequence[str] | str | None,
              transform: str) -> str:
    """The hex key of a fitted state: everything the fit depends on, hashed."""
    parts = {"format": SURPRISE_FORMAT, "model": model_sha256, "data": data_sha256, "transform": transform,
             "layers": layers if layers is None or isinstance(layers, str) else list(layers),
             "var_threshold": 1e-5, "max_features": None, "classes": "predictions"}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True, eq=False)
class CachedSurprise:
    """A fitted state and where it came from.

    Attributes:
        surprise: The state.
        source: ``"cache"`` (loaded from ``path``), ``"fitted"`` (and written to ``path`` when
            it is not ``None``) or ``"file"`` (a state the user gave).
        path: The cache file or the given file (``None``: fitted without a cache).
        seconds: Time to load or fit it.
    """

    surprise: Surprise
    source: str
    path: Path | None
    seconds: float

    def to_dict(self) -> dict:
        return {**self.surprise.to_dict(), "source": self.source,
                "path": None if self.path is None else str(self.path), "seconds": self.seconds}

    def describe(self) -> str:
        """One line: where the state came from (loaded from the cache, fitted now and cached,
        fitted now without a cache, or the user's file) and what it holds.
        """
        s = self.surprise
        fitted = "fitted and cached" if self.path is not None else "fitted without a cache"
        where = {"cache": "loaded from the cache", "fitted": fitted, "file": "from --surprise"}[self.source]
        layers = ", ".join(f"{n}[{k}]" for n, k in zip(s.layers, s.sizes, strict=True))
        return (f"surprise state {where} ({s.num_inputs} training inputs, layer {layers}; "
                f"{self.seconds:.2f} s)")


def cached_surprise(
    model: nn.Module | PreparedModel,
    train_inputs,
    *,
    layers: Sequence[str] | str | None = None,
    transform: str = "raw",
    cache_dir: str | os.PathLike | None = "user",
    batch_size: int | str = "auto",
    progress: bool = False,
) -> CachedSurprise:
    """The surprise state of ``model`` fitted on ``train_inputs`` (grouped by the model's
    predictions, Kim et al.'s layer choice by default), from the cache when it holds one.

    Args:
        model: The classifier.
        train_inputs: ``(N, ...)`` training inputs (a tensor or an array).
        layers: As :func:`~.surprise.fit_surprise` (``None``: the layer before the logits).
        transform: ``"raw"`` or ``"layer-minmax"``.
        cache_dir: Folder of the cached states: ``"user"`` (``$DEEPFAULT_CACHE/surprise``), a
            path, or ``None`` to fit without caching.
        batch_size: Inputs per forward pass of the fit.
        progress: Show a progress bar while fitting.

    Raises:
        DeepFaultError: No training inputs, or what :func:`~.surprise.fit_surprise` raises.
    """
    module = _module(model)
    if train_inputs is None or len(train_inputs) == 0:
        raise DeepFaultError("surprise adequacy needs the training split, and this data set has none; "
                             "use a data set with training inputs, give a fitted state, or turn it off")
    start = time.perf_counter()
    path = None
    if cache_dir is not None:
        folder = _user_folder() if cache_dir == "user" else Path(cache_dir).expanduser()
        mine = model_hash(module)
        key = cache_key(mine, training_fingerprint(train_inputs), layers=layers, transform=transform)
        path = folder / f"{mine[:16]}-{key[:16]}.npz"
        if path.is_file():
            try:
                state = load_surprise(path)
                state.check_model(module)
            except DeepFaultError as err:
                log.warning("cached surprise state %s is unusable (%s); fitting it again", path, err)
            else:
                return CachedSurprise(state, "cache", path, time.perf_counter() - start)
    state = fit_surprise(module, train_inputs, layers=layers, transform=transform, batch_size=batch_size,
                         progress=progress)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            save_surprise(state, path)
        except OSError as err:
            log.warning("could not cache the surprise state at %s (%s); the next run fits it again",
                        path, err)
            path = None
    return CachedSurprise(state, "fitted", path, time.perf_counter() - start)


def surprise_state(model: nn.Module | PreparedModel, train_inputs, file: str | os.PathLike | None = None, *,
                   progress: bool = False) -> tuple[CachedSurprise | None, str | None]:
    """The state a method scores its generated inputs against: ``(state, None)`` from ``file``
    when given (checked against the model), else fitted on ``train_inputs`` and cached
    (:func:`cached_surprise`); ``(None, why)`` when that fit is impossible (no training split,
    one class, too many values): the method goes on without the scores.

    Raises:
        DeepFaultError: An unreadable ``file``, or a state of another model.
    """
    if file is not None:
        start = time.perf_counter()
        state = load_surprise(file)
        state.check_model(_module(model))
        return CachedSurprise(state, "file", Path(file), time.perf_counter() - start), None
    try:
        return cached_surprise(model, train_inputs, progress=progress), None
    except DeepFaultError as err:
        return None, str(err)


def surprise_states(models: Sequence[PreparedModel], train_inputs, files: Sequence[str | None] = (), *,
                    progress: bool = False) -> tuple[list[CachedSurprise] | None, str | None]:
    """:func:`surprise_state` of every model (``files``: one per model, ``None`` to fit one, or none
    at all): ``(states, None)``, or ``(None, "NAME: why")`` for the first model whose state cannot
    be fitted.
    """
    states = []
    for i, model in enumerate(models):
        state, why = surprise_state(model.module, train_inputs, files[i] if files else None,
                                    progress=progress)
        if state is None:
            return None, f"{model.name}: {why}"
        states.append(state)
    return states, None


def _user_folder() -> Path:
    from .._io import user_cache_dir

    return user_cache_dir() / "surprise"


class SurpriseScorer:
    """``scorer(inputs) -> {kind: (N,) float64}``: the surprise adequacy of inputs for one model.

    The plain callable the methods take (they import no coverage code): one streamed pass of
    :func:`~.surprise.surprise_scores`, which checks that the state belongs to the model.

    Args:
        model: The classifier the state was fitted for.
        surprise: Its fitted state.
        kinds: The scores (default :data:`GENERATED_KINDS`).
        batch_size: Inputs per forward pass.
    """

    def __init__(self, model: nn.Module | PreparedModel, surprise: Surprise, *,
                 kinds: str | Iterable[str] = GENERATED_KINDS, batch_size: int | str = "auto"):
        self.model = _module(model)
        self.surprise = surprise
        self.kinds = parse_kinds(kinds)
        self.batch_size = batch_size
        surprise.check_model(self.model)

    def __call__(self, inputs) -> dict[str, np.ndarray]:
        if len(inputs) == 0:
            return {k: np.zeros(0) for k in self.kinds}
        return dict(surprise_scores(self.model, inputs, self.surprise, kinds=self.kinds,
                                    batch_size=self.batch_size).scores)
