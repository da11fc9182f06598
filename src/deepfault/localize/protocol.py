"""One DeepFault run: spectra for the chosen classes, selection, synthesis, evaluation.

:func:`run_deepfault` strings the public steps together for a model and a data set; the
command line's ``deepfault run`` is a thin layer over it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
from torch import nn

from ..core.batches import predict
from ..data import Dataset
from ..errors import DeepFaultError, check_int
from ..generate.ascent import check_synthesis_args, synthesize
from .evaluation import OUTPUT_KINDS, Evaluation, evaluate
from .measures import check_star
from .selection import BASELINES, Selection, check_k, list_approaches, select
from .spectrum import Spectrum, compute_class_spectra

__all__ = ["RunConfig", "Repetition", "ClassResult", "RunResult", "run_deepfault"]


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
        repeat: Repetitions; each draws its own inputs (when ``num_inputs`` is set) and,
            for the baselines, its own neurons.
        layers: Module names to analyse; ``None`` = every Linear/Conv but the logits layer.
        threshold: Activity threshold of the spectrum.
        iterations: Synthesis steps per input.
        normalize: RMS-normalise each neuron's gradient (the paper's results).
        num_inputs: Correctly classified inputs per class to synthesize from, drawn
            without replacement; ``None`` uses all of them.
        k_primes: ``k' >= k`` for the share of the top ``k'`` neurons that increased;
            ``None`` means ``2k`` and ``5k`` where there are that many neurons.
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

    def validate(self, bounds: Sequence[float]) -> None:
        """Check every argument that needs no model, before any work is done."""
        if self.approach not in list_approaches():
            raise DeepFaultError(
                f"unknown approach {self.approach!r}; known: {', '.join(list_approaches())}"
            )
        check_int("k (the number of suspicious neurons)", self.k)
        check_star(self.star)
        check_synthesis_args(self.step, self.distance, bounds, self.iterations)
        for name in ("repeat", "batch_size"):
            check_int(name, getattr(self, name))
        if self.num_inputs is not None and self.num_inputs < 1:
            raise DeepFaultError(f"num_inputs must be >= 1 (or None for all); got {self.num_inputs!r}")
        if not np.isfinite(self.threshold):
            raise DeepFaultError(f"threshold must be a finite number; got {self.threshold!r}")


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


def _k_primes(config: RunConfig, num_neurons: int) -> list[int]:
    if config.approach in BASELINES:
        return []
    if config.k_primes is not None:
        return sorted(set(config.k_primes))
    return sorted({kp for kp in (2 * config.k, 5 * config.k) if kp <= num_neurons})


def run_deepfault(
    model: nn.Module,
    data: Dataset,
    config: RunConfig = RunConfig(),
    *,
    output_kind: str = "logits",
    on_class: Callable[[ClassResult], None] | None = None,
) -> RunResult:
    """Run DeepFault on ``data``'s test split for the classes in ``config``.

    For each class: the spectrum of that class's test inputs, the ``k`` neurons chosen by
    ``config.approach``, new inputs synthesized from correctly classified inputs of the
    class, and their evaluation (labels are the originals'). A class with no failing
    input is not an error: its result says ``no_failures``.

    Raises:
        DeepFaultError: Any invalid setting, a class outside the model's classes, ``k``
            larger than the number of neurons, or data the model cannot take.
    """
    config.validate(data.bounds)
    if output_kind not in OUTPUT_KINDS:
        raise DeepFaultError(f"output_kind must be one of {', '.join(OUTPUT_KINDS)}; got {output_kind!r}")
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
        if not 0 <= c < data.num_classes:
            raise DeepFaultError(
                f"class {c} is outside the {data.num_classes} classes of {data.name!r} "
                f"(0..{data.num_classes - 1})"
            )
        if not np.any(y == c):
            raise DeepFaultError(f"data set {data.name!r} has no test input of class {c}")
    predicted = outputs.argmax(1).numpy()
    spectra = compute_class_spectra(
        model, x, y, classes, layers=config.layers, threshold=config.threshold,
        batch_size=config.batch_size,
    )
    layout = next(iter(spectra.values())).layout
    check_k(config.k, layout.num_neurons)
    k_primes = _k_primes(config, layout.num_neurons)
    results = []
    for c in classes:
        spectrum = spectra[c]
        correct = np.flatnonzero((y == c) & (predicted == c))
        reps = []
        for r in range(config.repeat):
            seed = int(np.random.SeedSequence([config.seed, c, r]).generate_state(1)[0])
            rng = np.random.default_rng(seed)
            chosen = correct
            if config.num_inputs is not None and config.num_inputs < len(correct):
                chosen = np.sort(rng.choice(correct, size=config.num_inputs, replace=False))
            selection = select(spectrum, config.approach, config.k, star=config.star, seed=seed)
            originals = x[chosen]
            start = time.perf_counter()
            new = synthesize(
                model, originals, selection, step=config.step, distance=config.distance,
                bounds=data.bounds, normalize=config.normalize, iterations=config.iterations,
                batch_size=config.batch_size,
            )
            seconds = time.perf_counter() - start
            ranking = None
            if selection.ranking is not None and k_primes:
                ranking = [layout.neuron(int(i)) for i in selection.ranking[: max(k_primes)]]
            evaluation = evaluate(
                model, originals, new, y[chosen], selection, ranking=ranking,
                k_primes=k_primes if ranking else (), output_kind=output_kind,
                batch_size=config.batch_size,
            )
            reps.append(Repetition(r, seed, selection, chosen, evaluation, seconds, new.numpy()))
        result = ClassResult(c, spectrum, len(correct), tuple(reps))
        if on_class is not None:
            on_class(result)
        results.append(result)
    accuracy = float((predicted == y).mean())
    return RunResult(config, tuple(results), accuracy, output_kind)
