"""DeepXplore's hyper-parameters, validated at once (DeepXplore spec sections 2 to 4)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ..errors import DeepFaultError, check_int
from .constraints import Constraint, make_constraint

__all__ = ["XploreConfig", "NEURON_CHOICES", "OBJECTIVES", "LAYER_CHOICES"]

#: When each model's coverage neuron is drawn: at every iteration (the paper) or once per
#: seed (the published code).
NEURON_CHOICES = ("per-iteration", "per-seed")
#: What ``F_k(x)[c]`` is: the pre-softmax score (the published MNIST code) or the
#: probability (the paper's Eq. 2).
OBJECTIVES = ("logits", "probabilities")
#: Neuron layers: the DeepFault set (every Linear/Conv but the logits layer) or DeepXplore's
#: (activated convolutions and dense layers, poolings, logits and softmax; coverage spec 1).
LAYER_CHOICES = ("default", "deepxplore")


def _number(name: str, value, *, minimum: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise DeepFaultError(f"{name} must be a finite number; got {value!r}")
    if minimum is not None and value < minimum:
        raise DeepFaultError(f"{name} must be >= {minimum:g}; got {value!r}")
    return float(value)


@dataclass(frozen=True)
class XploreConfig:
    """One DeepXplore run. The defaults are the paper's Table 2 parameters for vision
    models with the published MNIST command's iterations and ``light`` constraint.

    Attributes:
        seeds: Number of seed inputs drawn from the pool.
        seed: Seed of every random draw (seed inputs, targets, neurons, patches).
        replace: Draw the seeds with replacement (the published code did); default without.
        lambda1: Weight of the target model's score in the objective.
        lambda2: Weight of the coverage term.
        step: Step size ``s`` in the data set's units.
        iterations: Largest number of gradient steps per seed.
        threshold: Neuron-coverage threshold ``t`` on ``layer-minmax`` values.
        transform: Domain constraint (``none``, ``light``, ``occl``, ``blackout``).
        occlusion: ``(x, y, h, w)`` rectangle of ``occl`` (column, row, height, width).
        blackout_size: Side ``m`` of ``blackout``'s patches.
        target: Index of the model to push away from the common class, or ``None`` for one
            drawn uniformly per seed.
        neurons: ``"per-iteration"`` or ``"per-seed"`` choice of coverage neurons.
        objective: ``"logits"`` or ``"probabilities"``.
        layers: ``"default"`` or ``"deepxplore"`` neuron layers (coverage and objective).
        batch_size: Seeds advanced together; ``None`` for all of them at once.
    """

    seeds: int = 2000
    seed: int = 0
    replace: bool = False
    lambda1: float = 1.0
    lambda2: float = 0.1
    step: float = 10.0
    iterations: int = 20
    threshold: float = 0.0
    transform: str = "light"
    occlusion: tuple[int, int, int, int] = (0, 0, 10, 10)
    blackout_size: int = 6
    target: int | None = None
    neurons: str = "per-iteration"
    objective: str = "logits"
    layers: str = "default"
    batch_size: int | None = None

    def validate(self, num_models: int | None = None) -> XploreConfig:
        """Check every field; returns ``self``.

        Raises:
            DeepFaultError: The first bad field, named, with what was expected.
        """
        check_int("seeds", self.seeds, 1)
        check_int("seed", self.seed, 0)
        check_int("iterations", self.iterations, 1)
        _number("lambda1", self.lambda1)
        _number("lambda2", self.lambda2)
        _number("step", self.step, minimum=0.0)
        _number("threshold", self.threshold)
        if self.batch_size is not None:
            check_int("batch_size", self.batch_size, 1)
        for name, value, known in (("neurons", self.neurons, NEURON_CHOICES),
                                   ("objective", self.objective, OBJECTIVES),
                                   ("layers", self.layers, LAYER_CHOICES)):
            if value not in known:
                raise DeepFaultError(f"unknown {name} {value!r}; known: {', '.join(known)}")
        if self.target is not None:
            check_int("target", self.target, 0)
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
        out = asdict(self)
        out["occlusion"] = list(self.occlusion)
        return out
