"""DeepFault's run configuration: :class:`RunConfig`, everything that determines a run's result."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from ..checks import MAX_REPEAT, MAX_SEED, check_int
from ..core.entry import renamed_fields
from ..core.memory import check_batch_size
from ..core.registry import unknown_name
from ..errors import DeepFaultError
from .measures import check_star
from .selection import get_approach, list_approaches
from .spectrum import check_threshold
from .synthesis import check_synthesis_args

if TYPE_CHECKING:
    from ..data import Dataset

__all__ = ["RunConfig"]

#: Result files' keys of the fields renamed after the CLI's options.
_FILE_KEYS = {"measure": "approach", "step_size": "step"}


@renamed_fields(approach="measure", step="step_size")
@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a run's result (recorded in every result file).

    The fields take the names of ``deepfault run``'s options (``measure`` is
    ``--measure``, ``step_size`` is ``--step-size``); the old names ``approach=`` and
    ``step=`` still work with a ``FutureWarning``, and result files keep them as keys.

    Attributes:
        measure: A measure name, ``"random"`` (the paper's baseline) or ``"uniform"``
            (``--measure``; formerly ``approach``).
        k: Number of suspicious neurons.
        classes: Classes to analyse; ``None`` means every class of the data set.
        step_size, distance: Synthesis step size (``--step-size``; formerly ``step``) and
            L_inf bound.
        star: The D* exponent.
        seed: Seed of every random choice (input sampling, random baselines).
        repeat: Repetitions of the baselines' random draws of neurons (all repetitions
            synthesize from the same inputs, as in the paper's protocol; a measure gives
            the same result in every repetition).
        layers: Module names to analyse; ``None`` = the default
            (:func:`~deepfault.core.capture.default_layers`: the residual/transformer blocks'
            outputs, else every Linear/Conv but the logits layer).
        threshold: Activity threshold of the spectrum.
        iterations: Synthesis steps per input.
        normalize: RMS-normalise each neuron's gradient (the paper's results).
        num_inputs: Correctly classified inputs per class to synthesize from, drawn
            without replacement; ``None`` uses all of them.
        k_primes: ``k' >= k`` for the share of the top ``k'`` neurons that increased;
            ``None`` means ``2k`` and ``5k`` where there are that many neurons
            (:func:`k_primes_for`).
        batch_size: Inputs per forward pass, or ``"auto"`` (the default): sized from the
            memory for each pass's work (forward, or forward and backward in synthesis;
            :mod:`deepfault.core.memory`). Results do not depend on it.
    """

    measure: str = "tarantula"
    k: int = 10
    classes: tuple[int, ...] | None = None
    step_size: float = 1.0
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
    batch_size: int | str = "auto"

    @property
    def approach(self) -> str:
        """The deprecated name of :attr:`measure`."""
        return self.measure

    @property
    def step(self) -> float:
        """The deprecated name of :attr:`step_size`."""
        return self.step_size

    def to_dict(self) -> dict:
        """The fields under the result files' keys (``approach``, ``step``: unchanged, so
        older files, store keys and reports read the same).
        """
        return {_FILE_KEYS.get(k, k): v for k, v in asdict(self).items()}

    def check_classes(self, data: Dataset) -> None:
        """Refuse a class (``--class``) that ``data`` does not have."""
        for c in self.classes or ():
            if not 0 <= c < data.num_classes:
                raise DeepFaultError(f"--class {c} is outside the {data.num_classes} classes of "
                                     f"{data.name!r} (0..{data.num_classes - 1})")

    def validate(self, bounds: Sequence[float]) -> None:
        """Check every argument that needs no model, before any work is done."""
        if self.measure not in list_approaches():
            raise DeepFaultError(unknown_name("measure", self.measure, list_approaches()))
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
            if get_approach(self.measure).baseline:
                raise DeepFaultError(
                    f"k' (--k-prime) ranks neurons by a measure; approach {self.measure!r} is a baseline "
                    "with no ranking, so leave k' out"
                )
            for kp in self.k_primes:
                check_int("k' (--k-prime)", kp)
                if kp < self.k:
                    raise DeepFaultError(f"each k' (--k-prime) must be >= k={self.k}; got {kp}")
        check_synthesis_args(self.step_size, self.distance, bounds, self.iterations, step_name="step_size")
        check_int("repeat", self.repeat, maximum=MAX_REPEAT)
        check_batch_size(self.batch_size)
        if self.num_inputs is not None:
            check_int("num_inputs (None for all)", self.num_inputs)
        check_threshold(self.threshold)
