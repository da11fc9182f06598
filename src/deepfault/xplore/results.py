"""What a DeepXplore run reports (DeepXplore spec section 5), and its files.

:class:`XploreResult` holds the counts, coverage and times of a run and the
difference-inducing inputs themselves; :meth:`XploreResult.to_dict` is the JSON part,
:func:`save_inputs` writes the inputs with their seeds' indices and every model's
predictions as ``.npz`` so they can be replayed (:func:`load_inputs`, :func:`replay`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from torch import nn

from .._deprecation import moved_names
from .._io import atomic_path
from ..core.summary import Summarised
from ..coverage.criteria import CoverageResult
from ..errors import DeepFaultError
from .config import XploreConfig

__all__ = [
    "FoundInputs",
    "FoundSurprise",
    "add_surprise",
    "Realism",
    "VISIBLE_CHANGE_SSIM",
    "measure_realism",
    "input_ssim",
    "add_labels",
    "saturation_warning",
    "TracePoint",
    "TargetSummary",
    "XploreResult",
    "save_inputs",
    "load_inputs",
    "replay",
    "NPZ_KEYS",
]

#: The old name of :data:`VISIBLE_CHANGE_SSIM` answers with a deprecation warning.
__getattr__ = moved_names(__name__, {"SSIM_THRESHOLD": "deepfault.xplore.results:VISIBLE_CHANGE_SSIM"})


@dataclass(frozen=True, eq=False)
class FoundInputs:
    """The difference-inducing inputs of a run, one row each, sorted by seed row.

    Attributes:
        rows: ``(F,)`` position of the seed in the run's seeds.
        seed_index: ``(F,)`` index of the seed in the pool it was drawn from (the test split).
        inputs: ``(F, *input)`` float32 generated inputs (within the data set's bounds).
        seeds: ``(F, *input)`` float32 seed inputs they started from.
        iteration: ``(F,)`` the step at which the models first disagreed (1-based).
        predictions: ``(F, n)`` every model's predicted class on the generated input.
        common_class: ``(F,)`` the class all models predicted on the seed.
        target: ``(F,)`` the model pushed away from the common class.
        l1: ``(F,)`` L1 distance to the seed, in the data set's units.
    """

    rows: np.ndarray
    seed_index: np.ndarray
    inputs: np.ndarray
    seeds: np.ndarray
    iteration: np.ndarray
    predictions: np.ndarray
    common_class: np.ndarray
    target: np.ndarray
    l1: np.ndarray

    def __len__(self) -> int:
        return len(self.rows)

    def subset(self, mask: np.ndarray) -> FoundInputs:
        """The rows where ``mask`` (bool ``(F,)``) is true."""
        return FoundInputs(**{k: getattr(self, k)[mask] for k in self.__dataclass_fields__})


#: An element within this distance of a bound (or past it) is at the bound.
BOUND_TOL = 1e-6


#: SSIM to the seed below which a found input counts as visibly changed: noisy, shifted or
#: washed out at a glance (see docs/decisions.md, "xplore realism: SSIM to the seed"). On MNIST
#: seeds, Gaussian noise of sd 0.2 of the pixel range gives a median SSIM of about 0.71 and a
#: uniform brightening by 0.2 about 0.66; sd 0.1 gives 0.81.
VISIBLE_CHANGE_SSIM = 0.7


@dataclass(frozen=True)
class Realism:
    """How far the found inputs moved from their seeds, and whether they still look like them.

    Attributes:
        found: Inputs measured.
        mean_l1: Mean ``sum |x - seed|`` in the data's units (the paper's "diversity").
        mean_linf: Mean ``max |x - seed|`` in the data's units.
        saturated: Share of the inputs that saturate: clipped to the bounds, less than half
            of the seed's contrast (standard deviation over the elements) is left, because
            most pixels were pushed to a bound or shifted together: a digit turned into a
            black, white or flat grey square. ``None`` when nothing was found. Kept for the
            record; it reads 0 on inputs covered in noise, so :attr:`low_ssim` leads.
        still_differ_clipped: For runs without clipping, the share of inputs on which the
            models still disagree once clipped to the bounds (what a saved image would do);
            ``None`` for clipped runs or when nothing was found.
        outside_bounds: Share of inputs with an element outside the bounds (0 when clipped).
        mean_ssim: Mean SSIM of each input (clipped to the bounds) to its seed
            (:func:`input_ssim`); ``None`` for inputs that are no images or when nothing was found.
        low_ssim: Share of the inputs whose SSIM to their seed is below ``ssim_threshold``:
            visibly noisy, shifted or washed out (``None`` as ``mean_ssim``).
        ssim_threshold: The threshold of ``low_ssim`` (:data:`VISIBLE_CHANGE_SSIM`).
    """

    found: int
    mean_l1: float | None
    mean_linf: float | None
    saturated: float | None
    still_differ_clipped: float | None = None
    outside_bounds: float | None = None
    mean_ssim: float | None = None
    low_ssim: float | None = None
    ssim_threshold: float = VISIBLE_CHANGE_SSIM

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _saturates(inputs: np.ndarray, seeds: np.ndarray, bounds: tuple[float, float]) -> np.ndarray:
    """``(F,)`` bool: clipped to ``bounds`` (what a saved image shows), the input keeps less
    than half of its seed's contrast, the standard deviation over its elements.

    Pixels pushed to a bound (black or white squares) or shifted together towards one (flat
    grey squares) lose the contrast; a noisy but recognisable digit keeps it or gains. The
    share of pixels at a bound cannot tell these apart on MNIST, where most of a digit's
    pixels are at 0 already.
    """
    lo, hi = bounds
    x = np.clip(inputs.reshape(len(inputs), -1), lo, hi)
    s = seeds.reshape(len(seeds), -1)
    flat: np.ndarray = x.std(axis=1) < 0.5 * s.std(axis=1)  # numpy types a reduction as Any
    return flat


def input_ssim(inputs, seeds, bounds: tuple[float, float]) -> np.ndarray | None:
    """``(F,)`` SSIM of each input, clipped to ``bounds`` (what a saved image shows), to its seed.

    The SSIM of :func:`deepfault.core.ssim.ssim` (Gaussian window of 11, or the
    largest odd one that fits, ``L = hi - lo``), batched. ``None`` when the inputs are not
    images ``(F, C, H, W)`` with ``C`` 1 or 3 first or last and ``H, W >= 3``.
    """
    import torch

    from ..core.ssim import ssim

    x = np.asarray(inputs)
    if x.ndim != 4:
        return None
    if x.shape[1] not in (1, 3) and x.shape[3] in (1, 3):  # channels last
        x, s = x.transpose(0, 3, 1, 2), np.asarray(seeds).transpose(0, 3, 1, 2)
    else:
        s = np.asarray(seeds)
    if x.shape[1] not in (1, 3) or min(x.shape[2:]) < 3:
        return None
    lo, hi = float(bounds[0]), float(bounds[1])
    if len(x) == 0:
        return np.zeros(0, np.float64)
    dtype = torch.float64 if x.dtype == np.float64 else torch.float32
    value = ssim(torch.as_tensor(np.clip(x, lo, hi), dtype=dtype), torch.as_tensor(s, dtype=dtype),
                 data_range=hi - lo)
    return value.double().numpy()


def measure_realism(inputs, seeds, bounds: tuple[float, float], *,
                    still_differ_clipped: np.ndarray | None = None,
                    ssim_threshold: float = VISIBLE_CHANGE_SSIM) -> Realism:
    """The :class:`Realism` of found inputs ``(F, *input)`` against their seeds.

    Args:
        inputs: The generated inputs.
        seeds: Their seeds, row for row.
        bounds: ``(lo, hi)`` of the data.
        still_differ_clipped: ``(F,)`` bool, whether the models still disagree on each input
            clipped to ``bounds`` (runs without clipping).
        ssim_threshold: SSIM to the seed below which an input counts in ``low_ssim``.
    """
    x = np.asarray(inputs, dtype=np.float64)
    s = np.asarray(seeds, dtype=np.float64)
    if x.shape != s.shape:
        raise DeepFaultError(f"inputs and seeds must have the same shape; got {x.shape} and {s.shape}")
    if len(x) == 0:
        return Realism(0, None, None, None, None, None, ssim_threshold=ssim_threshold)
    d = np.abs(x - s).reshape(len(x), -1)
    lo, hi = float(bounds[0]), float(bounds[1])
    flat = x.reshape(len(x), -1)
    outside = ((flat < lo - BOUND_TOL) | (flat > hi + BOUND_TOL)).any(axis=1)
    still = None if still_differ_clipped is None else float(np.mean(still_differ_clipped))
    similarity = input_ssim(np.asarray(inputs, np.float32), np.asarray(seeds, np.float32), (lo, hi))
    mean_ssim = None if similarity is None else float(similarity.mean())
    low = None if similarity is None else float((similarity < ssim_threshold).mean())
    return Realism(len(x), float(d.sum(axis=1).mean()), float(d.max(axis=1).mean()),
                   float(_saturates(x, s, (lo, hi)).mean()), still, float(outside.mean()), mean_ssim, low,
                   ssim_threshold)


def saturation_warning(realism: Realism, config: XploreConfig | None = None) -> str | None:
    """A one-line warning when most found inputs are far from their seeds (SSIM below the
    threshold) or saturate (``None`` otherwise).
    """
    far = realism.low_ssim is not None and realism.low_ssim > 0.5
    saturated = realism.saturated is not None and realism.saturated > 0.5
    if not (far or saturated):
        return None
    fixes = ["a smaller --step-size" + ("" if config is None else f" (now {config.step:g})")]
    if config is None or config.transform == "light":
        fixes.append("--constraint none instead of light")
    fixes.append("fewer --iterations")
    what = []
    if far:
        what.append(f"{realism.low_ssim:.0%} of the {realism.found} difference-inducing inputs are far from "
                    f"their seeds (SSIM below {realism.ssim_threshold:g}: visibly noisy, shifted or washed "
                    "out)")
    if saturated:
        what.append(f"{realism.saturated:.0%} of the {realism.found} difference-inducing inputs saturate "
                    "(pixels pushed to a bound or shifted together: less than half the seed's contrast left)")
    text = (f"{' and '.join(what)}: they are hardly images any more; use {', '.join(fixes[:-1])} or "
            f"{fixes[-1]}")
    if realism.still_differ_clipped is not None:
        text += f"; without clipping only {realism.still_differ_clipped:.0%} still differ once clipped"
    return text


@dataclass(frozen=True, eq=False)
class FoundSurprise:
    """Surprise adequacy of the found inputs and of their seeds, under every model.

    Attributes:
        kinds: The scores (``"dsa"``, ``"lsa"``).
        found: ``kind -> (F, n)``: each found input's score under each model (its own state,
            fitted on the training split).
        seeds: ``kind -> (F, n)``: the same for the seed each input started from.
    """

    kinds: tuple[str, ...]
    found: dict[str, np.ndarray]
    seeds: dict[str, np.ndarray]

    def means(self, which: str = "found") -> dict[str, list[float | None]]:
        """``kind -> [mean over the inputs, per model]`` (``None`` when nothing was found)."""
        table = self.found if which == "found" else self.seeds
        out: dict[str, list[float | None]] = {}
        for k in self.kinds:
            v = table[k]
            out[k] = [None] * v.shape[1] if not len(v) else [float(m) for m in v.mean(axis=0)]
        return out

    def to_dict(self, model_names: Sequence[str]) -> dict:
        found, seeds = self.means("found"), self.means("seeds")
        return {"kinds": list(self.kinds),
                "models": [{"model": name, **{f"mean_{k}": _json(found[k][j]) for k in self.kinds},
                            **{f"seeds_mean_{k}": _json(seeds[k][j]) for k in self.kinds}}
                           for j, name in enumerate(model_names)]}


def _json(v: float | None) -> float | str | None:
    """An infinite mean as the string ``"inf"`` (JSON has no infinity)."""
    if v is None or np.isnan(v):
        return None
    return v if np.isfinite(v) else ("inf" if v > 0 else "-inf")


@dataclass(frozen=True)
class TracePoint:
    """Coverage and progress after one iteration of one group of seeds.

    Attributes:
        group: Index of the group of seeds (0 when all seeds advance together).
        iteration: Steps taken by the group (0: before the first step).
        seconds: Time since the run started.
        found: Difference-inducing inputs found so far in the run.
        covered: Neurons covered so far, per model.
    """

    group: int
    iteration: int
    seconds: float
    found: int
    covered: tuple[int, ...]

    def to_dict(self) -> dict:
        return {"group": self.group, "iteration": self.iteration, "seconds": self.seconds,
                "found": self.found, "covered": list(self.covered)}


@dataclass(frozen=True)
class TargetSummary:
    """Counts for the seeds of one target model (or all seeds: ``target is None``).

    Attributes:
        target: Model index, or ``None`` for the pooled row.
        seeds: Seeds drawn with this target (already differing ones included).
        already_differ: Seeds on which the models disagreed before any step (pooled row only;
            they are never searched, so no target applies).
        searched: Seeds searched (all models agreed on them).
        found: Difference-inducing inputs found.
        mean_iterations: Mean steps to the difference over the found inputs.
        mean_l1: Mean L1 distance to the seed over the found inputs (the paper's diversity).
    """

    target: int | None
    seeds: int
    already_differ: int
    searched: int
    found: int
    mean_iterations: float | None
    mean_l1: float | None

    @property
    def found_ratio(self) -> float | None:
        return self.found / self.searched if self.searched else None

    def to_dict(self) -> dict:
        return {"target": self.target, "seeds": self.seeds, "already_differ": self.already_differ,
                "searched": self.searched, "found": self.found, "found_ratio": self.found_ratio,
                "mean_iterations": self.mean_iterations, "mean_l1": self.mean_l1}


def _mean(values: np.ndarray) -> float | None:
    return float(np.mean(values)) if len(values) else None


@dataclass(frozen=True, eq=False, repr=False)
class XploreResult(Summarised):
    """One DeepXplore run.

    Attributes:
        config: The run's parameters.
        model_names: One name per model, in the objective's order (target indices refer to it).
        num_classes: Classes every model predicts.
        num_neurons: Neurons per model in the coverage layout.
        bounds: ``(lo, hi)`` valid input range.
        seed_index: ``(N,)`` pool index of each seed.
        seed_predictions: ``(N, n)`` every model's prediction on each seed.
        targets: ``(N,)`` target model of each seed.
        already_differ: ``(N,)`` bool, the models disagreed on the seed itself.
        found: The difference-inducing inputs.
        coverage: Final neuron coverage of each model (``layer-minmax``, threshold ``t``).
        trace: Coverage and count after each iteration.
        seconds: Wall-clock time of the whole run.
        first_found_seconds: Time from the start to the first difference-inducing input
            (``None`` when none was found).
        device: Where the models ran.
        layer_names: Each model's neuron layers.
        realism: How far the found inputs moved and whether they saturate.
        surprise: DSA/LSA of the found inputs and their seeds under each model, when
            :func:`add_surprise` computed them (``None`` otherwise).
        true_labels: ``(F,)`` the true label of each found input (its seed's label), when the
            seeds' labels were given (``labels=`` of :func:`~.search.xplore`, or
            :func:`add_labels`); ``None`` otherwise.
        feature_bounds: ``(lo, hi)`` float64 arrays of one input's shape when the bounds were
            per feature (:mod:`.features`); ``bounds`` is then their envelope. ``None`` for one
            range for every element.
        fixed: Bool mask of one input's shape: the elements kept at the seed's value
            (``None`` when none was fixed).
    """

    config: XploreConfig
    model_names: tuple[str, ...]
    num_classes: int
    num_neurons: tuple[int, ...]
    bounds: tuple[float, float]
    seed_index: np.ndarray
    seed_predictions: np.ndarray
    targets: np.ndarray
    already_differ: np.ndarray
    found: FoundInputs
    coverage: tuple[CoverageResult, ...]
    trace: tuple[TracePoint, ...]
    seconds: float
    first_found_seconds: float | None
    device: str = "cpu"
    layer_names: tuple[tuple[str, ...], ...] = field(default=())
    realism: Realism | None = None
    surprise: FoundSurprise | None = None
    true_labels: np.ndarray | None = None
    feature_bounds: tuple[np.ndarray, np.ndarray] | None = None
    fixed: np.ndarray | None = None

    @property
    def num_seeds(self) -> int:
        return len(self.seed_index)

    @property
    def num_found(self) -> int:
        return len(self.found)

    @property
    def num_already_differ(self) -> int:
        return int(self.already_differ.sum())

    @property
    def pooled_coverage(self) -> float:
        """``sum covered / sum neurons`` over the models."""
        total = sum(c.total or 0 for c in self.coverage)  # neuron coverage: total is never None
        return sum(c.covered for c in self.coverage) / total if total else 0.0

    @property
    def seconds_per_found(self) -> float | None:
        return self.seconds / self.num_found if self.num_found else None

    def summaries(self) -> list[TargetSummary]:
        """One row per target model that has seeds, then the pooled row (``target=None``)."""
        rows = []
        searched = ~self.already_differ
        for j in range(len(self.model_names)):
            mine = self.targets == j
            if not mine.any():
                continue
            hit = self.found.target == j
            rows.append(TargetSummary(j, int(mine.sum()), int((mine & self.already_differ).sum()),
                                      int((mine & searched).sum()), int(hit.sum()),
                                      _mean(self.found.iteration[hit]), _mean(self.found.l1[hit])))
        rows.append(TargetSummary(None, self.num_seeds, self.num_already_differ, int(searched.sum()),
                                  self.num_found, _mean(self.found.iteration), _mean(self.found.l1)))
        return rows

    def agreement(self) -> np.ndarray | None:
        """``(F, n)`` bool: model ``j`` predicts the true label of found input ``i`` (``None``
        without :attr:`true_labels`).
        """
        if self.true_labels is None:
            return None
        agrees: np.ndarray = self.found.predictions == self.true_labels[:, None]
        return agrees

    def agreement_summary(self) -> dict | None:
        """How often each model agrees with the true label on the found inputs: ``{"inputs": F,
        "models": [{"model", "agrees", "share"}], "none": count, "none_share": share}`` (``None``
        without :attr:`true_labels`). On a difference-inducing input at most all models but one
        can be right, and possibly none.
        """
        agrees = self.agreement()
        if agrees is None:
            return None
        n = len(agrees)
        count = agrees.sum(axis=0)
        none = int((~agrees.any(axis=1)).sum())
        return {"inputs": n,
                "models": [{"model": name, "agrees": int(c), "share": float(c / n) if n else None}
                           for name, c in zip(self.model_names, count, strict=True)],
                "none": none, "none_share": none / n if n else None}
    def headline(self) -> str:
        return (f"{self.num_found} difference-inducing inputs from {self.num_seeds} seeds "
                f"({self.num_already_differ} already differed); neuron coverage {self.pooled_coverage:.1%}")

    def summary(self) -> str:
        """What was found, then each model's coverage and each target's count."""
        lines = [f"DeepXplore: {self.headline()} in {self.seconds:.1f} s"]
        for name, c in zip(self.model_names, self.coverage, strict=True):
            share = f"{c.covered / c.total:.1%}" if c.total else str(c.covered)
            lines.append(f"  {name}: coverage {share} ({c.covered}/{c.total})")
        for t in self.summaries():
            if t.target is not None:
                lines.append(f"  target {self.model_names[t.target]}: {t.found} found from {t.searched} "
                             "searched seeds")
        return "\n".join(lines)

    def rows(self) -> list[dict]:
        return [t.to_dict() for t in self.summaries()]

    def to_dict(self) -> dict:
        """Everything but the input arrays, as JSON-ready values."""
        return {
            "config": self.config.to_dict(),
            "constraint": self.config.constraint().to_dict(),
            "models": [{"name": n, "neurons": m, "layers": list(ls) if ls else None}
                       for n, m, ls in zip(self.model_names, self.num_neurons,
                                           self.layer_names or [()] * len(self.model_names),
                                           strict=True)],
            "num_classes": self.num_classes,
            "bounds": list(self.bounds),
            "device": self.device,
            "seeds": self.num_seeds,
            "already_differ": self.num_already_differ,
            "found": self.num_found,
            "per_target": [s.to_dict() for s in self.summaries()],
            "coverage": [{"model": n, **c.to_dict()} for n, c in zip(self.model_names, self.coverage,
                                                                      strict=True)],
            "pooled_coverage": self.pooled_coverage,
            "seconds": self.seconds,
            "seconds_per_found": self.seconds_per_found,
            "first_found_seconds": self.first_found_seconds,
            "realism": None if self.realism is None else self.realism.to_dict(),
            "trace": [p.to_dict() for p in self.trace],
            **({} if self.surprise is None else {"surprise": self.surprise.to_dict(self.model_names)}),
            **({} if self.true_labels is None else {"true_label_agreement": self.agreement_summary()}),
            **({} if self.feature_bounds is None else {"feature_bounds": self._feature_bounds_dict()}),
            **({} if self.fixed is None else {"fixed": {
                "elements": int(self.fixed.sum()),
                "indices": np.flatnonzero(self.fixed).tolist() if self.fixed.size <= 4096 else
                "in the .npz (fixed)"}}),
        }

    def _feature_bounds_dict(self) -> dict:
        from .features import InputBounds

        assert self.feature_bounds is not None  # the caller checked
        return InputBounds(*self.feature_bounds).to_dict()


#: The arrays of a saved run (``.npz``).
NPZ_KEYS = ("inputs", "seeds", "seed_index", "rows", "iteration", "predictions", "common_class",
            "target", "l1", "model_names", "already_differ_index", "already_differ_predictions")
# and, when the run knew them, ``true_label`` (F,): each found input's seed's label; with
# per-feature bounds ``feature_lo`` and ``feature_hi``, with fixed features ``fixed`` (one
# input's shape each)


def save_inputs(path: str | os.PathLike, result: XploreResult) -> Path:
    """Write the difference-inducing inputs, their seeds and predictions as ``.npz``.

    Also stores the pool indices and predictions of the seeds that already differed.
    Written atomically.
    """
    f = result.found
    arrays = {
        "inputs": f.inputs, "seeds": f.seeds, "seed_index": f.seed_index, "rows": f.rows,
        "iteration": f.iteration, "predictions": f.predictions, "common_class": f.common_class,
        "target": f.target, "l1": f.l1, "model_names": np.array(result.model_names),
        "already_differ_index": result.seed_index[result.already_differ],
        "already_differ_predictions": result.seed_predictions[result.already_differ],
    }
    if result.true_labels is not None:
        arrays["true_label"] = result.true_labels
    if result.feature_bounds is not None:  # one input's shape each
        arrays["feature_lo"], arrays["feature_hi"] = result.feature_bounds
    if result.fixed is not None:
        arrays["fixed"] = result.fixed
    if result.surprise is not None:  # (F, models) each, beside l1
        arrays.update({k: v for k, v in result.surprise.found.items()})
        arrays.update({f"seed_{k}": v for k, v in result.surprise.seeds.items()})
    path = Path(path)
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.savez_compressed(fh, **arrays)
    return path


def load_inputs(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The arrays written by :func:`save_inputs`.

    Raises:
        DeepFaultError: The file is missing or is not a DeepXplore inputs file.
    """
    path = Path(path)
    if not path.is_file():
        raise DeepFaultError(f"inputs file {str(path)!r} does not exist")
    with np.load(path, allow_pickle=False) as z:
        missing = [k for k in NPZ_KEYS if k not in z.files]
        if missing:
            raise DeepFaultError(f"{str(path)!r} is not a DeepXplore inputs file (no {', '.join(missing)})")
        return {k: z[k] for k in z.files}


def add_surprise(result: XploreResult, scorers: Sequence[Callable[[np.ndarray], Mapping[str, np.ndarray]]]
                 ) -> XploreResult:
    """``result`` with the surprise adequacy of every found input and of its seed under each
    model (:attr:`XploreResult.surprise`); nothing else changes.

    Args:
        result: A finished run.
        scorers: One per model, in the run's order: ``scorer(inputs) -> {kind: (N,) scores}``,
            e.g. :class:`~deepfault.coverage.surprise_cache.SurpriseScorer`.

    Raises:
        DeepFaultError: Not one scorer per model, or scorers that disagree on the kinds.
    """
    if len(scorers) != len(result.model_names):
        raise DeepFaultError(f"add_surprise needs one scorer per model ({len(result.model_names)}); "
                             f"got {len(scorers)}")
    f = result.found
    per_model = [(dict(s(f.inputs)), dict(s(f.seeds))) for s in scorers]
    kinds = tuple(per_model[0][0])
    if any(tuple(found) != kinds for found, _ in per_model):
        raise DeepFaultError("the scorers must return the same kinds of score for every model")
    found = {k: np.stack([np.asarray(p[0][k], dtype=np.float64) for p in per_model], axis=1)
             for k in kinds}
    seeds = {k: np.stack([np.asarray(p[1][k], dtype=np.float64) for p in per_model], axis=1)
             for k in kinds}
    return replace(result, surprise=FoundSurprise(kinds, found, seeds))


def add_labels(result: XploreResult, labels) -> XploreResult:
    """``result`` with the true label of every found input (:attr:`XploreResult.true_labels`),
    taken from ``labels``, the labels of the pool the seeds were drawn from (``labels[i]`` is
    the label of ``found.seed_index == i``); nothing else changes.

    Raises:
        DeepFaultError: ``labels`` is not one integer label per pool input.
    """
    y = np.asarray(labels)
    if y.ndim != 1 or y.dtype.kind not in "iu":
        raise DeepFaultError(f"labels must be one integer label per input, shape (P,); got {y.dtype} "
                             f"of shape {y.shape}")
    index = result.found.seed_index
    need = int(max(index.max(initial=-1), result.seed_index.max(initial=-1))) + 1
    if len(y) < need:
        raise DeepFaultError(f"labels has {len(y)} entries, but the seeds were drawn from at least {need} "
                             "inputs; give one label per input of the pool")
    return replace(result, true_labels=y[index].astype(np.int64))


def replay(models: Sequence[nn.Module], inputs, *, batch_size: int | str = "auto") -> np.ndarray:
    """``(F, n)`` every model's predicted class on saved inputs (to check they still disagree)."""
    from ..core.batches import predict

    return np.stack([predict(m, inputs, batch_size=batch_size).argmax(1).numpy() for m in models], axis=1)
