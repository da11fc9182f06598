"""DeepXplore's hyper-parameters, each declared once with its bound (DeepXplore spec sections 2 to 4).

Every field carries its constraint (:func:`deepfault.core.constraints.param`): the library's
check, ``deepfault xplore``'s option and its help come from that one declaration. What a
declaration cannot say (a target among the models given, a rectangle that fits the inputs,
bounds and fixed elements of the inputs' shape) is checked where it is known:
:meth:`XploreConfig.validate` and the search.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ..checks import (
    MAX_BLACKOUT_SIZE,
    MAX_GRADIENT_ITERATIONS,
    MAX_INPUTS,
    MAX_MODELS,
    MAX_SEED,
    without_repeats,
)
from ..core.constraints import WORKERS, Each, Flag, Interval, Options, param
from ..core.constraints import FieldConstraint as Declared
from ..core.constraints import validate as validate_fields
from ..core.entry import _translate, renamed_fields
from ..errors import DeepFaultError
from .constraints import Constraint, list_constraints, make_constraint

__all__ = ["XploreConfig", "NEURON_CHOICES", "OBJECTIVES", "LAYER_CHOICES", "PUBLISHED"]

#: When each model's coverage neuron is drawn: at every iteration (the paper) or once per
#: seed (the published code).
NEURON_CHOICES = ("per-iteration", "per-seed")
#: What ``F_k(x)[c]`` is: the pre-softmax score (the published MNIST code) or the
#: probability (the paper's Eq. 2).
OBJECTIVES = ("logits", "probabilities")
#: Neuron layers: the default every method shares (``core.capture.default_layers``: the
#: residual/transformer blocks' outputs for a network that has them, else every Linear/Conv but
#: the logits layer), DeepXplore's (activated convolutions and dense layers, poolings, logits
#: and softmax; coverage spec 1; the paper's and the published code's), or one of the other
#: named selections for every model alike.
LAYER_CHOICES = ("default", "deepxplore", "blocks", "linear-conv")

#: The published MNIST code's choices (``gen_diff.py light 1 0.1 10 2000 20 0``): the
#: Table 2 parameters, ``light``, 20 iterations, a fixed target (its ``-t``, 0 by
#: default), neurons drawn once per seed, DeepXplore's neuron layers, seeds drawn with
#: replacement and no clipping to the data's bounds. ``XploreConfig.published()`` and
#: ``deepfault xplore --compat`` set all of them.
PUBLISHED = {
    "lambda1": 1.0, "lambda2": 0.1, "step_size": 10.0, "iterations": 20, "threshold": 0.0,
    "transform": "light", "target": 0, "neurons": "per-seed", "objective": "logits",
    "layers": "deepxplore", "replace": True, "clip": False,
}

#: A seed index: a row of the pool (numpy indexes with 63-bit integers, and no pool is larger).
MAX_INDEX = MAX_SEED


@dataclass(frozen=True)
class _Rectangle(Declared):
    """``(x, y, h, w)``: four integers >= 0 (on the command line ``x,y,h,w``)."""

    none: bool = False
    words: tuple[str, ...] = ()

    def accepts(self, value) -> bool:
        item = Interval(int, 0, MAX_INDEX)
        return (isinstance(value, (tuple, list)) and len(value) == 4
                and all(item.accepts(v) for v in value))

    def convert(self, text: str) -> tuple:
        parts = tuple(int(p) for p in text.split(","))
        if len(parts) != 4:
            raise ValueError(text)
        return parts

    def expected(self) -> str:
        return "x,y,h,w (four integers >= 0)"

    def hostile(self) -> tuple:
        return ((1, 2), (0, 0, -1, 4), "1,2")


@dataclass(frozen=True)
class _OfTheInputs(Declared):
    """A value checked against the inputs' shape when they are known (by the search):
    ``pair`` a ``(lo, hi)`` pair of numbers or arrays, else feature indices or a bool mask.
    Here: a pair, or a sequence or array, never a text or a lone number.
    """

    pair: bool = False
    none: bool = True
    words: tuple[str, ...] = ()

    def accepts(self, value) -> bool:
        if isinstance(value, (str, bytes)) or np.ndim(np.asarray(value, dtype=object)) == 0:
            return False
        return not self.pair or len(value) == 2

    def convert(self, text: str):
        raise ValueError(text)  # no command-line form: deepfault xplore reads files for these

    def expected(self) -> str:
        return ("a pair (lo, hi) of numbers or of arrays of one input's shape" if self.pair
                else "feature indices or a bool mask of one input's shape")

    def hostile(self) -> tuple:
        return ("x", 7, (1.0, 2.0, 3.0)) if self.pair else ("x", 7)


#: Result files' keys of the fields renamed after the CLI's options.
_FILE_KEYS = {"step_size": "step", "inputs_per_step": "batch_size"}
#: Fields a result records in its own words (``bounds``, ``feature_bounds``, ``fixed``), not
#: in its ``config`` record: the files keep the keys they had.
_NOT_FILED = ("bounds", "fixed")

#: The fields' old names (still accepted, with a FutureWarning).
_RENAMED = {"step": "step_size", "batch_size": "inputs_per_step"}


@renamed_fields(**_RENAMED)
@dataclass(frozen=True)
class XploreConfig:
    """One DeepXplore run.

    The defaults make inputs a user would accept as images: step 0.03 without a domain
    constraint, up to 50 steps, clipped to the data's bounds (chosen by measurement on MNIST
    with three LeNets, ``docs/xplore.md``: 87% of seeds give a difference, mean L1 93 of 784
    pixels, none saturated; the paper's s 10 with ``light`` saturates 85%). The paper's
    Table 2 parameters with the published code's choices are one call away:
    :meth:`published`.

    Attributes:
        seeds: Number of seed inputs drawn from the pool.
        seed: Seed of every random draw (seed inputs, targets, neurons, patches).
        replace: Draw the seeds with replacement (the published code did); default without.
        seed_indices: Explicit pool indices of the seeds (in this order; a repeated index is
            dropped with a warning), in place of ``seeds`` drawn ones; ``None`` draws ``seeds``
            of them.
        lambda1: Weight of the target model's score in the objective.
        lambda2: Weight of the coverage term.
        step_size: Step size ``s`` in the data set's units (``--step-size``; formerly ``step``).
        iterations: Largest number of gradient steps per seed.
        threshold: Neuron-coverage threshold ``t`` on ``layer-minmax`` values.
        transform: Domain constraint (``none``, ``light``, ``occl``, ``blackout``).
        occlusion: ``(x, y, h, w)`` rectangle of ``occl`` (column, row, height, width).
        blackout_size: Side ``m`` of ``blackout``'s patches.
        target: Index of the model to push away from the common class, or ``None`` (also
            ``"random"``) for one drawn uniformly per seed.
        neurons: ``"per-iteration"`` or ``"per-seed"`` choice of coverage neurons.
        objective: ``"logits"`` or ``"probabilities"``.
        layers: Neuron layers, for coverage and the objective: ``"default"`` (the neurons
            every method counts: each residual/transformer block's output for a network
            that has such blocks, else every Linear/Conv but the logits layer),
            ``"deepxplore"`` (every layer but input and flatten, activated values,
            poolings, logits and softmax: the paper's, which :meth:`published` and the
            ``deepxplore-mnist`` preset set), ``"blocks"`` or ``"linear-conv"``.
        clip: Clip every step to the data's bounds (default). The published code did not,
            so its inputs could leave the valid range.
        workers: Worker processes, each searching a contiguous share of the groups of seeds
            (:mod:`.workers`; one group is cut into ``workers``), merged; equal to one process
            where a seed's search reads no coverage (``lambda2 = 0``). 1: one process.
        inputs_per_step: Seeds advanced together; ``None`` for all of them at once
            (``--inputs-per-step``; formerly ``batch_size``).
        bounds: ``(lo, hi)``, the valid input range every step is clipped to: numbers, or
            per-feature arrays broadcastable to one input's shape
            (:class:`~deepfault.xplore.features.InputBounds`; ``lo == hi`` pins a feature).
            ``None``: the data set's, else the prepared models', else ``(0, 1)``.
        fixed: Elements that keep the seed's value: indices along the first axis of one input
            (a vector's features, a sequence's channels) or a bool mask broadcastable to one
            input's shape (:func:`~deepfault.xplore.features.fixed_mask`). Their gradient is
            zeroed and their value stays the seed's, bit for bit.

    The fields take the names of ``deepfault xplore``'s options, except ``seeds``
    (``--num-seeds``: :attr:`num_seeds` is the run's count) and ``transform``
    (``--constraint``: :meth:`constraint` builds it); the old names ``step=`` and
    ``batch_size=`` still work with a ``FutureWarning``, and result files keep them as keys.
    """

    seeds: int = param(2000, Interval(int, 1, MAX_INPUTS), metavar="N", help="seed inputs drawn",
                       option="--num-seeds")
    seed: int = param(0, Interval(int, 0, MAX_SEED), metavar="S", help="seed of every random draw")
    replace: bool = param(False, Flag(), help="draw seeds with replacement (as DeepXplore's code did)")
    seed_indices: tuple[int, ...] | None = param(
        None, Each(Interval(int, 0, MAX_INDEX), max_items=MAX_INPUTS, none=True),
        help="explicit seeds: test-set indices as a comma list or a file of integers (text or .npy), in "
        "place of --num-seeds drawn ones")
    lambda1: float = param(1.0, Interval(float), help="weight of the target model's score")
    lambda2: float = param(0.1, Interval(float), help="weight of the neuron-coverage term")
    step_size: float = param(0.03, Interval(float, 0.0), help="step size s, in the data set's units (the "
                             "paper's 10 turns most MNIST seeds into flat squares)")
    iterations: int = param(50, Interval(int, 1, MAX_GRADIENT_ITERATIONS),
                            help="largest number of steps per seed")
    threshold: float = param(0.0, Interval(float), help="neuron-coverage threshold t on layer-minmax values")
    transform: str = param("none", Options(list_constraints), option="--constraint",
                           help="domain constraint on the gradient (light, occl and blackout change images "
                           "only)")
    occlusion: tuple[int, int, int, int] = param((0, 0, 10, 10), _Rectangle(), metavar="X,Y,H,W",
                                                 help="rectangle of --constraint occl: first column, first "
                                                 "row, height, width")
    blackout_size: int = param(6, Interval(int, 1, MAX_BLACKOUT_SIZE),
                               metavar="M", help="side of the patches of --constraint blackout")
    target: int | None = param(None, Interval(int, 0, MAX_MODELS - 1, none=True, words=("random",)),
                               metavar="J|random",
                               help="index of the model pushed away from the common class ('random': one "
                               "drawn per seed)")
    neurons: str = param("per-iteration", Options(NEURON_CHOICES),
                         help="draw each model's coverage neuron at every step (the paper) or once per "
                         "seed (DeepXplore's code)")
    objective: str = param("logits", Options(OBJECTIVES),
                           help="F_k(x)[c] is the logit (DeepXplore's MNIST code) or the probability (the "
                           "paper)")
    layers: str = param("default", Options(LAYER_CHOICES),
                        help="neuron layers of coverage and objective: 'default', the neurons every "
                        "command counts ('blocks' for a network with residual/transformer blocks, else "
                        "'linear-conv': every Linear/Conv but the logits layer); 'deepxplore', "
                        "DeepXplore's (every layer but input and flatten, activated, poolings, logits and "
                        "softmax; --compat's); or 'blocks' or 'linear-conv' for every model")
    clip: bool = param(True, Flag(), help="clip every step to the data's bounds (the published code did not, "
                       "so its inputs could leave the valid range)")
    workers: int = param(1, WORKERS, metavar="N",
                         help="worker processes, each searching a share of the seeds' groups "
                         "(equal to one process where a seed's search does not depend on the others': "
                         "--lambda2 0)")
    inputs_per_step: int | None = param(None, Interval(int, 1, MAX_INPUTS, none=True), metavar="B",
                                        help="seeds advanced together, group after group (default: all)")
    bounds: Any = param(None, _OfTheInputs(pair=True), help="valid input range (lo, hi)")
    fixed: Any = param(None, _OfTheInputs(), help="elements that keep the seed's value")

    @property
    def step(self) -> float:
        """The deprecated name of :attr:`step_size`."""
        return self.step_size

    @property
    def batch_size(self) -> int | None:
        """The deprecated name of :attr:`inputs_per_step`."""
        return self.inputs_per_step

    def __post_init__(self):
        if isinstance(self.target, str) and self.target.strip().lower() == "random":
            object.__setattr__(self, "target", None)
        for name in ("seed_indices", "occlusion"):
            value = getattr(self, name)
            if isinstance(value, np.ndarray):
                value = value.tolist()
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))
        validate_fields(self)
        if self.seed_indices is not None:  # a repeat was searched, and counted, twice (issue 43)
            object.__setattr__(self, "seed_indices", without_repeats(
                "seed indices", self.seed_indices,
                why="each given seed is searched once (draw seeds with replace=True / --replace for "
                "repeats)"))

    @classmethod
    def published(cls, **overrides) -> XploreConfig:
        """The published MNIST code's settings (:data:`PUBLISHED`), with ``overrides``.

        Examples:
            >>> XploreConfig.published(seeds=300).clip
            False
        """
        return cls(**{**PUBLISHED, **_translate("XploreConfig.published", _RENAMED, dict(overrides))})

    @property
    def num_seeds(self) -> int:
        """Seeds of the run: ``len(seed_indices)`` when given, else ``seeds``."""
        return self.seeds if self.seed_indices is None else len(self.seed_indices)

    def validate(self, num_models: int | None = None) -> XploreConfig:
        """What the declarations cannot check alone: the target among ``num_models`` models and
        the domain constraint's parameters. Returns ``self``.

        Raises:
            DeepFaultError: The first bad field, named, with what was expected.
        """
        if self.target is not None and num_models is not None and self.target >= num_models:
            raise DeepFaultError(
                f"target must be a model index in 0..{num_models - 1} (or random); got {self.target}")
        self.constraint()
        return self

    def constraint(self) -> Constraint:
        """The domain constraint object of ``transform`` with its parameters."""
        params = {
            "occl": lambda: dict(zip("xyhw", self.occlusion, strict=True)),
            "blackout": lambda: {"size": self.blackout_size},
        }.get(self.transform, dict)()
        return make_constraint(self.transform, **params)

    def layer_selection(self) -> str | None:
        """The ``layers=`` argument of :func:`~deepfault.core.capture.capture`."""
        return None if self.layers == "default" else self.layers

    def layers_named_by(self) -> str:
        """What named the neuron layers, in the command line's words: ``--compat`` when the
        published code's choices are all set (:data:`PUBLISHED`'s neurons, layers, seeds with
        replacement and no clipping), else ``--layers``.
        """
        compat = all(getattr(self, k) == PUBLISHED[k] for k in ("neurons", "layers", "replace", "clip"))
        return "--compat" if compat else "--layers"

    def to_dict(self) -> dict:
        out = {_FILE_KEYS.get(f.name, f.name): getattr(self, f.name) for f in fields(self)
               if f.name not in _NOT_FILED}
        out["occlusion"] = list(self.occlusion)
        if out.get("workers") == 1:  # configurations from before the field keep their files
            del out["workers"]
        if self.seed_indices is not None:
            out["seed_indices"] = [int(i) for i in self.seed_indices]
        return out

