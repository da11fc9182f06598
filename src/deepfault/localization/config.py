"""DeepFault's run configuration: :class:`RunConfig`, everything that determines a run's result."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from ..checks import MAX_CLASSES, MAX_GRADIENT_ITERATIONS, MAX_INPUTS, MAX_REPEAT, MAX_SEED
from ..core.constraints import Each, FilePath, Flag, Interval, Options, Text, param, validate
from ..core.entry import renamed_fields
from ..errors import DeepFaultError
from . import _settings
from .activity import ACTIVITY_RULES
from .selection import get_approach, list_approaches
from .synthesis import FLOAT32_MAX, check_synthesis_args

if TYPE_CHECKING:
    from ..data import Dataset

__all__ = ["RunConfig"]

#: Result files' keys of the fields renamed after the CLI's options.
_FILE_KEYS = {"measure": "approach", "step_size": "step"}
#: What the entry adds after the run, not what it finds: left out of :meth:`RunConfig.to_dict`, so
#: result files and store keys stay as they were (a result records its surprise state itself).
_NOT_RECORDED = ("surprise", "baseline")
#: What ``surprise`` scores.
SURPRISE_WHAT = ("DSA and LSA of every generated input against the training data (at the layer before the "
                 "logits), beside its L1/L_inf distance")


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
        threshold: Activity threshold of the spectrum (the paper's rule; 0 by default).
        activity: When a neuron is active (``--activity``): ``"auto"`` (the default) takes the
            paper's rule (value above ``threshold``) on Linear/Conv outputs and other dense
            neurons, and each neuron's own level (its median on a fixed sample of the training
            split) on block outputs, channel means after an activation and tokens, where a value
            above 0 carries no information; ``"zero"`` takes the threshold everywhere,
            ``"quantile"`` the level everywhere (:mod:`~.activity`).
        iterations: Synthesis steps per input.
        normalize: RMS-normalise each neuron's gradient (the paper's results).
        num_inputs: Correctly classified inputs per class to synthesize from, drawn
            without replacement; ``None`` uses all of them.
        k_primes: ``k' >= k`` for the share of the top ``k'`` neurons that increased;
            ``None`` means ``2k`` and ``5k`` where there are that many neurons
            (:func:`k_primes_for`).
        batch_size: Inputs per forward pass, or ``"auto"`` (the default): sized from the
            memory for each pass's work (forward, or forward and backward in synthesis;
            :mod:`deepfault.core.memory`). Results do not depend on it. Its place is now
            :attr:`Runtime.batch_size <deepfault.Runtime.batch_size>`, which wins unless it is ``"auto"``.
        surprise: Score the surprise adequacy (DSA, LSA) of every synthesized input and its
            original after the run: ``None`` (the default) does not, ``"auto"`` fits a state on
            the training split (cached; skipped with the reason in the summary where no fit is
            possible), a path loads a state :func:`~deepfault.coverage.surprise.save_surprise`
            wrote (it must be of this model). Nothing else the run finds changes.
        baseline: Also run the random baseline (the same run from random neurons on the run's
            spectra and chosen inputs, about as long as the run) that the run's page compares
            with; a baseline measure has none.

    Every field's range is declared on it (:mod:`deepfault.core.constraints`) and checked when
    the config is made; :meth:`validate` adds the checks that need the data's bounds.
    """

    measure: str = param("tarantula", Options(list_approaches), option="--measure",
                         metavar="NAME", help="suspiciousness measure or baseline; see 'deepfault measures'")
    k: int = param(10, Interval(int, 1, MAX_INPUTS), option="-k", help="number of suspicious neurons")
    classes: tuple[int, ...] | None = param(
        None, Each(Interval(int, 0, MAX_CLASSES - 1), max_items=MAX_CLASSES, none=True, words=("all",)),
        option="--class", metavar="C",
        help="class to analyse: an index, a comma-separated list, or 'all' (default: all)")
    step_size: float = param(1.0, Interval(float, 0.0, FLOAT32_MAX), option="--step-size",
                             help="multiplier of the gradient in synthesis")
    distance: float = param(0.1, Interval(float, 0.0, FLOAT32_MAX),
                            help="largest change of any input element (L_inf bound), in the data set's units")
    star: float = param(3.0, Interval(float, 1.0, None), help="exponent of D* (dstar)")
    seed: int = param(0, Interval(int, 0, MAX_SEED), metavar="S", help="seed of every random choice")
    repeat: int = param(1, Interval(int, 1, MAX_REPEAT),
                        help="repetitions (new neurons for random/uniform, new inputs with --inputs)")
    layers: tuple[str, ...] | None = param(
        None, Each(Text(), none=True),
        metavar="NAMES", help="comma-separated module names, globs ('layer*.1'), type:CLASS, or a "
        "named selection ('blocks', 'linear-conv', 'deepxplore') to analyse (default: 'blocks', the "
        "residual/transformer block outputs, for a network that has such blocks, else 'linear-conv': every "
        "Linear/Conv layer except the logits layer)")
    threshold: float = param(0.0, Interval(float),
                             help="a neuron is active when its value is greater than this")
    activity: str = param("auto", Options(ACTIVITY_RULES), option="--activity",
                          help="when a neuron is active: 'zero' (above --threshold, the paper's rule), "
                          "'quantile' (above its own median on the training split) or 'auto' (the "
                          "paper's rule on Linear/Conv and dense neurons, the median on block outputs, "
                          "channel means after an activation and tokens)")
    iterations: int = param(1, Interval(int, 1, MAX_GRADIENT_ITERATIONS),
                            help="synthesis steps per input (the paper takes one)")
    normalize: bool = param(True, Flag(), option="--raw-gradients",
                            help="average raw gradients instead of RMS-normalised ones")
    num_inputs: int | None = param(None, Interval(int, 1, MAX_INPUTS, none=True), option="--inputs",
                                   metavar="N", help="correctly classified inputs per class to synthesize "
                                   "from, drawn without replacement (default: all)")
    k_primes: tuple[int, ...] | None = param(
        None, Each(Interval(int, 1, MAX_INPUTS), max_items=MAX_REPEAT, none=True), option="--k-prime",
        metavar="K1,K2", help="report the share of the top k' neurons that increased (default: 2k,5k)")
    batch_size: int | str = param("auto", Interval(int, 1, MAX_INPUTS, words=("auto",)),
                                  help="inputs per pass (the old place of Runtime.batch_size)")
    surprise: str | None = param(None, FilePath("input", words=("auto",)), option="--surprise",
                                 help=f"{SURPRISE_WHAT}: 'auto' (fitted on the training split and cached) "
                                 "or a fitted state (.npz from fit_surprise/save_surprise)")
    baseline: bool = param(False, Flag(), option="--baseline",
                           help="also run the random baseline (the same run from random neurons, on the "
                           "run's spectra) that --report compares the run with")

    def __post_init__(self) -> None:
        for name in ("classes", "k_primes", "layers"):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))
        if isinstance(self.classes, str) and self.classes.strip().lower() == "all":
            object.__setattr__(self, "classes", None)
        validate(self)

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
        return {_FILE_KEYS.get(k, k): v for k, v in asdict(self).items() if k not in _NOT_RECORDED}

    def check_classes(self, data: Dataset) -> None:
        """Refuse a class (``--class``) that ``data`` does not have."""
        for c in self.classes or ():
            if not 0 <= c < data.num_classes:
                raise DeepFaultError(f"--class {c} is outside the {data.num_classes} classes of "
                                     f"{data.name!r} (0..{data.num_classes - 1})")

    def validate(self, bounds: Sequence[float]) -> None:
        """The checks that need more than one field or the data's ``bounds`` (each field's own
        range is checked when the config is made).
        """
        if self.classes is not None:
            dupes = sorted({c for c in self.classes if list(self.classes).count(c) > 1})
            if dupes:
                raise DeepFaultError(f"classes must be distinct; {dupes} given more than once")
        if self.k_primes is not None:
            if get_approach(self.measure).baseline:
                raise DeepFaultError(
                    f"k' (--k-prime) ranks neurons by a measure; measure {self.measure!r} is a baseline "
                    "with no ranking, so leave k' out"
                )
            for kp in self.k_primes:
                if kp < self.k:
                    raise DeepFaultError(f"each k' (--k-prime) must be >= k={self.k}; got {kp}")
        check_synthesis_args(self.step_size, self.distance, bounds, self.iterations, step_name="step_size")


_settings.CONFIG.append(RunConfig)
