"""Surprise adequacy: how far an input's activations lie from the training data's (Kim, Feldt
and Yoo, ICSE 2019; MDSA from Kim et al., 2020), with the conventions of dnn-tip (Weiss and
Tonella), the reference implementation.

A :class:`Surprise` is fitted once, on the training split: the activation traces (ATs) of the
chosen layers for every training input (neuron values as :mod:`deepfault.core.capture`
defines them: a channel's spatial mean, a unit's value), kept as float32, each with its class
(the model's prediction by default, or the label). Every score of an input ``x`` with AT ``a``
is taken within the class ``c`` the model predicts for ``x``:

- **LSA** ``= -log f_c(a)``, with ``f_c`` a Gaussian KDE (Scott's bandwidth, as scipy's
  ``gaussian_kde``) over the ATs of class ``c``. Before fitting, the neurons whose variance
  within the class is below ``var_threshold`` are dropped (Kim et al.'s original), or all
  but the ``max_features`` of highest variance (dnn-tip's default, 300); a neuron that still
  makes the covariance singular (the first column where the Cholesky factorisation fails, or
  leaves less than ``1e-10`` of the column's variance unexplained by the columns before it) is
  dropped too, and the factorisation tried again. The log-density is a log-sum-exp in
  float64, so it does not underflow to ``inf`` where a density would.
- **DSA** ``= dist_a / dist_b``: ``dist_a`` is the distance from ``a`` to the nearest training
  AT of class ``c`` (``a'``, ties to the lower training index), ``dist_b`` the distance from
  ``a'`` to the nearest training AT of any other class.
- **MDSA** ``= (a - mu_c)^T S_c^+ (a - mu_c)``, the *squared* Mahalanobis distance to class
  ``c``'s mean, with ``S_c`` its maximum-likelihood covariance and ``S_c^+`` the
  pseudo-inverse (scikit-learn's ``EmpiricalCovariance.mahalanobis``, which dnn-tip uses; the
  square root gives the same order).

A class with fewer than two training ATs (one the model never predicted, say) would leave
every score of an input assigned to it no number (no KDE, no covariance): :func:`fit_surprise`
refuses such traces (:func:`check_every_class`), and :meth:`Surprise.score` refuses a score
that is not finite (a state read from an older file), so no order, APFD or table is ever made
of one. When no neuron varies within a class, its LSA is 0 (dnn-tip's convention: the ATs tell
nothing).

Nothing builds a test-by-training matrix at once: distances and kernel sums run over blocks
of at most :data:`BLOCK_ELEMENTS` pairs, on the device of the activations, so DSA of 10,000
inputs against 60,000 training ATs holds a few megabytes of distances at a time. Nearest
neighbours are searched in float32 (centred on the training mean) and the distances of the
neighbours found are recomputed exactly in float64, from the ATs as stored.

Examples:
    >>> import torch
    >>> from torch import nn
    >>> torch.manual_seed(0) and None
    >>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    >>> sa = fit_surprise(model, torch.randn(300, 4), SurpriseConfig(layers=["0"]))
    >>> sa.num_inputs, sa.num_neurons
    (300, 8)
    >>> scores = surprise_scores(model, torch.randn(5, 4), sa, kinds=("dsa", "mdsa"))
    >>> sorted(scores), scores["dsa"].shape
    (['dsa', 'mdsa'], (5,))
"""

from __future__ import annotations

import functools
import math
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader

if TYPE_CHECKING:
    from ..core.inputs import InputData
    from ..core.shards import ShardContext
    from ..models.prepare import PreparedModel

from ..checks import MAX_CLASSES, check_labels
from ..core.batches import iterate_batches
from ..core.capture import NeuronLayout, check_transform
from ..core.constraints import Interval, Options, param, validate
from ..core.entry import applies_threads, entry
from ..core.outcome import Artifact, Outcome
from ..core.registry import suggestion
from ..core.runtime import Runtime
from ..errors import DeepFaultError
from ._legacy import labels_third, legacy_keywords
from ._shape import _LAYERS, TRANSFORMS, Config, LayerNames, inputs_of, progress_label
from .profile import (
    _field,
    _FittedOnLayers,
    _module,
    check_same_layers,
    check_same_model,
    model_hash,
    read_state,
    selection_from,
    state_summary,
    write_state,
)
from .results import About
from .scored import surprise_coverage

__all__ = ["BLOCK_ELEMENTS", "MIN_TRACES", "SURPRISE_FORMAT", "SURPRISE_KINDS", "Surprise", "SurpriseConfig",
           "check_every_class", "fit_surprise", "load_surprise", "parse_kinds", "save_surprise",
           "surprise_coverage", "surprise_scores", "SurpriseScores"]

SURPRISE_FORMAT = "deepfault-surprise/1"

#: The surprise adequacies, in the order they are listed.
SURPRISE_KINDS = ("lsa", "dsa", "mdsa")

#: Test-by-training pairs handled at once (float64: 32 MiB).
BLOCK_ELEMENTS = 1 << 22

#: LSA: a Cholesky pivot whose square is at most this share of its column's kernel variance
#: (the column's variance left once the columns before it explain the rest) makes the column
#: count as singular: exactly collinear neurons leave ~1e-16 there, not a failed factorisation.
_SINGULAR = 1e-10

#: Training ATs held by a fitted state at most (float32 values): 4 GiB.
MAX_VALUES = 1 << 30

GROUPINGS = ("predictions", "labels")

#: Training traces a fitted state needs in every class (:func:`check_every_class`): LSA's KDE and
#: MDSA's covariance need two.
MIN_TRACES = 2


def parse_kinds(kinds: str | Iterable[str]) -> tuple[str, ...]:
    """``"lsa,dsa"``, a list, or ``"all"`` -> the surprise kinds, checked."""
    names = [k.strip() for k in (kinds.split(",") if isinstance(kinds, str) else kinds) if k.strip()]
    if names == ["all"]:
        return SURPRISE_KINDS
    unknown = [k for k in names if k not in SURPRISE_KINDS]
    if unknown or not names:
        hint = suggestion(unknown[0], SURPRISE_KINDS) if unknown else ""
        raise DeepFaultError(f"unknown surprise adequacy {', '.join(map(repr, unknown)) or '(none)'}{hint}; "
                             f"known: {', '.join(SURPRISE_KINDS)}")
    return tuple(dict.fromkeys(names))


# --------------------------------------------------------------------------- the fitted state


@dataclass(frozen=True)
class _Kde:
    """One class's KDE: the kept neurons, the whitening factor and the whitened ATs."""

    kept: np.ndarray          # (d,) neuron indices
    mean: np.ndarray          # (d,) the class's mean AT (whitening is centred, for precision)
    chol: np.ndarray          # (d, d) lower Cholesky factor of the kernel covariance
    whitened: torch.Tensor    # (n_c, d) float64, L^-1 (a - mean)
    log_norm: float           # log n_c + d/2 log 2 pi + log det L


@dataclass(frozen=True)
class _ByClass:
    """The training ATs sorted by class (by index within a class, so a class is a slice and
    the other classes two), centred on their mean, float32: the nearest-neighbour search's.
    """

    train: torch.Tensor       # (N, M) float32, row k is training AT order[k] minus center
    sq: torch.Tensor          # (N,) float32 squared norms of those rows
    center: torch.Tensor      # (M,) float64 mean training AT
    order: np.ndarray         # (N,) sorted row -> training index
    position: np.ndarray      # (N,) training index -> sorted row
    bounds: np.ndarray        # (num_classes + 1,) class c is rows bounds[c]:bounds[c + 1]


@dataclass(frozen=True, eq=False)
class Surprise(_FittedOnLayers, Outcome):
    """A fitted surprise-adequacy state: the training ATs and what scoring needs.

    Attributes:
        layers: Layer names, in layout order.
        sizes: Units per layer.
        transform: The neuron value transform (``"raw"`` or ``"layer-minmax"``).
        model_hash: The weights' SHA-256 (:func:`~deepfault.coverage.profile.model_hash`).
        num_classes: The model's number of outputs.
        ats: ``(N, M)`` float32 training ATs.
        classes: ``(N,)`` int64 class of each training AT.
        grouping: ``"predictions"`` (the classes are the model's predictions) or ``"labels"``.
        var_threshold: LSA drops the neurons whose variance within a class is below this
            (``None``: none by variance).
        max_features: LSA keeps only this many neurons of highest variance per class
            (``None``: all).
        selection: The ``layers`` argument of the fit.
    """

    num_classes: int
    ats: np.ndarray
    classes: np.ndarray
    grouping: str = "predictions"
    var_threshold: float | None = 1e-5
    max_features: int | None = None
    selection: str | tuple[str, ...] | None = None
    #: What the summary says of the fit (set on the fitted state; not a field: not saved or compared).
    about: ClassVar[About] = About()
    _cache: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_settings(self.var_threshold, self.max_features, self.grouping)

    # ------------------------------------------------------------------ facts

    @property
    def num_inputs(self) -> int:
        return len(self.ats)

    def summary(self) -> str:
        """What ``coverage surprise`` prints: the fit, its layers, the inputs per class."""
        from .text import surprise_text

        return surprise_text(self)

    def outputs(self) -> tuple[Artifact, ...]:
        """The state's ``.npz`` (:func:`save_surprise`)."""
        return (Artifact("surprise", ".npz", functools.partial(save_surprise, self)),)

    def class_counts(self) -> np.ndarray:
        """``(num_classes,)`` training ATs per class."""
        return np.bincount(self.classes, minlength=self.num_classes)

    def check_model(self, model: nn.Module) -> None:
        """Raise unless ``model`` has the weights the state was fitted with."""
        check_same_model("the surprise state was fitted", self.model_hash, model,
                         "fit one for this model with 'deepfault coverage surprise' (fit_surprise)")

    def check_layout(self, layout: NeuronLayout) -> None:
        check_same_layers("the surprise state was fitted", self.layers, self.sizes, layout,
                          "use its layers or fit it again")

    def to_dict(self) -> dict:
        """A summary (no per-input arrays) for result files."""
        return state_summary(self, SURPRISE_FORMAT, self.num_inputs, num_classes=self.num_classes,
                             grouping=self.grouping, class_counts=self.class_counts().tolist(),
                             var_threshold=self.var_threshold, max_features=self.max_features)

    # ------------------------------------------------------------------ scores

    def score(self, kind: str, ats, classes, *, device: torch.device | str | None = None) -> np.ndarray:
        """``(B,)`` float64 surprise adequacy ``kind`` of ``(B, M)`` ATs whose inputs the model
        assigns to ``classes`` (``(B,)`` ints).
        """
        kind = parse_kinds([kind])[0]
        a, c = self._check_batch(ats, classes)
        if len(a) == 0:
            return np.zeros(0)
        dev = torch.device(device) if device is not None else a.device
        return {"lsa": self._lsa, "dsa": self._dsa, "mdsa": self._mdsa}[kind](a.to(dev), c)

    def finite_score(self, kind: str, ats, classes, *,
                     device: torch.device | str | None = None) -> np.ndarray:
        """:meth:`score`, refusing any score that is not a number (``inf``, NaN), so that no order,
        APFD, coverage or table is ever made of one: what every consumer of the scores calls.

        Raises:
            DeepFaultError: One line: how many inputs, their classes, why, and the fix.
        """
        c = np.asarray(torch.as_tensor(classes).detach().cpu().numpy())
        scores = self.score(kind, ats, classes, device=device)
        self._check_scores(kind, scores, c)
        return scores

    def lsa(self, ats, classes) -> np.ndarray:
        return self.score("lsa", ats, classes)

    def dsa(self, ats, classes) -> np.ndarray:
        return self.score("dsa", ats, classes)

    def mdsa(self, ats, classes) -> np.ndarray:
        return self.score("mdsa", ats, classes)

    def _check_batch(self, ats, classes) -> tuple[torch.Tensor, np.ndarray]:
        a = torch.as_tensor(ats).detach()
        if a.ndim != 2 or a.shape[1] != self.num_neurons:
            raise DeepFaultError(f"activation traces must be (N, {self.num_neurons}); got {tuple(a.shape)}")
        if not torch.isfinite(a).all():
            raise DeepFaultError("the activation traces hold NaN or infinite values")
        c = np.asarray(torch.as_tensor(classes).detach().cpu().numpy()).astype(np.int64, copy=False)
        if c.shape != (len(a),):
            raise DeepFaultError(f"classes must be ({len(a)},) ints, one per AT; got shape {c.shape}")
        return a, c

    def _check_scores(self, kind: str, scores: np.ndarray, c: np.ndarray) -> None:
        """Refuse scores that are no number (``inf``, NaN), so no order, APFD or table is made of them."""
        bad = ~np.isfinite(scores)
        if not bad.any():
            return
        classes = ", ".join(str(int(k)) for k in np.unique(c[bad])[:10])
        counts = np.bincount(self.classes, minlength=self.num_classes)
        thin = [int(k) for k in np.unique(c[bad]) if 0 <= k < self.num_classes and counts[k] < MIN_TRACES]
        if thin:
            why = (f"the state holds fewer than {MIN_TRACES} training traces of class(es) "
                   f"{', '.join(map(str, thin[:10]))}; fit it again on more inputs of every class (the "
                   "training split, 'deepfault coverage surprise')")
        elif kind == "dsa":
            why = ("training traces of different classes coincide (DSA divides by their distance, 0); fit "
                   "the state on other layers (--layers), or group the traces by the model's predictions")
        else:
            why = "the class's training traces give no finite score; fit the state on other layers (--layers)"
        raise DeepFaultError(f"{kind} is not a number for {int(bad.sum())} of {len(scores)} inputs "
                             f"(predicted class(es) {classes}): {why}")

    def _members(self, c: int) -> np.ndarray:
        key = ("members", c)
        if key not in self._cache:
            self._cache[key] = np.flatnonzero(self.classes == c)
        return self._cache[key]

    def _by_class(self, device: torch.device) -> _ByClass:
        """The training ATs for the nearest-neighbour search (cached per device)."""
        key = ("by_class", str(device))
        if key not in self._cache:
            order = np.argsort(self.classes, kind="stable")  # by class, then by index
            t = torch.from_numpy(self.ats).double()
            center = t.mean(dim=0)
            train = (t[torch.from_numpy(order)] - center).float().to(device)
            position = np.empty_like(order)
            position[order] = np.arange(len(order))
            bounds = np.searchsorted(self.classes[order], np.arange(self.num_classes + 1))
            self._cache[key] = _ByClass(train, (train * train).sum(dim=1), center.to(device), order, position,
                                        bounds)
        return self._cache[key]

    def _raw(self, index: np.ndarray, device: torch.device) -> torch.Tensor:
        """Training ATs ``index`` as stored (not centred: the exact distances start from these)."""
        return torch.from_numpy(self.ats[index]).to(device)

    # --- LSA

    def _kde(self, c: int) -> _Kde | None | float:
        """Class ``c``'s KDE; ``None`` for fewer than two ATs; ``0.0`` when no neuron varies."""
        key = ("kde", c)
        if key not in self._cache:
            self._cache[key] = _fit_kde(self.ats[self._members(c)].astype(np.float64), self.var_threshold,
                                        self.max_features)
        return self._cache[key]

    def _lsa(self, a: torch.Tensor, c: np.ndarray) -> np.ndarray:
        out = np.full(len(a), np.inf)
        for cls in np.unique(c):
            rows = np.flatnonzero(c == cls)
            kde = self._kde(int(cls)) if 0 <= cls < self.num_classes else None
            if kde is None:
                continue
            if isinstance(kde, float):
                out[rows] = kde
                continue
            x = a[torch.from_numpy(rows).to(a.device)].double()[:, torch.from_numpy(kde.kept).to(a.device)]
            chol = torch.from_numpy(kde.chol).to(a.device)
            centred = x - torch.from_numpy(kde.mean).to(a.device)
            z = torch.linalg.solve_triangular(chol, centred.T, upper=False).T
            out[rows] = kde.log_norm - _logsumexp_kernel(z, kde.whitened.to(a.device))
        return out

    # --- MDSA

    def _gauss(self, c: int) -> tuple[np.ndarray, np.ndarray] | None:
        key = ("gauss", c)
        if key not in self._cache:
            x = self.ats[self._members(c)].astype(np.float64)
            if len(x) == 0:
                self._cache[key] = None
            else:
                import scipy.linalg

                mean = x.mean(axis=0)
                cov = _cov(x, ddof=0) if len(x) > 1 else np.zeros((x.shape[1],) * 2)
                self._cache[key] = (mean, scipy.linalg.pinvh(cov, check_finite=False))
        return self._cache[key]

    def _mdsa(self, a: torch.Tensor, c: np.ndarray) -> np.ndarray:
        out = np.full(len(a), np.inf)
        for cls in np.unique(c):
            g = self._gauss(int(cls)) if 0 <= cls < self.num_classes else None
            if g is None:
                continue
            rows = np.flatnonzero(c == cls)
            mean, prec = (torch.from_numpy(v).to(a.device) for v in g)
            d = a[torch.from_numpy(rows).to(a.device)].double() - mean
            out[rows] = ((d @ prec) * d).sum(dim=1).clamp_min(0).cpu().numpy()
        return out

    # --- DSA

    def _dsa(self, a: torch.Tensor, c: np.ndarray) -> np.ndarray:
        device = a.device
        bc = self._by_class(device)
        q = (a.double() - bc.center).float()
        dist_a = np.full(len(a), np.inf)
        nearest = np.full(len(a), -1, dtype=np.int64)
        for cls in np.unique(c):
            if not 0 <= cls < self.num_classes or bc.bounds[cls] == bc.bounds[cls + 1]:
                continue
            rows = np.flatnonzero(c == cls)
            rows_t = torch.from_numpy(rows).to(device)
            idx = bc.order[_nearest(q[rows_t], bc.train, bc.sq, [(bc.bounds[cls], bc.bounds[cls + 1])])]
            nearest[rows] = idx
            dist_a[rows] = _exact(a[rows_t], self._raw(idx, device))
        found = nearest >= 0
        dist_b = np.full(len(a), np.inf)
        if found.any():
            dist_b[found] = self._other_class_distance(nearest[found], device)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(found, dist_a / dist_b, np.inf)

    def _other_class_distance(self, index: np.ndarray, device: torch.device) -> np.ndarray:
        """Distance from each training AT ``index`` to the nearest AT of another class (cached)."""
        key = ("dist_b",)
        if key not in self._cache:
            self._cache[key] = np.full(self.num_inputs, np.nan)
        cache = self._cache[key]
        todo = np.unique(index[np.isnan(cache[index])])
        if len(todo) == 0:
            return cache[index]
        bc = self._by_class(device)
        n = self.num_inputs
        for cls in np.unique(self.classes[todo]):
            rows = todo[self.classes[todo] == cls]
            lo, hi = int(bc.bounds[cls]), int(bc.bounds[cls + 1])
            others = [(a, b) for a, b in ((0, lo), (hi, n)) if b > a]
            if not others:
                cache[rows] = np.inf
                continue
            q = bc.train[torch.from_numpy(bc.position[rows]).to(device)]
            idx = bc.order[_nearest(q, bc.train, bc.sq, others)]
            cache[rows] = _exact(self._raw(rows, device), self._raw(idx, device))
        return cache[index]


def check_every_class(classes: np.ndarray, num_classes: int, *, grouping: str = "predictions") -> None:
    """Refuse training traces that leave a class with fewer than :data:`MIN_TRACES`: every score of
    an input the model assigns to that class would be no number (LSA needs two traces for a
    density, MDSA for a covariance, DSA one of the class and one of another).

    Args:
        classes: ``(N,)`` class of each training trace.
        num_classes: The model's number of outputs: every class a test input may be assigned.
        grouping: How ``classes`` were made (``"predictions"`` or ``"labels"``), for the fix.

    Raises:
        DeepFaultError: One line naming the classes, their traces and the fix.
    """
    counts = np.bincount(np.asarray(classes, dtype=np.int64), minlength=num_classes)[:num_classes]
    thin = np.flatnonzero(counts < MIN_TRACES)
    if len(thin) == 0:
        return
    shown = ", ".join(f"{int(k)}: {int(counts[k])}" for k in thin[:10]) + (", ..." if len(thin) > 10 else "")
    fix = ("fit it on more inputs, normally the training split, or group the traces by their labels "
           "(--classes labels, classes='labels')" if grouping == "predictions"
           else "fit it on more inputs of every class, normally the training split")
    raise DeepFaultError(
        f"a surprise state needs at least {MIN_TRACES} training traces in each of the model's {num_classes} "
        f"classes to score every input; grouped by {grouping}, these {len(classes)} inputs leave "
        f"{len(thin)} with fewer (class: traces {shown}); {fix}")


def _check_settings(var_threshold, max_features, grouping) -> None:
    if var_threshold is not None and not (isinstance(var_threshold, int | float)
                                          and math.isfinite(var_threshold) and var_threshold >= 0):
        raise DeepFaultError(f"var_threshold must be a finite number >= 0 or None; got {var_threshold!r}")
    if max_features is not None and (isinstance(max_features, bool) or not isinstance(max_features, int)
                                     or max_features < 1):
        raise DeepFaultError(f"max_features must be an int >= 1 or None; got {max_features!r}")
    if grouping not in GROUPINGS:
        raise DeepFaultError(f"classes must be 'predictions' or 'labels'; got {grouping!r}")


# --------------------------------------------------------------------------- kernels


def _rows_per_block(cols: int) -> int:
    return max(1, BLOCK_ELEMENTS // max(cols, 1))


def _nearest(q: torch.Tensor, cand: torch.Tensor, cand_sq: torch.Tensor,
             ranges: Sequence[tuple[int, int]]) -> np.ndarray:
    """For each row of ``q``, the index of its nearest row of ``cand`` among the row
    ``ranges`` (``[(start, stop), ...]``, ascending) by float32 squared distance, ties to the
    lower index, in blocks of at most :data:`BLOCK_ELEMENTS` pairs. ``|q|^2`` is the same for
    every candidate of a row, so the blocks hold only ``|c|^2 - 2 q.c`` (``cand_sq`` holds the
    ``|c|^2``): one matrix product and one minimum per block.
    """
    out_idx = torch.empty(len(q), dtype=torch.long, device=q.device)
    step_r = min(len(q), max(1, int(math.sqrt(BLOCK_ELEMENTS))))
    step_c = _rows_per_block(step_r)
    for r0 in range(0, len(q), step_r):
        qb = q[r0 : r0 + step_r]
        best = torch.full((len(qb),), math.inf, dtype=torch.float32, device=q.device)
        best_i = torch.zeros(len(qb), dtype=torch.long, device=q.device)
        for lo, hi in ranges:
            for c0 in range(lo, hi, step_c):
                c1 = min(c0 + step_c, hi)
                d = torch.addmm(cand_sq[None, c0:c1], qb, cand[c0:c1].T, alpha=-2.0)
                v, i = d.min(dim=1)
                better = v < best  # strict: an equal distance later keeps the lower index
                best = torch.where(better, v, best)
                best_i = torch.where(better, i + c0, best_i)
        out_idx[r0 : r0 + step_r] = best_i
    return out_idx.cpu().numpy()


def _exact(x: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    """Row-wise Euclidean distances in float64."""
    return torch.linalg.vector_norm(x.double() - y.double(), dim=1).cpu().numpy()


def _logsumexp_kernel(z: torch.Tensor, data: torch.Tensor) -> np.ndarray:
    """``log sum_j exp(-|z_i - data_j|^2 / 2)`` per row of ``z`` (float64, blocked)."""
    data_sq = (data * data).sum(dim=1)
    out = torch.empty(len(z), dtype=torch.float64, device=z.device)
    step_r = min(len(z), max(1, int(math.sqrt(BLOCK_ELEMENTS))))
    step_c = _rows_per_block(step_r)
    for r0 in range(0, len(z), step_r):
        zb = z[r0 : r0 + step_r]
        z_sq = (zb * zb).sum(dim=1, keepdim=True)
        acc = torch.full((len(zb),), -math.inf, dtype=torch.float64, device=z.device)
        for c0 in range(0, len(data), step_c):
            d = torch.addmm(z_sq + data_sq[c0 : c0 + step_c], zb, data[c0 : c0 + step_c].T, alpha=-2.0)
            acc = torch.logaddexp(acc, torch.logsumexp(-0.5 * d.clamp_min(0), dim=1))
        out[r0 : r0 + step_r] = acc
    return out.cpu().numpy()


def _cov(x: np.ndarray, *, ddof: int) -> np.ndarray:
    """``np.cov(x.T, ddof=ddof)`` of ``(n, M)`` float64 rows, as a plain centred product (the
    same sums; ``np.cov`` took 20 times as long on MNIST's classes).
    """
    c = x - x.mean(axis=0)
    return np.atleast_2d(c.T @ c / (len(x) - ddof))


def _fit_kde(x: np.ndarray, var_threshold: float | None, max_features: int | None) -> _Kde | None | float:
    """SciPy's ``gaussian_kde`` (Scott's factor) over ``x`` (``(n, M)`` float64), with the
    neurons dropped as the module docstring says.
    """
    import scipy.linalg

    n = len(x)
    if n < 2:
        return None
    var = x.var(axis=0)
    kept = np.arange(x.shape[1])
    if var_threshold is not None:
        kept = kept[var[kept] >= var_threshold]
    if max_features is not None and len(kept) > max_features:
        kept = np.sort(kept[np.argsort(var[kept], kind="stable")[len(kept) - max_features:]])
    data_cov = _cov(x, ddof=1)  # once: each try's covariance is a slice of it
    while len(kept):
        d = len(kept)
        factor = n ** (-1.0 / (d + 4))
        cov = data_cov[np.ix_(kept, kept)] * factor ** 2
        chol, info = scipy.linalg.lapack.dpotrf(cov, lower=1, clean=1)
        if info == 0:  # exactly collinear columns factorise, with a pivot at rounding level
            tiny = np.flatnonzero(np.diag(chol) ** 2 <= _SINGULAR * np.diag(cov))
            info = int(tiny[0]) + 1 if len(tiny) else 0
        if info == 0:
            mean = x[:, kept].mean(axis=0)
            whitened = scipy.linalg.solve_triangular(chol, (x[:, kept] - mean).T, lower=True).T
            log_norm = math.log(n) + 0.5 * d * math.log(2 * math.pi) + float(np.log(np.diag(chol)).sum())
            return _Kde(kept, mean, chol, torch.from_numpy(np.ascontiguousarray(whitened)), log_norm)
        if info < 0:  # an argument error: not a matrix LAPACK can take (NaN)
            raise DeepFaultError("the activation traces' covariance is not a valid matrix (NaN?)")
        kept = np.delete(kept, info - 1)
    return 0.0


# --------------------------------------------------------------------------- fitting and scoring


def _first(x):
    """``x`` itself, or a loader's first input as a ``(1, ...)`` tensor."""
    if not isinstance(x, DataLoader):
        return x
    from ..core.inputs import stream

    for xb, _ in stream(x, batch_size=1):
        return xb
    raise DeepFaultError("no inputs to fit surprise adequacy on: the input set is empty")


def default_layer(model: nn.Module, inputs, transform: str = "raw") -> list[str]:
    """The deepest of the default layers (the last block, or the layer before the logits), found by running
    one input; what surprise adequacy reads when no layer is named.

    Raises:
        DeepFaultError: The model has no such layer (fewer than two Linear/Conv layers, say).
    """
    batch = next(iter(iterate_batches(model, inputs[:1], layers=None, transform=transform, batch_size=1)))
    assert batch.layout is not None
    return [batch.layout.layers[-1].name]


@dataclass(frozen=True)
class SurpriseConfig(Config):
    """Everything that determines a fitted surprise state (:func:`~deepfault.coverage.fit_surprise`).

    A config of its own: the state is fitted once on the training split and then scores any
    test set, so its LSA settings (``var_threshold``, ``max_features``) and its grouping belong
    to the fit, not to a measurement.

    Attributes:
        layers: The layers whose activation traces are compared (module names or a selection);
            ``None``: the deepest layer before the logits, the usual choice of Kim et al.
        transform: ``"raw"`` or ``"layer-minmax"``.
        classes: Group the training traces by the model's ``"predictions"`` (the default; a test
            input is always grouped by its prediction) or by the ``"labels"``.
        var_threshold: LSA: drop the neurons whose variance within a class is below this (Kim et
            al.'s ``1e-5``; ``None`` for none).
        max_features: LSA: keep only this many neurons of highest variance per class (dnn-tip's
            default is 300; ``None``: all).
    """

    layers: str | Sequence[str] | None = param(None, LayerNames(), metavar="NAMES", help=_LAYERS.format(
        "the deepest of the default layers: the last block, or the Linear/Conv layer before the logits, "
        "Kim et al.'s usual choice"))
    transform: str = param("raw", Options(TRANSFORMS), help="neuron values: 'raw', or 'layer-minmax' (each "
                           "input's layer output scaled to [0, 1], DeepXplore's)")
    classes: str = param("predictions", Options(("predictions", "labels")),
                         help="group the training traces by the model's predictions (as a test input always "
                         "is) or by the labels")
    var_threshold: float | None = param(1e-5, Interval(float, 0.0, None, none=True), metavar="V",
                                        help="LSA: drop the neurons whose variance within a class is below V "
                                        "(Kim et al.'s; 0 drops none)", option="--var-threshold")
    max_features: int | None = param(None, Interval(int, 1, MAX_VALUES, none=True), metavar="K",
                                     help="LSA: keep only the K neurons of highest variance per class "
                                     "(dnn-tip uses 300) (default: all)", option="--max-features")

    def __post_init__(self):
        _check_settings(self.var_threshold, self.max_features, self.classes)
        check_transform(self.transform)
        self._tuple("layers")
        validate(self)


@labels_third(SurpriseConfig)
@entry(SurpriseConfig, legacy=legacy_keywords)
def fit_surprise(model: nn.Module | PreparedModel, data: InputData, config: SurpriseConfig, *,
                 runtime: Runtime) -> Surprise:
    """Fit surprise adequacy on the inputs (normally the training split), in one pass.

    Args:
        model: The classifier, or a prepared model.
        data: The inputs: ``(N, ...)`` array or tensor, an ``(inputs, labels)`` pair (the labels
            are needed when ``config.classes="labels"``), a torch ``Dataset``, a ``DataLoader``
            (streamed, its labels used), or a deepfault data set (its test split:
            ``deepfault coverage surprise`` passes the split it reads as one).
        config: A :class:`~deepfault.coverage.config.SurpriseConfig`: the layers, the transform,
            the grouping and LSA's settings.
        runtime: A :class:`~deepfault.core.runtime.Runtime`; the state does not depend on it.

    Returns:
        A :class:`Surprise` holding ``N x M`` float32 ATs (the scores need them all); an
        outcome whose summary is its classes and whose output is its ``.npz``.

    Raises:
        DeepFaultError: No inputs, labels missing or of the wrong length when they are needed,
            fewer than two classes, a class with fewer than :data:`MIN_TRACES` ATs, more ATs than
            :data:`MAX_VALUES`, or bad settings.
    """
    t0 = time.perf_counter()
    module = _module(model)
    x, y, streamed, n = _fit_inputs(inputs_of(data)[:2], config)
    layers: str | Sequence[str] | None = config.layers
    if layers is None:
        layers = default_layer(module, _first(x), config.transform)
    spread = None
    if runtime.parallel.spread:
        traced, spread = _spread_trace(module, x, n, layers, config, runtime)
        ats, assigned, given, layout, num_classes = traced
    else:
        ats, assigned, given, layout, num_classes = _trace(module, x, y, streamed, n, layers, config, runtime)
    if given is not None:
        y = check_labels("labels", given, MAX_CLASSES, count=n)
    if config.classes == "labels":
        assert y is not None
        y_np = np.asarray(y.cpu().numpy() if isinstance(y, torch.Tensor) else y).astype(np.int64)
        if (y_np >= num_classes).any():
            raise DeepFaultError(f"labels go up to {int(y_np.max())} but the model has {num_classes} outputs")
        assigned = y_np
    if len(np.unique(assigned)) < 2:
        raise DeepFaultError(
            f"all {n} inputs are in one class ({int(assigned[0])}); surprise adequacy compares classes, "
            "so fit it on inputs of at least two classes")
    check_every_class(assigned, num_classes, grouping=config.classes)
    selection = tuple(layers) if not isinstance(layers, str) else layers
    sizes = tuple(la.size for la in layout.layers)
    state = Surprise(layout.names, sizes, config.transform, model_hash(module), num_classes, ats, assigned,
                     grouping=config.classes, var_threshold=config.var_threshold,
                     max_features=config.max_features, selection=selection)
    object.__setattr__(state, "about", _about(model, module, data, layout, config, runtime,
                                              time.perf_counter() - t0))
    return state.spread_over(spread)


def _fit_inputs(pair, config: SurpriseConfig):
    """``(inputs, labels or None, streamed, N)``: a sized loader streams (its labels come with
    its batches); everything else is read as one tensor.
    """
    from ..core.inputs import inputs_and_labels, num_inputs

    inputs, labels = pair
    streamed = isinstance(inputs, DataLoader) and num_inputs(inputs) > 0
    x, own = (inputs, None) if streamed else inputs_and_labels(inputs, labels)
    n = num_inputs(x)
    if n == 0:
        raise DeepFaultError("no inputs to fit surprise adequacy on: the input set is empty")
    y = own if own is not None else labels if streamed else None
    if config.classes == "labels" and not streamed:
        if y is None:
            raise DeepFaultError("classes='labels' needs labels; pass labels= or use classes='predictions'")
        y = check_labels("labels", y, MAX_CLASSES, count=n)
    return x, y, streamed, n


def _trace(module: nn.Module, x, y, streamed: bool, n: int, layers, config: SurpriseConfig, runtime: Runtime):
    """The pass: ``(ATs (N, M) float32, predicted classes, the loader's labels or None, the
    layout, the number of classes)``.
    """
    ats: np.ndarray | None = None
    assigned = np.empty(n, dtype=np.int64)
    given = np.empty(n, dtype=np.int64) if streamed and config.classes == "labels" else None
    layout = None
    num_classes = 0
    for batch in iterate_batches(module, x, labels=y if streamed else None, layers=layers,
                                 transform=config.transform, batch_size=runtime.batch_size,
                                 progress=progress_label(runtime, "fit")):
        assert batch.values is not None
        assert batch.layout is not None
        if given is not None:
            if batch.labels is None:
                raise DeepFaultError("classes='labels' needs labels; pass labels= or use "
                                     "classes='predictions'")
            given[batch.start : batch.stop] = batch.labels.numpy()
        if ats is None:
            layout = batch.layout
            num_classes = int(batch.outputs.shape[1])
            if n * layout.num_neurons > MAX_VALUES:
                raise DeepFaultError(
                    f"{n} inputs x {layout.num_neurons} neurons is more than the {MAX_VALUES:,} "
                    "training values a surprise state may hold; choose fewer or smaller layers "
                    "(--layers) or a subset of the inputs")
            ats = np.empty((n, layout.num_neurons), dtype=np.float32)
        ats[batch.start : batch.stop] = batch.values.float().cpu().numpy()
        assigned[batch.start : batch.stop] = batch.outputs.argmax(dim=1).cpu().numpy()
    assert ats is not None
    assert layout is not None
    return ats, assigned, given, layout, num_classes


def _about(model, module: nn.Module, data, layout: NeuronLayout, config: SurpriseConfig, runtime: Runtime,
           seconds: float) -> About:
    """What a fitted state's summary says about its fit."""
    from .text import neurons_text

    p = next(module.parameters(), None)
    source = data if hasattr(data, "class_names") else getattr(model, "data", None)
    return About(None if isinstance(model, nn.Module) else getattr(model, "name", None),
                 str(data.name) if hasattr(data, "x_test") and hasattr(data, "name") else None,
                 str(runtime.device or (p.device if p is not None else "cpu")),
                 neurons_text(layout, module, config.layers, deepest=config.layers is None),
                 seconds=seconds, class_names=tuple(getattr(source, "class_names", None) or ()))


def _fit_by_keywords(model, inputs, *, layers=None, transform: str = "raw", batch_size: int | str = "auto",
                     progress: bool = False) -> Surprise:
    """:func:`fit_surprise` in the keyword form :mod:`.surprise_cache` calls (without the
    deprecation warning that form gives from outside).
    """
    return fit_surprise(model, inputs, SurpriseConfig(layers=layers, transform=transform),
                        runtime=Runtime(batch_size=batch_size, progress=progress))


@dataclass(frozen=True)
class SurpriseScores:
    """Per-input scores of one pass (see :func:`surprise_scores`)."""

    scores: dict[str, np.ndarray]
    predictions: np.ndarray

    def __getitem__(self, kind: str) -> np.ndarray:
        return self.scores[kind]

    def __iter__(self):
        return iter(self.scores)

    def keys(self):
        return self.scores.keys()


@applies_threads
def surprise_scores(
    model: nn.Module | PreparedModel,
    inputs: InputData,
    surprise: Surprise,
    *,
    kinds: str | Iterable[str] = ("dsa",),
    batch_size: int | str = "auto",
    progress: bool = False,
    threads: int | str | None = "auto",
) -> SurpriseScores:
    """Surprise adequacy of every input, streamed: one forward pass, the scores of each batch
    computed from its ATs and predictions before the next.

    Args:
        model: The network the state was fitted on.
        inputs: The inputs, in any form :func:`~deepfault.core.inputs.inputs_and_labels`
            takes (a ``DataLoader`` streams, one batch in memory at a time; the result keeps
            one float64 score per input and kind).
        surprise: The fitted state (:func:`fit_surprise`).
        kinds: The surprise adequacies to compute.
        batch_size: Inputs per forward pass, or ``"auto"`` (the default: sized from the memory).
        progress: Show a progress bar.
        threads: PyTorch CPU threads for the call, restored afterwards: ``"auto"``, a count or
            ``None`` (the rule of :func:`~deepfault.core.entry.applies_threads`).

    Returns:
        ``SurpriseScores``: ``scores[kind]`` is an ``(N,)`` float64 array, ``predictions`` the
        ``(N,)`` predicted classes.

    Raises:
        DeepFaultError: The state belongs to another model or other layers, or bad kinds.
    """
    from ..core.inputs import inputs_and_labels

    names = parse_kinds(kinds)
    module = _module(model)
    surprise.check_model(module)
    # A loader streams; an array or tensor is sliced; other forms are read whole, as before.
    x = inputs if isinstance(inputs, DataLoader) else inputs_and_labels(inputs)[0]
    out: dict[str, list[np.ndarray]] = {k: [] for k in names}
    pred: list[np.ndarray] = []
    for batch in iterate_batches(module, x, layers=list(surprise.layers), transform=surprise.transform,
                                 batch_size=batch_size, progress=progress and "surprise"):
        assert batch.values is not None
        assert batch.layout is not None
        if batch.start == 0:
            surprise.check_layout(batch.layout)
        c = batch.outputs.argmax(dim=1)
        pred.append(c.cpu().numpy())
        for k in names:
            out[k].append(np.asarray(surprise.finite_score(k, batch.values, c), dtype=np.float64))
    return SurpriseScores({k: np.concatenate(v) if v else np.empty(0) for k, v in out.items()},
                          np.concatenate(pred) if pred else np.empty(0, dtype=np.int64))


# --------------------------------------------------------------------------- files


def save_surprise(surprise: Surprise, path: str | os.PathLike) -> Path:
    """Write ``surprise`` as an ``.npz`` file (no pickle), atomically; returns the path."""
    return write_state(
        surprise, path, SURPRISE_FORMAT, num_classes=np.array(surprise.num_classes, dtype=np.int64),
        ats=surprise.ats, classes=surprise.classes, grouping=np.array(surprise.grouping),
        var_threshold=np.array(np.nan if surprise.var_threshold is None else surprise.var_threshold),
        max_features=np.array(surprise.max_features or 0, dtype=np.int64))


def load_surprise(path: str | os.PathLike) -> Surprise:
    """Read a state written by :func:`save_surprise` (``allow_pickle=False``), every field checked.

    Raises:
        DeepFaultError: The file is missing, unreadable, not a surprise state, or damaged, or it
            leaves a class with fewer than :data:`MIN_TRACES` traces (:func:`check_every_class`).
    """
    fix = "fit one with 'deepfault coverage surprise'"
    state = read_state(path, fmt=SURPRISE_FORMAT, what="surprise state", missing=fix, unreadable=fix,
                       marker=f"; {fix}", damaged=fix, build=_surprise_from)
    try:
        check_every_class(state.classes, state.num_classes, grouping=state.grouping)
    except DeepFaultError as err:  # a file fitted before the fit refused such traces
        raise DeepFaultError(f"{str(path)!r}: {err}") from None
    return state


def _surprise_from(a: dict) -> Surprise:
    sizes_a = _field(a, "sizes", 1, "iu")
    layers_a = _field(a, "layers", 1, "U")
    if len(sizes_a) == 0 or len(layers_a) != len(sizes_a) or (sizes_a < 1).any():
        raise ValueError("layers and sizes must be non-empty, of the same length, with sizes >= 1")
    sizes = tuple(int(s) for s in sizes_a)
    ats = _field(a, "ats", 2, "f").astype(np.float32, copy=False)
    classes = _field(a, "classes", 1, "iu").astype(np.int64)
    num_classes = int(_field(a, "num_classes", 0, "iu"))
    if ats.shape[1] != sum(sizes) or len(classes) != len(ats) or len(ats) == 0:
        raise ValueError(f"ats must be (N, {sum(sizes)}) with N >= 1 and classes (N,)")
    if not np.isfinite(ats).all():
        raise ValueError("field 'ats' holds NaN or infinite values")
    if num_classes < 2 or (classes < 0).any() or (classes >= num_classes).any():
        raise ValueError("classes must lie in [0, num_classes) with num_classes >= 2")
    transform = str(_field(a, "transform", 0, "U"))
    check_transform(transform)
    vt = float(_field(a, "var_threshold", 0, "f"))
    mf = int(_field(a, "max_features", 0, "iu"))
    return Surprise(
        tuple(str(n) for n in layers_a), sizes, transform, str(_field(a, "model_hash", 0, "U")), num_classes,
        ats, classes, grouping=str(_field(a, "grouping", 0, "U")),
        var_threshold=None if math.isnan(vt) else vt, max_features=mf or None,
        selection=selection_from(a))


def _trace_shard(module: nn.Module, columns: tuple, options: tuple, context: ShardContext) -> tuple:
    layers, config = options
    n = context.stop - context.start
    ats, assigned, _, layout, num_classes = _trace(module, columns[0], None, False, n, layers, config,
                                                   context.runtime())
    return ats, assigned, layout, num_classes


def _spread_trace(module: nn.Module, x, n: int, layers, config, runtime: Runtime):
    """The surprise fit's pass over shards: what its serial ``_trace`` returns (no labels from a
    stream: a stream is not sharded), and the :class:`~deepfault.core.shards.Spread`.
    """
    from ..core.shards import sharded_pass

    results, spread = sharded_pass("coverage surprise", _trace_shard, module, (x,), (layers, config),
                                   runtime=runtime)
    layout, num_classes = results[0][2], results[0][3]
    if n * layout.num_neurons > MAX_VALUES:
        raise DeepFaultError(
            f"{n} inputs x {layout.num_neurons} neurons is more than the {MAX_VALUES:,} training values a "
            "surprise state may hold; choose fewer or smaller layers (--layers) or a subset of the inputs")
    ats = np.concatenate([r[0] for r in results])
    assigned = np.concatenate([r[1] for r in results])
    return (ats, assigned, None, layout, num_classes), spread
