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

import numpy as np
from torch import nn

from ..core.batches import predict
from ..core.entry import applies_threads
from ..core.inputs import InputData, LabelData
from ..core.progress import progress_bar
from ..core.summary import Summarised
from ..data import Dataset
from ..data.dataset import as_dataset
from ..errors import DeepFaultError
from ..models.prepare import PreparedModel, resolve_model
from .config import RunConfig
from .evaluation import Evaluation, evaluate
from .selection import Selection, check_k, get_approach, select
from .spectrum import Spectrum, compute_spectrum
from .synthesis import synthesize

__all__ = ["RunConfig", "Repetition", "ClassResult", "RunResult", "CellSpec", "GroupResult", "run_group",
           "run_deepfault", "group_seed", "k_primes_for", "add_surprise"]


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
class RunResult(Summarised):
    """One DeepFault run: its configuration, test accuracy and per-class results.

    Prints one line; :meth:`summary` gives the suspicious neurons of each class with their
    scores and how many synthesized inputs change the prediction; :meth:`to_dict` is the
    result file's body; :meth:`rows` / :meth:`to_frame` one row per class and repetition.
    """

    config: RunConfig
    classes: tuple[ClassResult, ...]
    test_accuracy: float
    output_kind: str

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
        scores and the synthesized inputs that change the prediction.
        """
        lines = [f"DeepFault run: {self.headline()}"]
        for c in self.classes:
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


def run_group(
    model: nn.Module,
    inputs,
    labels,
    target_class: int,
    cells: Sequence[CellSpec],
    *,
    bounds: tuple[float, float],
    config: RunConfig,
    output_kind: str = "logits",
    ks: Sequence[int] = (),
    indices: np.ndarray | None = None,
) -> GroupResult:
    """The DeepFault protocol for one model and class; ``run`` and ``experiment`` both call it.

    1. The spectrum of the class's inputs (only inputs labelled ``target_class`` are run).
    2. The inputs to synthesize from: every correctly classified one, or
       ``config.num_inputs`` of them drawn without replacement with the seed
       ``(config.seed, class)``; all cells of the group share them.
    3. For each cell: ``k`` neurons chosen by the approach (baselines seeded with
       ``(config.seed, class, k, repetition)``), synthesis (timed after one warm-up
       step), and the evaluation of the new inputs, including the top-``k'`` increase for
       :func:`k_primes_for`.

    Args:
        model: The classifier (on its device).
        inputs: The test inputs (only those labelled ``target_class`` are used).
        labels: Their labels.
        target_class: The class.
        cells: The approaches, ``k`` and repetitions to compute.
        bounds: The data set's value range.
        config: Synthesis and evaluation settings (``approach``/``k``/``classes`` unused).
        output_kind: ``"logits"`` or ``"probabilities"``.
        ks: The grid's ``k`` values (for the default ``k'``).
        indices: The inputs' indices in the whole test split (default ``0..N-1``).

    Returns:
        A :class:`GroupResult`.
    """
    y = np.asarray(labels)
    index = np.arange(len(y)) if indices is None else np.asarray(indices)
    in_class = np.flatnonzero(y == target_class)
    if not len(in_class):
        raise DeepFaultError(f"no test input of class {target_class}")
    x_class = inputs[in_class]
    spectrum = compute_spectrum(model, x_class, y[in_class], target_class=target_class,
                                layers=config.layers, threshold=config.threshold,
                                batch_size=config.batch_size)
    layout = spectrum.layout
    predicted = predict(model, x_class, batch_size=config.batch_size).argmax(1).numpy()
    correct = np.flatnonzero(predicted == target_class)
    if config.num_inputs is not None and config.num_inputs < len(correct):
        rng = np.random.default_rng(group_seed(config.seed, target_class))
        correct_chosen = np.sort(rng.choice(correct, size=config.num_inputs, replace=False))
    else:
        correct_chosen = correct
    originals = x_class[correct_chosen]
    y_chosen = y[in_class][correct_chosen]
    synth = functools.partial(synthesize, model, step_size=config.step_size, distance=config.distance,
                              bounds=bounds, normalize=config.normalize, iterations=config.iterations,
                              batch_size=config.batch_size)
    out = []
    warmed = False
    for cell in cells:
        check_k(cell.k, layout.num_neurons)
        seed = group_seed(config.seed, target_class, cell.k, cell.repetition)
        selection = select(spectrum, cell.approach, cell.k, star=config.star, seed=seed)
        if not warmed and len(originals):  # the first synthesis pays one-off costs: not timed
            synth(originals[:1], selection)
            warmed = True
        start = time.perf_counter()
        new = synth(originals, selection)
        seconds = time.perf_counter() - start
        k_primes = [] if get_approach(cell.approach).baseline else k_primes_for(
            cell.k, layout.num_neurons, ks=ks, explicit=config.k_primes)
        ranking = None
        if selection.ranking is not None and k_primes:
            ranking = [layout.neuron(int(i)) for i in selection.ranking[: max(k_primes)]]
        evaluation = evaluate(model, originals, new, y_chosen, selection, ranking=ranking,
                              k_primes=k_primes if ranking else (), output_kind=output_kind,
                              batch_size=config.batch_size)
        rep = Repetition(cell.repetition, seed, selection, index[in_class][correct_chosen], evaluation,
                         seconds, new.numpy())
        out.append((cell, rep))
    return GroupResult(target_class, spectrum, len(correct), index[in_class][correct_chosen], tuple(out))


@applies_threads
def run_deepfault(
    model: nn.Module | PreparedModel,
    data: InputData | Dataset | None = None,
    config: RunConfig = RunConfig(),
    *,
    labels: LabelData | None = None,
    bounds: Sequence[float] | None = None,
    output_kind: str | None = None,
    on_class: Callable[[ClassResult], None] | None = None,
    threads: int | str | None = "auto",
    progress: bool = False,
) -> RunResult:
    """Run DeepFault on ``data``'s test split for the classes in ``config``.

    For each class, :func:`run_group` with ``config.repeat`` repetitions of
    ``config.approach`` at ``config.k``. A class with no failing input is not an error:
    its result says ``no_failures``.

    Args:
        model: A :class:`~deepfault.models.prepare.PreparedModel` (its data set and output
            kind are used unless given), or a module taking ``data``'s inputs.
        data: The test inputs: a deepfault :class:`~deepfault.data.Dataset` (its test
            split), or a tensor, array, ``(inputs, labels)`` pair, torch ``Dataset`` or
            ``DataLoader`` (:func:`~deepfault.data.as_dataset`; default: the prepared
            model's data set). Read whole into memory: synthesis starts from the inputs of
            each class, drawn from all of them.
        config: What to run.
        labels: The inputs' labels, when ``data`` does not carry them (they win when it does).
        bounds: ``(lo, hi)``, the valid input range synthesis clips to, when ``data`` is not a
            deepfault ``Dataset`` (default: a prepared model's, else ``(0, 1)`` for inputs
            inside it, else the inputs' own range: :func:`~deepfault.core.inputs.default_bounds`).
        output_kind: ``"logits"`` or ``"probabilities"`` (default: the prepared model's, else
            ``"logits"``).
        on_class: Called with each class's result as soon as it is done.
        threads: PyTorch CPU threads for the call, restored afterwards: ``"auto"`` (the
            command line's rule: the free cores for a small model on the CPU; the
            ``DEEPFAULT_THREADS`` environment variable sets another default), a count, or
            ``None`` (PyTorch's setting).
        progress: Show a progress bar over the classes (as ``deepfault run`` does).

    Raises:
        DeepFaultError: Any invalid setting, a class outside the model's classes, ``k``
            larger than the number of neurons, or data the model cannot take.
    """
    if data is None:
        data = model.data if isinstance(model, PreparedModel) else None
        if data is None:
            raise DeepFaultError("run_deepfault needs a data set: pass data=..., or a model prepared "
                                 "with one")
    if bounds is None and isinstance(model, PreparedModel) and not isinstance(data, Dataset):
        bounds = model.bounds
    data = as_dataset(data, labels, bounds=bounds, what="data")
    model, output_kind = resolve_model(model, output_kind)
    config.validate(data.bounds)
    leaves = [m for m in model.modules() if not list(m.children())]
    if output_kind == "logits" and leaves and isinstance(leaves[-1], (nn.Softmax, nn.LogSoftmax)):
        warnings.warn("the model ends in a softmax but output_kind='logits'; pass "
                      "output_kind='probabilities' so that losses are computed on probabilities",
                      stacklevel=2)
    x, y = data.x_test, data.y_test
    outputs = predict(model, x, batch_size=config.batch_size)
    num_outputs = outputs.shape[1]
    if num_outputs < data.num_classes:
        raise DeepFaultError(
            f"the model has {num_outputs} outputs but data set {data.name!r} has "
            f"{data.num_classes} classes; use a model trained on this data set"
        )
    classes = list(range(data.num_classes)) if config.classes is None else list(config.classes)
    for c in classes:
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or not 0 <= c < data.num_classes:
            raise DeepFaultError(
                f"class {c!r} is outside the {data.num_classes} classes of {data.name!r} "
                f"(0..{data.num_classes - 1})"
            )
        if not np.any(y == c):
            raise DeepFaultError(f"data set {data.name!r} has no test input of class {c}")
    predicted = outputs.argmax(1).numpy()
    cells = [CellSpec(config.measure, config.k, r) for r in range(config.repeat)]
    results = []
    bar = progress_bar(len(classes), desc="run", unit="class", leave=False) if progress else None
    try:
        for c in classes:
            group = run_group(model, x, y, c, cells, bounds=data.bounds, config=config,
                              output_kind=output_kind)
            result = ClassResult(c, group.spectrum, group.num_correct, tuple(rep for _, rep in group.cells))
            if on_class is not None:
                on_class(result)
            if bar is not None:
                bar.update(1)
            results.append(result)
    finally:
        if bar is not None:
            bar.close()
    accuracy = float((predicted == y).mean())
    return RunResult(config, tuple(results), accuracy, output_kind)


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
