"""The settings of a repair (``deepfault repair``): what is held out, what is mixed in, how
long and how hard the model is fine-tuned, which baselines run and when a repair is flagged.

Defaults and why:

- ``holdout=0.3``: 30% of every input file's *seeds* (the test inputs the found inputs were
  made from) are held out, so the held-out accuracy measures inputs whose seeds the
  fine-tuning never saw (inputs from one seed are near-copies of each other).
- ``mix=10``: ten training inputs per found input keep the model anchored to its task
  while the found inputs are a visible share (1 in 11) of every batch; ``None`` mixes in
  the whole training split (DeepXplore section 7.3's setting, slow on a CPU).
- ``epochs=5``: DeepXplore section 7.3 retrained for 5 epochs.
- ``lr=1e-3``, ``batch_size=32``: the zoo's training recipe (Adam) and the one DRFuzz's
  scenarios fine-tune with; the rate is constant (no decay) because the runs are short.
- ``max_drop=1.0``: DRFuzz's RQ3 reports test-accuracy changes under one point; a repair
  that costs more test accuracy than this (in percentage points) is flagged.
- ``eps=0.1`` of the pixel range and ``bim_steps=10``: the BIM of the ``adv-bim``
  regression scenario; FGSM takes the same ``eps`` in one step.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..checks import MAX_EPOCHS, MAX_GRADIENT_ITERATIONS, MAX_INPUTS, MAX_LEARNING_RATE, MAX_SEED, check_int
from ..core.registry import unknown_name
from ..errors import DeepFaultError

__all__ = ["RepairConfig", "BASELINES", "TIE_POLICIES"]

#: Baselines: the same fine-tuning with as many random training inputs, random test inputs,
#: or FGSM / BIM adversarial inputs made from those random test inputs.
BASELINES = ("random-train", "random-test", "fgsm", "bim")
#: What happens to an input whose models' vote is tied: ``drop`` it, or label it with the
#: ``seed`` class (the class every model gave its seed before the search).
TIE_POLICIES = ("drop", "seed")


@dataclass(frozen=True, kw_only=True)
class RepairConfig:
    """How to repair: keyword-only fields, validated when the config is made (also by
    :func:`dataclasses.replace`).

    Attributes:
        holdout: Share of every file's seeds held out for evaluation, in ``[0, 1)``.
        mix: Training-split inputs mixed in per found input (``None``: the whole split).
        epochs: Fine-tuning epochs.
        lr: Adam's learning rate (constant).
        batch_size: Inputs per step.
        seed: Seed of the hold-out split, the mixed-in and random inputs and the shuffling.
        max_drop: Test-accuracy loss (percentage points) above which a repair is flagged.
        ties: ``drop`` or ``seed`` (:data:`TIE_POLICIES`), for difference-inducing inputs.
        vote_model: Label difference-inducing inputs with this model's prediction (its name
            in the file, or its index) instead of the majority vote.
        baselines: Which of :data:`BASELINES` to run.
        eps: FGSM/BIM radius, as a share of the pixel range.
        bim_steps: BIM iterations.
    """

    holdout: float = 0.3
    mix: float | None = 10.0
    epochs: int = 5
    lr: float = 1e-3
    batch_size: int = 32
    seed: int = 0
    max_drop: float = 1.0
    ties: str = "drop"
    vote_model: str | int | None = None
    baselines: tuple[str, ...] = BASELINES
    eps: float = 0.1
    bim_steps: int = 10

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> RepairConfig:
        """Check every field; returns ``self``.

        Raises:
            DeepFaultError: A field out of range, naming it, what is expected and what was given.
        """
        if not (isinstance(self.holdout, (int, float)) and 0 <= self.holdout < 1):
            raise DeepFaultError(f"holdout must be a share in [0, 1); got {self.holdout!r}")
        if self.mix is not None and not (
            isinstance(self.mix, (int, float)) and self.mix >= 0 and np.isfinite(self.mix)
        ):
            raise DeepFaultError(
                f"mix must be a number >= 0 (training inputs per found input) or None "
                f"(the whole training split); got {self.mix!r}"
            )
        check_int("epochs", self.epochs, maximum=MAX_EPOCHS)
        check_int("batch_size", self.batch_size, maximum=MAX_INPUTS)
        check_int("seed", self.seed, minimum=0, maximum=MAX_SEED)
        check_int("bim_steps", self.bim_steps, maximum=MAX_GRADIENT_ITERATIONS)
        if not (isinstance(self.lr, (int, float)) and 0 < self.lr <= MAX_LEARNING_RATE):
            raise DeepFaultError(f"lr must be a number > 0 and <= {MAX_LEARNING_RATE:g}; got {self.lr!r}")
        if not (isinstance(self.max_drop, (int, float)) and self.max_drop >= 0):
            raise DeepFaultError(
                f"max_drop must be a number of percentage points >= 0; got {self.max_drop!r}"
            )
        if self.ties not in TIE_POLICIES:
            raise DeepFaultError(f"ties must be one of {', '.join(TIE_POLICIES)}; got {self.ties!r}")
        unknown = [b for b in self.baselines if b not in BASELINES]
        if unknown:
            raise DeepFaultError(unknown_name("baseline", unknown[0], BASELINES))
        if not (isinstance(self.eps, (int, float)) and 0 < self.eps <= 1):
            raise DeepFaultError(f"eps must be a share of the pixel range in (0, 1]; got {self.eps!r}")
        return self

    def to_dict(self) -> dict:
        return {**asdict(self), "baselines": list(self.baselines)}
