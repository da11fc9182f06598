"""One DeepFault run: spectra for the chosen classes, selection, synthesis, evaluation.

:func:`run_deepfault` strings the public steps together for a model and a data set; the
command line's ``deepfault run`` is a thin layer over it.
"""

from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from ..core.capture import as_tensor, layer_selection
from ..core.entry import entry, split_arguments
from ..core.inputs import InputData
from ..core.memory import resolve_batch_size
from ..core.outcome import Artifact, Outcome
from ..core.progress import log as progress_log
from ..core.progress import progress_bar
from ..core.runtime import Runtime
from ..core.summary import Summarised
from ..corpus import Findings, Provenance
from ..data import Dataset
from ..data.bounds import in_model_range
from ..data.dataset import as_dataset
from ..errors import DeepFaultError
from ..experiment.results import dataset_record, model_record
from ..models.prepare import PreparedModel, resolve_model
from .activity import ActivityLevels, activity_levels
from .config import RunConfig
from .diagnosis import degenerate_lines
from .evaluation import Evaluation, _concat_evaluations, _evaluate_synthesized
from .outputs import RunShown as _Shown
from .outputs import grid_of, save_synthesized, summary_text
from .selection import Selection, check_k, get_approach, select
from .spectrum import Spectrum, _spectra_and_predictions
from .synthesis import _synthesize_recording, neuron_pairs

__all__ = ["RunConfig", "Repetition", "ClassResult", "RunResult", "CellSpec", "GroupInputs", "GroupResult",
           "run_group", "run_deepfault", "group_seed", "k_primes_for", "add_surprise"]


@dataclass(frozen=True)
class Repetition:
    """One selection and the inputs synthesized from it."""

    index: int
    seed: int
    selection: Selection
    input_indices: np.ndarray
    evaluation: Evaluation
    synthesis_seconds: float
    synthesized: np.ndarray = field(repr=False)

    def to_dict(self) -> dict:
        n = len(self.input_indices)
        return {
            "repetition": self.index,
            "seed": self.seed,
            "selection": self.selection.to_dict(),
            "input_indices": self.input_indices.tolist(),
            "synthesis_seconds": self.synthesis_seconds,
            "synthesis_seconds_per_input": self.synthesis_seconds / n if n else None,
            "evaluation": self.evaluation.to_dict(),
        }


@dataclass(frozen=True)
class ClassResult:
    """The spectrum of one class and every repetition's selection and evaluation."""

    target_class: int
    spectrum: Spectrum
    num_correct: int
    repetitions: tuple[Repetition, ...]

    @property
    def no_failures(self) -> bool:
        return self.spectrum.num_failed == 0

    def to_dict(self) -> dict:
        return {
            "class": self.target_class,
            "no_failures": self.no_failures,
            "num_correct": self.num_correct,
            "spectrum": self.spectrum.to_dict(),
            "repetitions": [r.to_dict() for r in self.repetitions],
        }


@dataclass(frozen=True, repr=False)
class RunResult(Summarised, Outcome):
    """One DeepFault run: its configuration, test accuracy and per-class results.

    Prints one line; :meth:`summary` gives the suspicious neurons of each class with their
    scores and how many synthesized inputs change the prediction, then (for a result of
    :func:`run_deepfault`) what ``deepfault run`` prints: the tables of every class's neurons
    and of the evaluation, the surprise state and the random baseline; :meth:`to_dict` is
    the run's findings, :meth:`payload` the result file's body; :meth:`outputs` the
    synthesized inputs (``.npz``) and their image grid; :meth:`rows` / :meth:`to_frame` one
    row per class and repetition.

    Attributes:
        shown: What :func:`run_deepfault` adds for showing the run (its data, the model's name,
            the surprise state, the random baseline; :class:`~.outputs.RunShown`); ``None``
            for a result made otherwise.
        quiet: :meth:`summary` leaves every class's neurons out (``deepfault run -q``).
    """

    config: RunConfig
    classes: tuple[ClassResult, ...]
    test_accuracy: float
    output_kind: str
    shown: _Shown | None = field(default=None, compare=False)
    quiet: bool = field(default=False, compare=False)

    @property
    def baseline(self) -> RunResult | None:
        """The random baseline ``config.baseline`` asked for (``None``: none was run)."""
        return None if self.shown is None else self.shown.baseline

    def _flips(self) -> tuple[int, int]:
        reps = [r for c in self.classes for r in c.repetitions]
        flipped = sum(int((r.evaluation.pred_synthesized != r.evaluation.pred_original).sum()) for r in reps)
        return flipped, sum(len(r.input_indices) for r in reps)

    def headline(self) -> str:
        flipped, total = self._flips()
        n = len(self.classes)
        return (f"{self.config.measure} k={self.config.k} on {n} class{'' if n == 1 else 'es'}, "
                f"test accuracy {self.test_accuracy:.1%}; {flipped} of {total} synthesized inputs "
                "change the prediction")

    def summary(self, top: int = 5) -> str:
        """The run, then per class its failing inputs, the ``top`` suspicious neurons with their
        scores and the synthesized inputs that change the prediction (unless :attr:`quiet`);
        then, for a result of :func:`run_deepfault`, the tables ``deepfault run`` prints.
        """
        answer = self._answer(top)
        return answer if self.shown is None else f"{answer}\n\n{summary_text(self, quiet=self.quiet)}"

    def payload(self) -> dict:
        """The result file's body: :meth:`to_dict` less the config (the envelope has it), and
        the surprise state the scores came from (``None``: none).
        """
        body = self.to_dict()
        body.pop("config")
        fit = None if self.shown is None else self.shown.surprise
        return {**body, "surprise": None if fit is None else fit.to_dict()}

    def records(self, prepared: PreparedModel, file, data_dir) -> dict:
        """The model's record (``prepared`` from ``file``, its layout, meta and the run's layer
        selection) and the data set's (read from ``data_dir``) that the result file holds.
        """
        mf, data = prepared.model_file, prepared.data
        if mf is None or data is None:
            raise DeepFaultError("a run's records need its model prepared from a file, on its data set")
        model = model_record(prepared, file, arch_kwargs=mf.arch_kwargs,
                             layout=list(prepared.file_input_shape or data.input_shape),
                             layout_name=prepared.layout, input_shape=list(data.input_shape),
                             adapter=prepared.adapter, label=prepared.name,
                             meta={k: v for k, v in mf.meta.items() if k != "recipe"},
                             layer_selection=layer_selection(prepared.module, self.config.layers))
        return {"model": model, "dataset": dataset_record(data, data_dir)}

    def findings(self) -> Findings:
        """The synthesized inputs whose prediction is not their seed's label, for a corpus
        (:mod:`deepfault.corpus`), each expected to get its seed's true label.

        Raises:
            DeepFaultError: the result was not made by :func:`run_deepfault` (it knows no data).
        """
        if self.shown is None:
            raise DeepFaultError("findings need a result of run_deepfault (it knows the run's data)")
        data = self.shown.data
        inputs, labels = [np.zeros((0, *data.x_test.shape[1:]), np.float32)], [np.zeros(0, np.int64)]
        for rep in (r for c in self.classes for r in c.repetitions if len(r.input_indices)):
            seed_labels = np.asarray(data.y_test[rep.input_indices], dtype=np.int64)
            failing = np.asarray(rep.evaluation.pred_synthesized) != seed_labels
            inputs.append(np.asarray(rep.synthesized, dtype=np.float32)[failing])
            labels.append(seed_labels[failing])
        c = self.config
        run = f"{c.measure} k={c.k} seed {c.seed}"
        return Findings(inputs=np.concatenate(inputs), labels=np.concatenate(labels),
                        provenance=Provenance("run", run, (self.shown.model_name,)),
                        dataset=data.name, num_classes=len(data.class_names) or None)

    def outputs(self) -> tuple[Artifact, ...]:
        """The synthesized inputs with their originals, labels and predictions (``.npz``,
        :func:`~.outputs.save_synthesized`) and their image grid (``.png``; none for inputs
        that are not images).
        """
        if self.shown is None:
            return ()
        data = self.shown.data
        return (Artifact("inputs", ".npz", functools.partial(save_synthesized, self, data)),
                Artifact("grid", ".png", functools.partial(grid_of, self, data)))

    def page(self, folder: Path, *, provenance: dict | None = None) -> dict:
        """The run's HTML page (:func:`~.report.run_page`), beside its random baseline when
        ``config.baseline`` ran one.
        """
        from .report import BaselineComparison, run_page

        if self.shown is None:
            raise DeepFaultError("a page needs a result of run_deepfault (it shows the run's data)")
        shown = self.shown
        why = "" if self.config.baseline else (
            "No random baseline: the run was asked not to compute it (--no-baseline), so its "
            "accuracy has nothing to be compared with.")
        compared = BaselineComparison(shown.baseline, shown.seconds, shown.baseline_seconds, why)
        return run_page(self, shown.data, folder, model_name=shown.model_name, comparison=compared,
                        provenance=provenance)

    def _answer(self, top: int) -> str:
        lines = [f"DeepFault run: {self.headline()}"]
        lines += [f"warning: {line}" for line in degenerate_lines(self)]
        for c in [] if self.quiet else self.classes:
            if c.no_failures:
                lines.append(f"  class {c.target_class}: no failing input, nothing to localise")
                continue
            rep = c.repetitions[0] if c.repetitions else None
            neurons = "" if rep is None else ", ".join(
                f"{n.layer}[{n.unit}]" + ("" if n.score is None else f" {n.score:.3g}")
                for n in rep.selection.neurons[:top])
            more = "" if rep is None or len(rep.selection.neurons) <= top else ", ..."
            ev = None if rep is None else rep.evaluation
            flips = "" if ev is None else (
                f"; {int((ev.pred_synthesized != ev.pred_original).sum())} of "
                f"{len(ev.pred_original)} synthesized inputs change the prediction")
            lines.append(f"  class {c.target_class}: {c.spectrum.num_failed} failing; suspicious: "
                         f"{neurons}{more}{flips}")
        from .report import recurrence_line

        recurrence = recurrence_line(self)
        if recurrence is not None:
            lines.append(f"  across classes: {recurrence}")
        return "\n".join(lines)

    def rows(self) -> list[dict]:
        out = []
        for c in self.classes:
            for r in c.repetitions:
                ev = r.evaluation
                out.append({"class": c.target_class, "repetition": r.index, "measure": self.config.measure,
                            "k": self.config.k, "failing": c.spectrum.num_failed,
                            "inputs": len(r.input_indices),
                            "changed": int((ev.pred_synthesized != ev.pred_original).sum()),
                            "loss": float(ev.loss.mean()) if len(ev.loss) else None,
                            "accuracy": float(ev.correct.mean()) if len(ev.correct) else None,
                            "neurons": [f"{n.layer}[{n.unit}]" for n in r.selection.neurons]})
        return out

    def to_dict(self) -> dict:
        return {
            "config": self.config.to_dict(),
            "test_accuracy": self.test_accuracy,
            "output_kind": self.output_kind,
            "classes": [c.to_dict() for c in self.classes],
        }


def group_seed(*parts: int) -> int:
    """A 32-bit seed derived from integers (the experiment seed, a class, ``k``, ...)."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0])


def k_primes_for(k: int, num_neurons: int, *, ks: Sequence[int] = (), explicit: Sequence[int] | None = None
                 ) -> list[int]:
    """The ``k' > k`` at which the share of the top ``k'`` neurons that increased is reported.

    ``explicit`` when given; otherwise ``2k``, ``5k`` and every grid ``k`` larger than ``k``,
    each at most the number of neurons.
    """
    if explicit is not None:
        too_many = [kp for kp in explicit if kp > num_neurons]
        if too_many:
            raise DeepFaultError(
                f"k'={too_many[0]} (--k-prime) is more than the {num_neurons} analysed neurons; "
                f"choose k' <= {num_neurons}"
            )
        return sorted(set(explicit))
    return sorted({kp for kp in (2 * k, 5 * k, *ks) if k < kp <= num_neurons})


@dataclass(frozen=True)
class CellSpec:
    """One cell of a (model, class) group: an approach, ``k`` and a repetition."""

    approach: str
    k: int
    repetition: int = 0


@dataclass(frozen=True)
class GroupResult:
    """What :func:`run_group` returns: the class's spectrum and one repetition per cell."""

    target_class: int
    spectrum: Spectrum
    num_correct: int
    input_indices: np.ndarray
    cells: tuple[tuple[CellSpec, Repetition], ...]


@dataclass(frozen=True)
class GroupInputs:
    """The test inputs a (model, class) group draws from.

    Attributes:
        inputs: The test inputs (only those labelled with the group's class are used).
        labels: Their labels.
        bounds: The data set's value range.
        indices: The inputs' indices in the whole test split (default ``0..N-1``).
    """

    inputs: Any
    labels: Any
    bounds: tuple[float, float]
    indices: np.ndarray | None = None


def _old_group_form(fn: Callable) -> Callable:
    """Accept :func:`run_group`'s old form ``run_group(model, inputs, labels, target_class, cells,
    bounds=..., indices=..., ...)`` with a :class:`FutureWarning` naming the new one.
    """
    @functools.wraps(fn)
    def inner(model, *args, **kwargs):
        if len(args) == 4 or "bounds" in kwargs:
            inputs, labels, *rest = args
            warnings.warn("run_group(model, inputs, labels, target_class, cells, bounds=, indices=) is "
                          "deprecated: pass run_group(model, GroupInputs(inputs, labels, bounds, indices), "
                          "target_class, cells)", FutureWarning, stacklevel=2)
            data = GroupInputs(inputs, labels, kwargs.pop("bounds"), kwargs.pop("indices", None))
            return fn(model, data, *rest, **kwargs)
        return fn(model, *args, **kwargs)
    return inner


@_old_group_form
def run_group(
    model: nn.Module,
    data: GroupInputs,
    target_class: int,
    cells: Sequence[CellSpec],
    *,
    config: RunConfig,
    output_kind: str = "logits",
    ks: Sequence[int] = (),
) -> GroupResult:
    """The DeepFault protocol for one model and class; ``run`` and ``experiment`` both call it.

    1. The spectrum of the class's inputs (only inputs labelled ``target_class`` are run),
       and their predictions from the same pass.
    2. The inputs to synthesize from: every correctly classified one, or
       ``config.num_inputs`` of them drawn without replacement with the seed
       ``(config.seed, class)``; all cells of the group share them.
    3. For each cell: ``k`` neurons chosen by the approach (baselines seeded with
       ``(config.seed, class, k, repetition)``), synthesis (timed after one warm-up
       step), and the evaluation of the new inputs, including the top-``k'`` increase for
       :func:`k_primes_for`.

    Args:
        model: The classifier (on its device).
        data: The test inputs, their labels, bounds and indices (:class:`GroupInputs`; the old
            form ``inputs, labels, ..., bounds=, indices=`` still works, with a warning).
        target_class: The class.
        cells: The approaches, ``k`` and repetitions to compute.
        config: Synthesis and evaluation settings (``approach``/``k``/``classes`` unused).
        output_kind: ``"logits"`` or ``"probabilities"``.
        ks: The grid's ``k`` values (for the default ``k'``).

    Returns:
        A :class:`GroupResult`.
    """
    y = np.asarray(data.labels)
    index = np.arange(len(y)) if data.indices is None else np.asarray(data.indices)
    in_class = np.flatnonzero(y == target_class)
    if not len(in_class):
        raise DeepFaultError(f"no test input of class {target_class}")
    x_class = data.inputs[in_class]
    spectra, predicted = _spectra_and_predictions(model, x_class, y[in_class], [target_class],
                                                 layers=config.layers,
                                                 threshold=_activity(model, data.inputs, config),
                                                 batch_size=config.batch_size)
    correct = np.flatnonzero(predicted == target_class)
    seeds = _Seeds(spectra[target_class], len(correct), _chosen(config, target_class, correct))
    return _synthesize_group(model, _rows(x_class, seeds.chosen), y[in_class], index[in_class], target_class,
                             cells, seeds,
                             bounds=data.bounds, config=config, output_kind=output_kind, ks=ks)


@dataclass(frozen=True)
class _Seeds:
    """What the spectrum pass gives one class: its spectrum, how many of its inputs the model
    classifies correctly, and the positions (among the class's inputs) of those synthesis
    starts from.
    """

    spectrum: Spectrum
    num_correct: int
    chosen: np.ndarray


def _chosen(config: RunConfig, target_class: int, correct: np.ndarray) -> np.ndarray:
    if config.num_inputs is not None and config.num_inputs < len(correct):
        rng = np.random.default_rng(group_seed(config.seed, target_class))
        return np.sort(rng.choice(correct, size=config.num_inputs, replace=False))
    return correct


class _Warm:
    """Whether the first synthesis, which pays one-off costs and is not timed, has run; ``then``
    is called once it has (``run`` starts the clock of its time-left estimate there).
    """

    def __init__(self, then: Callable[[], object] | None = None):
        self.done = False
        self.then = then


def _rows(x, rows: np.ndarray):
    """``x[rows]`` (a copy of those rows only), also for no row."""
    return x[rows] if len(rows) else x[:0]


def _synthesize_group(
    model: nn.Module,
    x_chosen,
    y_class: np.ndarray,
    index_class: np.ndarray,
    target_class: int,
    cells: Sequence[CellSpec],
    seeds: _Seeds,
    *,
    bounds: tuple[float, float],
    config: RunConfig,
    output_kind: str,
    ks: Sequence[int] = (),
    warm: _Warm | None = None,
    on_batch: Callable[[int], object] | None = None,
) -> GroupResult:
    """Selection, synthesis and evaluation of every cell of a class, batch by batch.

    Each batch of originals is synthesized and at once evaluated: the synthesis's first
    forward pass gives the originals' neuron values, the spectrum pass their predictions
    (the class, as they were chosen correctly classified), and one forward pass per
    synthesized input gives its outputs and neuron values. ``on_batch(n)`` follows the
    progress in inputs. ``x_chosen`` are the class's inputs at ``seeds.chosen``.
    """
    spectrum, chosen = seeds.spectrum, seeds.chosen
    layout = spectrum.layout
    originals = as_tensor(x_chosen).detach().cpu()
    batch = resolve_batch_size(model, originals, config.batch_size, backward=True) if len(originals) else 1
    y_chosen = torch.as_tensor(y_class[chosen]).long().cpu()
    warm = _Warm() if warm is None else warm
    synth = functools.partial(_synthesize_recording, model, step_size=config.step_size,
                              distance=config.distance, bounds=bounds, normalize=config.normalize,
                              iterations=config.iterations, batch_size=batch)
    out = []
    for cell in cells:
        check_k(cell.k, layout.num_neurons)
        seed = group_seed(config.seed, target_class, cell.k, cell.repetition)
        selection = select(spectrum, cell.approach, cell.k, star=config.star, seed=seed)
        if not warm.done and len(originals):  # the first synthesis pays one-off costs: not timed
            synth(originals[:1], selection)
            warm.done = True
            if warm.then is not None:
                warm.then()
        k_primes = [] if get_approach(cell.approach).baseline else k_primes_for(
            cell.k, layout.num_neurons, ks=ks, explicit=config.k_primes)
        top: list[tuple[str, int]] = []
        if selection.ranking is not None and k_primes:
            top = [layout.neuron(int(i)) for i in selection.ranking[: max(k_primes)]]
        else:
            k_primes = []
        pairs = neuron_pairs(selection)
        seconds = 0.0
        new, parts = [], []
        for start in range(0, len(originals), batch):
            x0 = originals[start : start + batch]
            t0 = time.perf_counter()
            x1, before = synth(x0, selection, record=[*pairs, *top])
            seconds += time.perf_counter() - t0
            y0 = y_chosen[start : start + batch]
            predicted = np.full(len(x0), target_class, dtype=np.int64)  # chosen correctly classified
            parts.append(_evaluate_synthesized(model, x0, x1, y0, pairs, top, k_primes,
                                               output_kind=output_kind, batch_size=batch,
                                               before=before, pred_original=predicted))
            new.append(x1)
            if on_batch is not None:
                on_batch(len(x0))
        evaluation = _concat_evaluations(parts, k_primes)
        synthesized = torch.cat(new).numpy() if new else originals.numpy().copy()
        rep = Repetition(cell.repetition, seed, selection, index_class[chosen], evaluation, seconds,
                         synthesized)
        out.append((cell, rep))
    return GroupResult(target_class, spectrum, seeds.num_correct, index_class[chosen], tuple(out))


class _Call(NamedTuple):
    """The model and what the old keyword form gave beside it (:func:`_legacy`)."""

    model: Any
    output_kind: str | None = None
    on_class: Callable[[ClassResult], None] | None = None
    reuse: RunResult | None = None


#: The old keyword form's arguments that are neither config nor runtime fields.
_OLD_KEYWORDS = ("labels", "bounds", "output_kind", "on_class", "reuse")


def _legacy(name: str, fields: set, args: tuple, kwargs: dict) -> tuple[Any, Any, dict, dict]:
    """``run_deepfault(model, data, labels=, bounds=, output_kind=, on_class=, reuse=)``: labels
    and bounds go with the data, the rest with the model (each with a :class:`FutureWarning`).
    """
    old = {k: kwargs.pop(k) for k in _OLD_KEYWORDS if k in kwargs}
    model, data, config_kw, runtime_kw = split_arguments(name, fields, args, kwargs)
    if not old:
        return model, data, config_kw, runtime_kw
    warnings.warn(f"{name}(..., {', '.join(f'{k}=' for k in old)}...) is deprecated: give labels and bounds "
                  "with the data (an (inputs, labels) pair, a Dataset), the output kind with a prepared "
                  "model (prepare_model)", FutureWarning, stacklevel=3)
    if "labels" in old or "bounds" in old:
        bounds = old.get("bounds")
        if bounds is None and isinstance(model, PreparedModel) and not isinstance(data, Dataset):
            bounds = model.bounds
        data = as_dataset(_default_data(model, data), old.get("labels"), bounds=bounds, what="data")
    return (_Call(model, old.get("output_kind"), old.get("on_class"), old.get("reuse")), data, config_kw,
            runtime_kw)


def _default_data(model, data):
    """``data``, or the prepared model's data set when none is given."""
    if data is None:
        data = model.data if isinstance(model, PreparedModel) else None
        if data is None:
            raise DeepFaultError("run_deepfault needs a data set: pass data=..., or a model prepared "
                                 "with one")
    return data


@entry(RunConfig, legacy=_legacy)
def run_deepfault(
    model: nn.Module | PreparedModel,
    data: InputData | Dataset | None,
    config: RunConfig,
    *,
    runtime: Runtime,
) -> RunResult:
    """Run DeepFault on ``data``'s test split for the classes in ``config``.

    One forward pass per test input gives every class's spectrum and the predictions (the
    test accuracy, and the correctly classified inputs synthesis starts from). Then for
    each class, ``config.repeat`` repetitions of ``config.measure`` at ``config.k``: the
    selection, and the synthesis and evaluation of the new inputs, batch by batch
    (docs/deepfault.md, "Passes per input"). A class with no failing input is not an
    error: its result says ``no_failures``. Then, as ``config`` asks, the surprise adequacy
    of the new inputs (``config.surprise``) and the random baseline (``config.baseline``).

    Args:
        model: A :class:`~deepfault.models.prepare.PreparedModel` (its data set, bounds,
            output kind and name are used), or a module taking ``data``'s inputs (its
            outputs are logits).
        data: The test inputs: a deepfault :class:`~deepfault.data.Dataset` (its test split
            and bounds), or a tensor, array, ``(inputs, labels)`` pair, torch ``Dataset`` or
            ``DataLoader`` (:func:`~deepfault.data.as_dataset`; bounds inferred, and a prepared
            model's when inside its range, else refused: :mod:`deepfault.data.bounds`); ``None``: the
            prepared model's data set. Read whole into memory.
        config: What to run (:class:`~.config.RunConfig`; default ``RunConfig()``).
        runtime: Device, threads, batch size (wins over ``config.batch_size`` unless
            ``"auto"``) and progress (a bar or logged lines with the time left; a string names
            the run) of the call (:class:`~deepfault.Runtime`).

    Returns:
        A :class:`RunResult`: ``summary()`` is what ``deepfault run`` prints, ``payload()`` its
        result file's body, ``outputs()`` the synthesized inputs (``.npz``) and their image grid.

    Raises:
        DeepFaultError: Any invalid setting, a class outside the model's classes, ``k``
            larger than the number of neurons, data the model cannot take.

    Examples:
        >>> result = run_deepfault(model, (x, y), RunConfig(k=3, classes=(0,)))  # doctest: +SKIP
        >>> print(result.summary())  # doctest: +SKIP
    """
    call = model if isinstance(model, _Call) else _Call(model)
    prepared = call.model
    data = _run_data(prepared, data)
    module, output_kind = resolve_model(prepared, call.output_kind)
    config.validate(data.bounds)
    classes = _checked_classes(config, data)
    _check_neurons(module, data, config, call.reuse)
    config, batch_line = _batch(module, data, config, runtime)
    fit, no_fit = _surprise_state(module, data, config, runtime)
    start = time.perf_counter()
    with torch.random.fork_rng(devices=[]):  # the global RNG left as it was
        result = _run(module, data, config, classes, output_kind,
                      progress=runtime.progress, on_class=call.on_class, reuse=call.reuse, runtime=runtime)
    shown = _Shown.of(prepared, module, data, config, runtime, batch_line, time.perf_counter() - start)
    result = _scored(module, data, result, fit)
    shown = replace(shown, surprise=fit, no_surprise=no_fit)
    return replace(result, shown=_baseline(module, data, result, shown, runtime)).spread_over(result.spread)


def _run_data(prepared, data) -> Dataset:
    """``data`` as a deepfault data set (``None``: the prepared model's; a prepared model's
    bounds go with data given in another form).
    """
    data = as_dataset(_default_data(prepared, data), what="data")
    if isinstance(prepared, PreparedModel):
        return in_model_range(data, prepared.bounds, what=f"model {prepared.name!r}")
    return data


def _checked_classes(config: RunConfig, data: Dataset) -> list[int]:
    """The classes to analyse: ``config.classes`` (each checked against ``data``), else all."""
    y = data.y_test
    classes = list(range(data.num_classes)) if config.classes is None else list(config.classes)
    for c in classes:
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or not 0 <= c < data.num_classes:
            raise DeepFaultError(
                f"class {c!r} is outside the {data.num_classes} classes of {data.name!r} "
                f"(0..{data.num_classes - 1})"
            )
        if not np.any(y == c):
            raise DeepFaultError(f"data set {data.name!r} has no test input of class {c}")
    return classes


def _check_neurons(module: nn.Module, data: Dataset, config: RunConfig, reuse: RunResult | None) -> None:
    """Refuse ``k`` (and an explicit ``k'``) larger than the selected neurons before any work:
    one test input's forward pass gives the layout the spectrum pass would find (a reused run's
    spectra already hold it).
    """
    if reuse is not None and reuse.classes:
        num_neurons = reuse.classes[0].spectrum.layout.num_neurons
    else:
        from ..core.batches import activations

        layout, _ = activations(module, data.x_test[:1], layers=config.layers, batch_size=1, threads=None)
        num_neurons = layout.num_neurons
    check_k(config.k, num_neurons)
    if config.k_primes is not None:
        k_primes_for(config.k, num_neurons, explicit=config.k_primes)


def _batch(module: nn.Module, data: Dataset, config: RunConfig, runtime: Runtime) -> tuple[RunConfig, str]:
    """``config`` with the batch every pass takes (the runtime's unless ``"auto"``, else the config's;
    ``"auto"`` sized once for synthesis's forward and backward passes) and the line saying so.
    """
    from ..core.memory import choose_batch_size

    wanted = runtime.batch_size if runtime.batch_size != "auto" else config.batch_size
    choice = choose_batch_size(module, data.x_test, wanted, backward=True)
    return replace(config, batch_size=choice.size), choice.describe() if choice.auto else ""


def _run(module: nn.Module, data: Dataset, config: RunConfig, classes: list[int], output_kind: str, *,
         progress, on_class=None, reuse: RunResult | None = None,
         runtime: Runtime | None = None) -> RunResult:
    """The run itself (spectra, selection, synthesis, evaluation) on checked arguments; the spectrum
    pass spreads over ``runtime.parallel``'s workers when it names several.
    """
    leaves = [m for m in module.modules() if not list(m.children())]
    if output_kind == "logits" and leaves and isinstance(leaves[-1], (nn.Softmax, nn.LogSoftmax)):
        warnings.warn("the model ends in a softmax but output_kind='logits'; pass "
                      "output_kind='probabilities' so that losses are computed on probabilities",
                      stacklevel=4)
    name = f"{progress}: " if isinstance(progress, str) else ""
    spread = None
    if reuse is not None:
        seeds, accuracy = _reused(reuse, config, classes, data.y_test)
    elif runtime is not None and runtime.parallel.spread:
        seeds, accuracy, spread = _spread_spectrum_pass(module, data, classes, config, runtime)
    else:
        seeds, accuracy = _spectrum_pass(module, data, classes, config, progress=bool(progress), name=name)
    cells = [CellSpec(config.measure, config.k, r) for r in range(config.repeat)]
    total = sum(len(s.chosen) for s in seeds.values()) * len(cells)
    bars: list = []  # the synthesis bar, started after the warm-up so that its estimate leaves it out

    def start() -> None:
        bars.append(progress_bar(total, desc=f"{name}synthesis", unit="input", leave=False, first_line=True))

    def advance(n: int) -> None:
        for bar in bars:
            bar.update(n)
    warm = _Warm(then=start if progress else None)
    try:
        results = [_run_class(module, data, c, cells, seeds[c], config, output_kind, warm, advance, on_class)
                   for c in classes]
    finally:
        for bar in bars:
            bar.close()
    return RunResult(config, tuple(results), accuracy, output_kind).spread_over(spread)


def _run_class(module, data, c, cells, seeds, config, output_kind, warm, advance, on_class) -> ClassResult:
    x, y = data.x_test, data.y_test
    in_class = np.flatnonzero(y == c)
    # only the chosen inputs are copied, not the class's (4 bytes per input element)
    group = _synthesize_group(module, _rows(x, in_class[seeds.chosen]), y[in_class], in_class, c, cells,
                              seeds, bounds=data.bounds, config=config, output_kind=output_kind, warm=warm,
                              on_batch=advance)
    result = ClassResult(c, group.spectrum, group.num_correct, tuple(rep for _, rep in group.cells))
    if on_class is not None:
        on_class(result)
    return result


def _surprise_state(module: nn.Module, data: Dataset, config: RunConfig, runtime: Runtime):
    """``(state, None)`` that ``config.surprise`` names (fitted before the run, so that a file of
    another model is refused before any work), ``(None, why)`` where none can be fitted, or
    ``(None, None)`` when it asks for none.
    """
    if config.surprise is None:
        return None, None
    from ..coverage.surprise_cache import surprise_state

    return surprise_state(module, data.x_train, None if config.surprise == "auto" else config.surprise,
                          progress=bool(runtime.progress))


def _scored(module: nn.Module, data: Dataset, result: RunResult, fit) -> RunResult:
    """``result`` with the surprise adequacy of every synthesized input and its original
    (:func:`add_surprise`) against the state ``fit`` (``None``: as it is).
    """
    if fit is None:
        return result
    from ..coverage.surprise_cache import GENERATED_KINDS, SurpriseScorer

    scorer = SurpriseScorer(module, fit.surprise, kinds=GENERATED_KINDS, batch_size=result.config.batch_size)
    return add_surprise(result, data.x_test, scorer)


def _baseline(module: nn.Module, data: Dataset, result: RunResult, shown: _Shown, runtime: Runtime) -> _Shown:
    """``config.baseline``: the same run from random neurons on the run's spectra and chosen inputs
    (``reuse``), which the run's page compares with; none for a baseline measure.
    """
    config = result.config
    if not config.baseline or get_approach(config.measure).baseline:
        return shown
    progress_log.info("the random baseline (the same run from random neurons), up to about %.0f s more "
                      "(the run took %.1f s)", shown.seconds, shown.seconds)
    start = time.perf_counter()
    with torch.random.fork_rng(devices=[]):
        baseline = _run(module, data, replace(config, measure="random", k_primes=None, baseline=False),
                        [c.target_class for c in result.classes], result.output_kind,
                        progress="baseline" if runtime.progress else False, reuse=result)
    return replace(shown, baseline=baseline, baseline_seconds=time.perf_counter() - start)


def _spectrum_pass(model: nn.Module, data: Dataset, classes: list[int], config: RunConfig, *, progress: bool,
                   name: str) -> tuple[dict[int, _Seeds], float]:
    """Every class's spectrum and the predictions of every test input, in one forward pass each."""
    x, y = data.x_test, data.y_test
    bar = progress_bar(len(y), desc=f"{name}spectrum", unit="input", leave=False,
                       first_line=True) if progress else None

    def seen(b) -> None:
        if b.outputs.shape[1] < data.num_classes:
            raise DeepFaultError(
                f"the model has {b.outputs.shape[1]} outputs but data set {data.name!r} has "
                f"{data.num_classes} classes; use a model trained on this data set"
            )
        if bar is not None:
            bar.update(len(b.outputs))
    profiled = data.x_train if data.x_train is not None and len(data.x_train) else x
    rule = _activity(model, profiled, config)
    try:
        spectra, predicted = _spectra_and_predictions(model, x, y, classes, layers=config.layers,
                                                     threshold=rule, batch_size=config.batch_size,
                                                     on_batch=seen)
    finally:
        if bar is not None:
            bar.close()
    return _seeds_of(spectra, predicted, y, classes, config), float((predicted == y).mean())


def _spread_spectrum_pass(model: nn.Module, data: Dataset, classes: list[int], config: RunConfig,
                          runtime: Runtime):
    """:func:`_spectrum_pass` over the shards of ``runtime.parallel``'s workers: the same seeds and
    accuracy (the counts are integers, summed exactly), and the :class:`~deepfault.core.shards.Spread`.
    """
    from .spectrum import spread_spectra_and_predictions

    x, y = data.x_test, data.y_test
    profiled = data.x_train if data.x_train is not None and len(data.x_train) else x
    rule = _activity(model, profiled, config)
    spectra, predicted, outputs, spread = spread_spectra_and_predictions(
        model, x, y, classes, layers=config.layers, threshold=rule,
        runtime=runtime.with_(batch_size=config.batch_size))
    if outputs < data.num_classes:
        raise DeepFaultError(f"the model has {outputs} outputs but data set {data.name!r} has "
                             f"{data.num_classes} classes; use a model trained on this data set")
    return _seeds_of(spectra, predicted, y, classes, config), float((predicted == y).mean()), spread


def _seeds_of(spectra, predicted: np.ndarray, y: np.ndarray, classes: list[int], config: RunConfig
              ) -> dict[int, _Seeds]:
    """Each class's spectrum with its correctly predicted inputs and the ones chosen of them."""
    seeds = {}
    for c in classes:
        in_class = np.flatnonzero(y == c)
        correct = np.flatnonzero(predicted[in_class] == c)
        seeds[c] = _Seeds(spectra[c], len(correct), _chosen(config, c, correct))
    return seeds


def _activity(model: nn.Module, profiled, config: RunConfig) -> float | ActivityLevels:
    """What decides a neuron's activity under ``config.activity``: the threshold, or each neuron's
    level profiled on ``profiled`` (a run's training split) where a layer takes it.
    """
    levels = activity_levels(model, profiled, activity=config.activity, threshold=config.threshold,
                             layers=config.layers, batch_size=config.batch_size)
    return config.threshold if levels is None else levels


#: The settings that decide a run's spectra and chosen inputs (what ``reuse`` takes).
_SPECTRUM_FIELDS = ("layers", "threshold", "activity", "classes", "seed", "num_inputs")


def _reused(reuse: RunResult, config: RunConfig, classes: list[int], y: np.ndarray
            ) -> tuple[dict[int, _Seeds], float]:
    """The spectra and chosen inputs of an earlier run with the same spectrum settings."""
    for f in _SPECTRUM_FIELDS:
        if getattr(reuse.config, f) != getattr(config, f):
            raise DeepFaultError(
                f"reuse: the earlier run has {f}={getattr(reuse.config, f)!r}, this one "
                f"{getattr(config, f)!r}; only a run with the same spectrum settings can be reused "
                "(or pass reuse=None)")
    done = {cr.target_class: cr for cr in reuse.classes}
    seeds = {}
    for c in classes:
        cr = done.get(c)
        if cr is None or not cr.repetitions:
            raise DeepFaultError(f"reuse: the earlier run has no result for class {c}; pass reuse=None")
        in_class = np.flatnonzero(y == c)
        chosen = np.searchsorted(in_class, cr.repetitions[0].input_indices)
        if cr.spectrum.num_inputs != len(in_class) or not np.array_equal(in_class[chosen],
                                                                         cr.repetitions[0].input_indices):
            raise DeepFaultError("reuse: the earlier run was made on other data; pass reuse=None")
        seeds[c] = _Seeds(cr.spectrum, cr.num_correct, chosen)
    return seeds, reuse.test_accuracy


def add_surprise(result: RunResult, test_inputs, score: Callable[[np.ndarray], Mapping[str, np.ndarray]]
                 ) -> RunResult:
    """``result`` with the surprise adequacy of every synthesized input and of its original
    filled into each evaluation (:attr:`Evaluation.surprise`, ``surprise_original``).

    Nothing else changes: the scores are computed after the run, from the inputs it made.

    Args:
        result: A finished run.
        test_inputs: The test split the run synthesized from (``input_indices`` index it).
        score: ``score(inputs) -> {kind: (N,) scores}``, e.g. a
            :class:`~deepfault.coverage.surprise_cache.SurpriseScorer` of the run's model.

    Returns:
        A new :class:`RunResult`.
    """
    reps = [rep for cr in result.classes for rep in cr.repetitions]
    sizes = [len(rep.input_indices) for rep in reps]
    if not sum(sizes):
        return result
    bounds = np.cumsum([0, *sizes])
    new = score(np.concatenate([rep.synthesized for rep in reps]))
    old = score(np.asarray(test_inputs)[np.concatenate([np.asarray(rep.input_indices) for rep in reps])])

    def part(scores, i):
        return {k: np.asarray(v, dtype=np.float64)[bounds[i] : bounds[i + 1]] for k, v in scores.items()}

    done = {id(rep): replace(rep, evaluation=replace(rep.evaluation, surprise=part(new, i),
                                                     surprise_original=part(old, i)))
            for i, rep in enumerate(reps)}
    classes = tuple(replace(cr, repetitions=tuple(done[id(r)] for r in cr.repetitions))
                    for cr in result.classes)
    return replace(result, classes=classes)
