"""``--surprise FILE`` / ``--no-surprise`` of ``run`` and ``xplore``: the surprise adequacy (DSA,
LSA) of every generated input, from a state fitted on the training split and cached
(:mod:`deepfault.coverage.surprise_cache`).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from ..coverage.surprise import load_surprise
from ..coverage.surprise_cache import GENERATED_KINDS, CachedSurprise, SurpriseScorer, cached_surprise
from ..errors import DeepFaultError

WHAT = ("DSA and LSA of every generated input against the training data (at the layer before the "
        "logits), beside its L1/L_inf distance")


def add_surprise_options(p: argparse.ArgumentParser, *, per_model: bool = False) -> None:
    """``--surprise FILE`` and ``--no-surprise`` (one or the other)."""
    group = p.add_mutually_exclusive_group()
    if per_model:
        group.add_argument("--surprise", metavar="F1,F2,...", default=None,
                           help=f"{WHAT}: fitted states (.npz from fit_surprise/save_surprise), one per "
                           "--model ('-' skips one: fitted on the training split and cached); default: "
                           "all fitted and cached")
    else:
        group.add_argument("--surprise", metavar="FILE", default=None,
                           help=f"{WHAT}: a fitted state (.npz from fit_surprise/save_surprise) instead of "
                           "the one fitted on the training split and cached")
    group.add_argument("--no-surprise", action="store_true",
                       help="do not compute the generated inputs' surprise adequacy (saves one pass over "
                       "the training split the first time a model is seen)")


def prepare(module, data, file: str | None, *, progress: bool) -> tuple[CachedSurprise | None, str | None]:
    """``(state, None)`` for ``module``: ``file`` when given (checked against the model), else the
    cached fit on ``data``'s training split; ``(None, why)`` when that fit is impossible (no
    training split, one class, too many values): the command goes on without the scores.

    Raises:
        DeepFaultError: An unreadable ``file``, or a state of another model.
    """
    if file is not None:
        start = time.perf_counter()
        state = load_surprise(file)
        state.check_model(module)
        return CachedSurprise(state, "file", Path(file), time.perf_counter() - start), None
    try:
        return cached_surprise(module, data.x_train, progress=progress), None
    except DeepFaultError as err:
        return None, str(err)


def scorer(module, fit: CachedSurprise, batch_size: int | str = "auto") -> SurpriseScorer:
    return SurpriseScorer(module, fit.surprise, kinds=GENERATED_KINDS, batch_size=batch_size)


def describe(fit: CachedSurprise) -> str:
    """One line: where the state came from and what it holds."""
    s = fit.surprise
    where = {"cache": "loaded from the cache", "fitted": "fitted", "file": "from --surprise"}[fit.source]
    layers = ", ".join(f"{n}[{k}]" for n, k in zip(s.layers, s.sizes, strict=True))
    return f"surprise state {where} ({s.num_inputs} training inputs, layer {layers}; {fit.seconds:.2f} s)"
