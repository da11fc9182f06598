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
from ..core.outcome import Artifact, Outcome
from ..core.summary import Summarised
from ..corpus import Findings, Provenance
from ..coverage.criteria import CoverageResult
from ..errors import DeepFaultError
from .config import XploreConfig
from .realism import VISIBLE_CHANGE_SSIM, Realism, input_ssim, measure_realism, saturation_warning
from .summary import run_summary

__all__ = [
    "FoundInputs",
    "RunNotes",
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
__getattr__ = moved_names(__name__, {"SSIM_THRESHOLD": "deepfault.xplore.realism:VISIBLE_CHANGE_SSIM"})


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


@dataclass(frozen=True)
class RunNotes:
    """What a run's summary says beside its numbers; none of it is in :meth:`XploreResult.to_dict`.

    Attributes:
        data: The name of the data set the seeds came from (``None``: a caller's array).
        pool: Inputs the seeds were drawn from (``None``: the seeds themselves).
        data_bounds: The data set's range (``None``: the run's :attr:`XploreResult.bounds`).
        class_names: One name per class (``None``: the class indices).
        device: Where it ran, as asked (``None``: :attr:`XploreResult.device`).
        batch: The line saying which batch the memory chose (``None`` for a given batch).
        sources: Where each model's neurons came from, one phrase per model
            (:func:`~deepfault.core.capture.selection_source`).
        selections: What selected each model's neurons, as result files record it
            (:func:`~deepfault.core.capture.layer_selection`).
        lines: Lines after the summary (the bounds that held, the surprise states used).
        grid: Inputs in the printed table of inputs and in the image grid.
    """

    data: str | None = None
    pool: int | None = None
    data_bounds: tuple[float, float] | None = None
    class_names: tuple[str, ...] | None = None
    device: str | None = None
    batch: str | None = None
    sources: tuple[str, ...] = ()
    selections: tuple = ()
    lines: tuple[str, ...] = ()
    grid: int = 8


@dataclass(frozen=True, eq=False, repr=False)
class XploreResult(Summarised, Outcome):
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
    notes: RunNotes = field(default_factory=RunNotes)

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
        """What ``deepfault xplore`` prints (:func:`~.summary.run_summary`): the neurons, models,
        data and settings, the finds per target, which model agrees with the true label,
        coverage, times and realism.
        """
        return run_summary(self)

    def payload(self, records: Sequence[Mapping] = (), extras: Sequence[Mapping] = ()) -> dict:
        """The result document's body: :meth:`to_dict` but its config and device (the
        envelope's), each model's entry after its record in ``records`` (the file it came from,
        its weights' fingerprint, ...), with its layer selection, then its ``extras`` (the
        surprise state it was scored with); each one per model, or none.
        """
        body = {k: v for k, v in self.to_dict().items() if k not in ("config", "device")}
        n = len(self.model_names)
        chosen = self.notes.selections or (None,) * n
        body["models"] = [{**r, **m, **({} if s is None else {"layer_selection": s}), **e}
                          for r, m, s, e in zip(list(records) or [{}] * n, body["models"], chosen,
                                                list(extras) or [{}] * n, strict=True)]
        return body

    def findings(self, dataset: str | None = None) -> Findings:
        """The difference-inducing inputs for a corpus (:mod:`deepfault.corpus`), each expected to
        get its seed's true label where the run knew it (:attr:`true_labels`), else the class every
        model gave the seed.

        Args:
            dataset: the data set's name, where the run was given arrays rather than a data set.

        Raises:
            DeepFaultError: no data set name known or given.
        """
        name = dataset or self.notes.data
        if not name:
            raise DeepFaultError("findings need the data set's name: give dataset= (the run had arrays)")
        labels = self.found.common_class if self.true_labels is None else self.true_labels
        return Findings(inputs=np.asarray(self.found.inputs, dtype=np.float32),
                        labels=np.asarray(labels, dtype=np.int64),
                        provenance=Provenance("xplore", f"seed {self.config.seed}", tuple(self.model_names)),
                        dataset=str(name), num_classes=self.num_classes)

    def outputs(self) -> tuple[Artifact, ...]:
        """The inputs (``.npz``, :func:`save_inputs`) and their image grid (``.png``)."""
        return (Artifact("inputs", ".npz", lambda path: save_inputs(path, self)),
                Artifact("grid", ".png", self._grid))

    def _grid(self, path: Path) -> Path:
        from .figures import image_grid

        n = self.notes
        return image_grid(self.found, self.model_names, path, rows=n.grid,
                          bounds=self.bounds if n.data_bounds is None else n.data_bounds,
                          class_names=None if n.class_names is None else list(n.class_names),
                          title=f"DeepXplore: {self.num_found} difference-inducing inputs from "
                          f"{self.num_seeds} seeds", true_labels=self.true_labels)

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
