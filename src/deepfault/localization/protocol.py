"""One DeepFault run: spectra for the chosen classes, selection, synthesis, evaluation.

:func:`run_deepfault` strings the public steps together for a model and a data set; the
command line's ``deepfault run`` is a thin layer over it.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
from torch import nn

from ..core.batches import predict
from ..data import Dataset
from ..errors import MAX_BATCH, MAX_REPEAT, MAX_SEED, DeepFaultError, check_int
from ..models.prepare import PreparedModel, resolve_model
from .evaluation import Evaluation, evaluate
from .measures import check_star
from .selection import Selection, check_k, get_approach, list_approaches, select
from .spectrum import Spectrum, check_threshold, compute_spectrum
from .synthesis import check_synthesis_args, synthesize

__all__ = ["RunConfig", "Repetition", "ClassResult", "RunResult", "CellSpec", "GroupResult", "run_group",
           "run_deepfault", "group_seed", "k_primes_for"]


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a run's result (recorded in every result file).

    Attributes:
        approach: A measure name, ``"random"`` (the paper's baseline) or ``"uniform"``.
        k: Number of suspicious neurons.
        classes: Classes to analyse; ``None`` means every class of the data set.
        step, distance: Synthesis step size and L_inf bound.
        star: The D* exponent.
        seed: Seed of every random choice (input sampling, random baselines).
        repeat: Repetitions of the baselines' random draws of neurons (all repetitions
            synthesize from the same inputs, as in the paper's protocol; a measure gives
            the same result in every repetition).
        layers: Module names to analyse; ``None`` = every Linear/Conv but the logits layer.
        threshold: Activity threshold of the spectrum.
        iterations: Synthesis steps per input.
        normalize: RMS-normalise each neuron's gradient (the paper's results).
        num_inputs: Correctly classified inputs per class to synthesize from, drawn
            without replacement; ``None`` uses all of them.
        k_primes: ``k' >= k`` for the share of the top ``k'`` neurons that increased;
            ``None`` means ``2k`` and ``5k`` where there are that many neurons
            (:func:`k_primes_for`).
        batch_size: Inputs per forward pass.
    """

    approach: str = "tarantula"
    k: int = 10
    classes: tuple[int, ...] | None = None
    step: float = 1.0
    distance: float = 0.1
    star: float = 3.0
    seed: int = 0
    repeat: int = 1
    layers: tuple[str, ...] | None = None
    threshold: float = 0.0
    iterations: int = 1
    normalize: bool = True
    num_inputs: int | None = None
    k_primes: tuple[int, ...] | None = None
    batch_size: int = 1024

    def to_dict(self) -> dict:
        return asdict(self)

    def check_classes(self, data: Dataset) -> None:
        """Refuse a class (``--class``) that ``data`` does not have."""
        for c in self.classes or ():
            if not 0 <= c < data.num_classes:
                raise DeepFaultError(f"--class {c} is outside the {data.num_classes} classes of "
                                     f"{data.name!r} (0..{data.num_classes - 1})")

    def validate(self, bounds: Sequence[float]) -> None:
        """Check every argument that needs no model, before any work is done."""
        if self.approach not in list_approaches():
            raise DeepFaultError(
                f"unknown approach {self.approach!r}; known: {', '.join(list_approaches())}"
            )
        check_int("k (the number of suspicious neurons)", self.k)
        check_int("seed", self.seed, minimum=0, maximum=MAX_SEED)
        check_star(self.star)
        for name in ("classes", "k_primes", "layers"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, (str, bytes)) or not isinstance(value, tuple | list)):
                raise DeepFaultError(f"{name} must be a tuple (or None); got {value!r}")
        if self.classes is not None:
            for c in self.classes:
                check_int("each class", c, minimum=0)
            dupes = sorted({c for c in self.classes if list(self.classes).count(c) > 1})
            if dupes:
                raise DeepFaultError(f"classes must be distinct; {dupes} given more than once")
        if self.k_primes is not None:
            if get_approach(self.approach).baseline:
                raise DeepFaultError(
                    f"k' (--k-prime) ranks neurons by a measure; approach {self.approach!r} is a baseline "
                    "with no ranking, so leave k' out"
                )
            for kp in self.k_primes:
                check_int("k' (--k-prime)", kp)
                if kp < self.k:
                    raise DeepFaultError(f"each k' (--k-prime) must be >= k={self.k}; got {kp}")
        check_synthesis_args(self.step, self.distance, bounds, self.iterations)
        check_int("repeat", self.repeat, maximum=MAX_REPEAT)
        check_int("batch_size", self.batch_size, maximum=MAX_BATCH)
        if self.num_inputs is not None:
            check_int("num_inputs (None for all)", self.num_inputs)
        check_threshold(self.threshold)


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


@dataclass(frozen=True)
class RunResult:
    """One DeepFault run: its configuration, test accuracy and per-class results."""

    config: RunConfig
    classes: tuple[ClassResult, ...]
    test_accuracy: float
    output_kind: str

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
    synth = dict(step=config.step, distance=config.distance, bounds=bounds, normalize=config.normalize,
                 iterations=config.iterations, batch_size=config.batch_size)
    out = []
    warmed = False
    for cell in cells:
        check_k(cell.k, layout.num_neurons)
        seed = group_seed(config.seed, target_class, cell.k, cell.repetition)
        selection = select(spectrum, cell.approach, cell.k, star=config.star, seed=seed)
        if not warmed and len(originals):  # the first synthesis pays one-off costs: not timed
            synthesize(model, originals[:1], selection, **synth)
            warmed = True
        start = time.perf_counter()
        new = synthesize(model, originals, selection, **synth)
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


def run_deepfault(
    model: nn.Module | PreparedModel,
    data: Dataset | None = None,
    config: RunConfig = RunConfig(),
    *,
    output_kind: str | None = None,
    on_class: Callable[[ClassResult], None] | None = None,
) -> RunResult:
    """Run DeepFault on ``data``'s test split for the classes in ``config``.

    For each class, :func:`run_group` with ``config.repeat`` repetitions of
    ``config.approach`` at ``config.k``. A class with no failing input is not an error:
    its result says ``no_failures``.

    Args:
        model: A :class:`~deepfault.models.prepare.PreparedModel` (its data set and output
            kind are used unless given), or a module taking ``data``'s inputs.
        data: The data set (default: the prepared model's).
        config: What to run.
        output_kind: ``"logits"`` or ``"probabilities"`` (default: the prepared model's, else
            ``"logits"``).
        on_class: Called with each class's result as soon as it is done.

    Raises:
        DeepFaultError: Any invalid setting, a class outside the model's classes, ``k``
            larger than the number of neurons, or data the model cannot take.
    """
    if data is None:
        data = model.data if isinstance(model, PreparedModel) else None
        if data is None:
            raise DeepFaultError("run_deepfault needs a data set: pass data=..., or a model prepared "
                                 "with one")
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
    cells = [CellSpec(config.approach, config.k, r) for r in range(config.repeat)]
    results = []
    for c in classes:
        group = run_group(model, x, y, c, cells, bounds=data.bounds, config=config, output_kind=output_kind)
        result = ClassResult(c, group.spectrum, group.num_correct, tuple(rep for _, rep in group.cells))
        if on_class is not None:
            on_class(result)
        results.append(result)
    accuracy = float((predicted == y).mean())
    return RunResult(config, tuple(results), accuracy, output_kind)
