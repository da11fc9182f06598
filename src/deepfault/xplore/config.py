"""DeepXplore's hyper-parameters, validated at once (DeepXplore spec sections 2 to 4)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ..checks import check_int
from ..core.entry import _translate, renamed_fields
from ..core.registry import unknown_name
from ..errors import DeepFaultError
from .constraints import Constraint, make_constraint

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


def _number(name: str, value, *, minimum: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise DeepFaultError(f"{name} must be a finite number; got {value!r}")
    if minimum is not None and value < minimum:
        raise DeepFaultError(f"{name} must be >= {minimum:g}; got {value!r}")
    return float(value)


#: Result files' keys of the fields renamed after the CLI's options.
_FILE_KEYS = {"step_size": "step", "inputs_per_step": "batch_size"}


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
        seed_indices: Explicit pool indices of the seeds (in this order; repeats allowed),
            in place of ``seeds`` drawn ones; ``None`` draws ``seeds`` of them.
        lambda1: Weight of the target model's score in the objective.
        lambda2: Weight of the coverage term.
        step_size: Step size ``s`` in the data set's units (``--step-size``; formerly ``step``).
        iterations: Largest number of gradient steps per seed.
        threshold: Neuron-coverage threshold ``t`` on ``layer-minmax`` values.
        transform: Domain constraint (``none``, ``light``, ``occl``, ``blackout``).
        occlusion: ``(x, y, h, w)`` rectangle of ``occl`` (column, row, height, width).
        blackout_size: Side ``m`` of ``blackout``'s patches.
        target: Index of the model to push away from the common class, or ``None`` for one
            drawn uniformly per seed.
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
        inputs_per_step: Seeds advanced together; ``None`` for all of them at once
            (``--inputs-per-step``; formerly ``batch_size``).

    The fields take the names of ``deepfault xplore``'s options, except ``seeds``
    (``--num-seeds``: :attr:`num_seeds` is the run's count) and ``transform``
    (``--constraint``: :meth:`constraint` builds it); the old names ``step=`` and
    ``batch_size=`` still work with a ``FutureWarning``, and result files keep them as keys.
    """

    seeds: int = 2000
    seed: int = 0
    replace: bool = False
    seed_indices: tuple[int, ...] | None = None
    lambda1: float = 1.0
    lambda2: float = 0.1
    step_size: float = 0.03
    iterations: int = 50
    threshold: float = 0.0
    transform: str = "none"
    occlusion: tuple[int, int, int, int] = (0, 0, 10, 10)
    blackout_size: int = 6
    target: int | None = None
    neurons: str = "per-iteration"
    objective: str = "logits"
    layers: str = "default"
    clip: bool = True
    inputs_per_step: int | None = None

    @property
    def step(self) -> float:
        """The deprecated name of :attr:`step_size`."""
        return self.step_size

    @property
    def batch_size(self) -> int | None:
        """The deprecated name of :attr:`inputs_per_step`."""
        return self.inputs_per_step

    def __post_init__(self):
        if self.seed_indices is not None and not isinstance(self.seed_indices, tuple):
            try:
                object.__setattr__(self, "seed_indices", tuple(self.seed_indices))
            except TypeError:
                raise DeepFaultError(
                    f"seed_indices must be a sequence of indices; got {self.seed_indices!r}") from None

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
        """Check every field; returns ``self``.

        Raises:
            DeepFaultError: The first bad field, named, with what was expected.
        """
        check_int("seeds", self.seeds)
        if self.seed_indices is not None:
            if not self.seed_indices:
                raise DeepFaultError("seed_indices must name at least one seed; got none")
            for i in self.seed_indices:
                check_int("seed_indices entry", i, minimum=0)
        for name in ("replace", "clip"):
            if not isinstance(getattr(self, name), bool):
                raise DeepFaultError(f"{name} must be True or False; got {getattr(self, name)!r}")
        check_int("seed", self.seed, minimum=0)
        check_int("iterations", self.iterations)
        _number("lambda1", self.lambda1)
        _number("lambda2", self.lambda2)
        _number("step_size", self.step_size, minimum=0.0)
        _number("threshold", self.threshold)
        if self.inputs_per_step is not None:
            check_int("inputs_per_step", self.inputs_per_step)
        for name, value, known in (("neurons", self.neurons, NEURON_CHOICES),
                                   ("objective", self.objective, OBJECTIVES),
                                   ("layers", self.layers, LAYER_CHOICES)):
            if value not in known:
                raise DeepFaultError(unknown_name(name, value, known))
        if self.target is not None:
            check_int("target", self.target, minimum=0)
            if num_models is not None and self.target >= num_models:
                raise DeepFaultError(
                    f"target must be a model index in 0..{num_models - 1} (or random); got {self.target}"
                )
        if len(tuple(self.occlusion)) != 4:
            raise DeepFaultError(f"occlusion must be (x, y, h, w); got {self.occlusion!r}")
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

    def to_dict(self) -> dict:
        out = {_FILE_KEYS.get(k, k): v for k, v in asdict(self).items()}  # the files' keys, unchanged
        out["occlusion"] = list(self.occlusion)
        if self.seed_indices is not None:
            out["seed_indices"] = [int(i) for i in self.seed_indices]
        return out
