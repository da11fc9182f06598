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

import os
from dataclasses import asdict, dataclass
from pathlib import Path

from ..checks import MAX_EPOCHS, MAX_GRADIENT_ITERATIONS, MAX_INPUTS, MAX_LEARNING_RATE, MAX_MODELS, MAX_SEED
from ..core.constraints import Declared, Each, Interval, Options, Text, file_param, param, param_of, validate
from ..core.guard import output_path, sibling
from ..models.source import ModelSource

__all__ = ["RepairConfig", "RepairFiles", "BASELINES", "TIE_POLICIES"]

#: Baselines: the same fine-tuning with as many random training inputs, random test inputs,
#: or FGSM / BIM adversarial inputs made from those random test inputs.
BASELINES = ("random-train", "random-test", "fgsm", "bim")
#: What happens to an input whose models' vote is tied: ``drop`` it, or label it with the
#: ``seed`` class (the class every model gave its seed before the search).
TIE_POLICIES = ("drop", "seed")


@dataclass(frozen=True)
class _NameOrIndex(Text):
    """A model's or file's name, or its index (an integer >= 0)."""

    def accepts(self, value) -> bool:
        if isinstance(value, int) and not isinstance(value, bool):
            return 0 <= value < MAX_MODELS
        return super().accepts(value)

    def convert(self, text: str) -> str | int:  # type: ignore[override]  # an index is a number
        return int(text) if text.strip().isdigit() else text

    def expected(self) -> str:
        return f"a name or an index from 0 to {MAX_MODELS - 1:,}"

    def hostile(self) -> tuple:
        return ("", "a\x00b", -1, MAX_MODELS, 1.5)


@dataclass(frozen=True)
class _NoneOrMany(Options):
    """Names of ``choices``, or none of them (``()``; ``"none"`` on the command line)."""

    def accepts(self, value) -> bool:
        return value in ((), []) or super().accepts(value)


#: Fields that choose what is run but are recorded elsewhere in the result (each file's
#: ``used``): left out of :meth:`RepairConfig.to_dict`, so result files keep their keys.
_NOT_RECORDED = ("train_on",)


@dataclass(frozen=True, kw_only=True)
class RepairConfig:
    """How to repair: keyword-only fields, each with its range declared
    (:mod:`deepfault.core.constraints`) and checked when the config is made (also by
    :func:`dataclasses.replace`).

    Attributes:
        holdout: Share of every file's seeds held out for evaluation, in ``[0, 1)``.
        mix: Training-split inputs mixed in per found input (``None``, ``"all"`` on the command
            line: the whole split).
        epochs: Fine-tuning epochs.
        lr: Adam's learning rate (constant).
        batch_size: Inputs per step (it changes the result: not the runtime's batch size).
        seed: Seed of the hold-out split, the mixed-in and random inputs and the shuffling.
        max_drop: Test-accuracy loss (percentage points) above which a repair is flagged.
        ties: ``drop`` or ``seed`` (:data:`TIE_POLICIES`), for difference-inducing inputs.
        vote_model: Label difference-inducing inputs with this model's prediction (its name
            in the file, or its index) instead of the majority vote.
        baselines: Which of :data:`BASELINES` to run (``()``: none).
        eps: FGSM/BIM radius, as a share of the pixel range.
        bim_steps: BIM iterations.
        train_on: Fine-tune only on these files' training parts (indices or file names); the
            others are only evaluated on (DRFuzz RQ3's cross table). ``None``: all.
    """

    holdout: float = param(0.3, Interval(float, 0.0, 1.0, closed="left"),
                           help="share of every file's seeds held out for evaluation")
    mix: float | None = param(10.0, Interval(float, 0.0, None, none=True, words=("all",)), option="--mix",
                              metavar="R",
                              help="training inputs mixed in per found input, or 'all' for the whole "
                              "training split")
    epochs: int = param(5, Interval(int, 1, MAX_EPOCHS), help="fine-tuning epochs")
    lr: float = param(1e-3, Interval(float, 0.0, MAX_LEARNING_RATE, closed="right"),
                      help="Adam's learning rate (constant)")
    batch_size: int = param(32, Interval(int, 1, MAX_INPUTS), help="inputs per step")
    seed: int = param(0, Interval(int, 0, MAX_SEED),
                      metavar="S", help="seed of the split, the mixed-in and random inputs and the shuffling")
    max_drop: float = param(1.0, Interval(float, 0.0, None), metavar="POINTS",
                            help="flag a repair that loses more test accuracy than this (percentage points)")
    ties: str = param("drop", Options(TIE_POLICIES),
                      help="tied votes on xplore inputs: drop them, or label them with the seed's class")
    vote_model: str | int | None = param(None, _NameOrIndex(none=True), metavar="NAME",
                                         help="label xplore inputs with this model's prediction (name or "
                                         "index) instead of the vote")
    baselines: tuple[str, ...] = param(BASELINES, _NoneOrMany(BASELINES, many=True, words=("none",)),
                                       metavar="B1,B2",
                                       help=f"baselines ({', '.join(BASELINES)}) or 'none' (default: all)")
    eps: float = param(0.1, Interval(float, 0.0, 1.0, closed="right"),
                       help="FGSM/BIM radius as a share of the pixel range")
    bim_steps: int = param(10, Interval(int, 1, MAX_GRADIENT_ITERATIONS), help="BIM iterations")
    train_on: tuple[int | str, ...] | None = param(
        None, Each(_NameOrIndex(), none=True), help="fine-tune only on these files (indices or names)")

    def __post_init__(self) -> None:
        if isinstance(self.mix, str) and self.mix.strip().lower() == "all":
            object.__setattr__(self, "mix", None)
        if isinstance(self.baselines, str):
            names = () if self.baselines.strip().lower() == "none" else tuple(
                b.strip() for b in self.baselines.split(","))
            object.__setattr__(self, "baselines", names)
        for name in ("baselines", "train_on"):
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        self.validate()

    def validate(self) -> RepairConfig:
        """Check every field against its declaration; returns ``self``.

        Raises:
            DeepFaultError: A field out of range, naming it, what is expected and what was given.
        """
        validate(self)
        return self

    def to_dict(self) -> dict:
        body = {k: v for k, v in asdict(self).items() if k not in _NOT_RECORDED}
        return {**body, "baselines": list(self.baselines)}


@dataclass(frozen=True)
class RepairFiles(Declared):
    """The files of a repair beside its model and inputs: the M1 of regress files, the JSON
    result and the repaired model, each ``None`` (or ``'-'`` for an output) for none.

    Attributes:
        m1: M1 of regress files, to recompute which held-out faults it gets right (``None``: the
            M1 predictions saved in the file).
        out: The JSON result.
        save_model: The repaired model (``None``: beside ``out``, as ``.pt``).
    """

    m1: str | os.PathLike | None = param_of(
        ModelSource, "model", help="M1 of regress files, to recompute which held-out faults it gets right "
        "(default: the M1 predictions saved in the file)")
    out: str | os.PathLike | None = file_param("repair-result.json",
                                               "JSON result, written atomically; '-' writes none")
    save_model: str | os.PathLike | None = file_param(
        None, "the repaired model (default: beside --out as .pt); '-' writes none")

    def paths(self) -> tuple[Path | None, Path | None]:
        """``(result, repaired model)``, ``None`` for each not written.

        Raises:
            DeepFaultError: A path that names a folder (``m/``).
        """
        out = output_path(self.out, "--out")
        model = self.save_model if self.save_model is not None else sibling(out, ".pt")
        return out, output_path(model, "--save-model")
