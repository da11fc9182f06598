"""What a repair reports: the model before and after each approach, on the test split and on
every file's held-out inputs (frozen dataclasses with ``to_dict()``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from ..core.outcome import Artifact, Outcome
from ..core.summary import Summarised
from .config import RepairConfig

__all__ = ["RepairEvaluation", "FileSummary", "ApproachResult", "RepairResult", "RepairVerdict",
           "repair_verdict"]


@dataclass(frozen=True)
class RepairEvaluation:
    """One model's accuracies.

    Attributes:
        test_accuracy: On the whole test split.
        clean_test_accuracy: On the test inputs no approach fine-tuned on, nor on inputs made
            from them (the seeds of the found inputs and the random test inputs are left out).
        held_out: ``{file name: accuracy}`` on each file's held-out inputs (``None``: none held out).
        rf: ``{file name: #RF}`` for ``regress`` files: held-out faults M1 gets right and this
            model gets wrong.
    """

    test_accuracy: float
    clean_test_accuracy: float | None
    held_out: dict[str, float | None] = field(default_factory=dict)
    rf: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "test_accuracy": self.test_accuracy,
            "clean_test_accuracy": self.clean_test_accuracy,
            "held_out": dict(self.held_out),
            "rf": dict(self.rf),
        }


@dataclass(frozen=True)
class FileSummary:
    """How one input file was used.

    Attributes:
        name, path, kind: The file.
        inputs: Inputs in the file.
        used: Inputs with a label (tied votes dropped).
        source: Where the labels came from.
        ties, tie_policy: Tied votes and what was done with them.
        train, held_out: Inputs in the training part and held out.
        trained: The training part was fine-tuned on (``train_on``); otherwise the file is
            only evaluated on.
        train_seeds, held_out_seeds: Their distinct seeds.
    """

    name: str
    path: str
    kind: str
    inputs: int
    used: int
    source: str
    ties: int
    tie_policy: str | None
    train: int
    held_out: int
    train_seeds: int
    held_out_seeds: int
    trained: bool = True

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class ApproachResult:
    """The model fine-tuned with one augmentation.

    Attributes:
        name: ``found`` (the input files) or a baseline (:data:`~.config.BASELINES`).
        inputs: Augmentation inputs (the mixed-in training inputs not counted).
        after: The fine-tuned model's :class:`RepairEvaluation`.
        test_change: Change of test accuracy in percentage points (after - before).
        flagged: The change is a loss of more than ``config.max_drop`` points.
        train_loss: Mean loss of the last epoch.
        seconds: Time to make the inputs and fine-tune.
        fixed: Held-out inputs (every file's) the model got wrong before and gets right after.
        broken: Held-out inputs it got right before and gets wrong after.
    """

    name: str
    inputs: int
    after: RepairEvaluation
    test_change: float
    flagged: bool
    train_loss: float
    seconds: float
    fixed: int = 0
    broken: int = 0

    @property
    def net_fixed(self) -> int:
        """Held-out faults fixed, less the held-out inputs broken."""
        return self.fixed - self.broken

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "inputs": self.inputs,
            "after": self.after.to_dict(),
            "test_change": self.test_change,
            "flagged": self.flagged,
            "train_loss": self.train_loss,
            "seconds": self.seconds,
            "fixed": self.fixed,
            "broken": self.broken,
        }


def _mean_held(e: RepairEvaluation) -> float | None:
    values = [v for v in e.held_out.values() if v is not None]
    return sum(values) / len(values) if values else None


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


@dataclass(frozen=True, eq=False, repr=False)
class RepairResult(Summarised, Outcome):
    """One repair.

    Attributes:
        config: The settings.
        model_name: How the model is named (file name or architecture).
        dataset: The data set's name.
        files: One :class:`FileSummary` per input file.
        before: The model's :class:`RepairEvaluation` before any fine-tuning.
        approaches: ``found`` first, then the baselines.
        mixed: Training inputs mixed into every fine-tuning.
        clean_test: Test inputs in ``clean_test_accuracy``.
        splits: ``{file name: (train_rows, held_rows)}`` rows of each file (disjoint).
        model: The model fine-tuned on the found inputs (on the CPU, ``eval()`` mode).
        device: Where it ran.
        seconds: Wall-clock time.
        held_out_faults: Held-out inputs (every file's) the model got wrong before fine-tuning.
        saved_to: Where the model fine-tuned on the found inputs was written (``None``: not written).
        prepared: The prepared model that was repaired (what :meth:`outputs` writes the repaired
            model's file from; not in :meth:`to_dict`).
    """

    config: RepairConfig
    model_name: str
    dataset: str
    files: tuple[FileSummary, ...]
    before: RepairEvaluation
    approaches: tuple[ApproachResult, ...]
    mixed: int
    clean_test: int
    splits: dict[str, tuple[np.ndarray, np.ndarray]]
    model: nn.Module
    device: str = "cpu"
    seconds: float = 0.0
    held_out_faults: int = 0
    saved_to: str | None = None
    prepared: Any = field(default=None, compare=False)

    @property
    def found(self) -> ApproachResult:
        return self.approaches[0]

    def approach(self, name: str) -> ApproachResult:
        for a in self.approaches:
            if a.name == name:
                return a
        raise KeyError(f"no approach {name!r}; ran: {', '.join(a.name for a in self.approaches)}")

    def verdict(self) -> RepairVerdict:
        """Which fine-tuning fixed the most held-out faults within the accuracy budget
        (:func:`repair_verdict`).
        """
        return repair_verdict(self.approaches, faults=self.held_out_faults, max_drop=self.config.max_drop,
                              saved_to=self.saved_to)

    def headline(self) -> str:
        f = self.found
        return (f"fine-tuning on the found inputs: held-out accuracy {_pct(_mean_held(self.before))} -> "
                f"{_pct(_mean_held(f.after))}, test accuracy {f.test_change:+.2f} points"
                + (" (over the accuracy budget)" if f.flagged else ""))

    def summary(self) -> str:
        """What ``deepfault repair`` prints: the settings, the files, one row per model, then the
        verdict (:meth:`verdict`), where the eye lands after the table.
        """
        from .report import summary_text

        return summary_text(self)

    def payload(self) -> dict:
        """The result file's body: :meth:`to_dict` less the config and the device (the envelope
        has them).
        """
        return {k: v for k, v in self.to_dict().items() if k not in ("config", "device")}

    def saving(self, path: str | os.PathLike | None) -> RepairResult:
        """This result, naming ``path`` as where :meth:`outputs` writes the repaired model (its
        verdict and ``saved_to`` say so); ``None``: nowhere.
        """
        return replace(self, saved_to=None if path is None else str(path))

    def outputs(self) -> tuple[Artifact, ...]:
        """The model fine-tuned on the found inputs (``.pt``, :func:`~.save.save_repaired`)."""
        def write(path: Path) -> Path:
            from .save import save_repaired

            return save_repaired(path, self.prepared, self)

        return (Artifact("model", ".pt", write),)

    def page(self, folder: Path, *, provenance: dict | None = None) -> dict:
        """The run's HTML page (:func:`~.report.run_page`)."""
        from .report import run_page

        return run_page(self, folder, provenance=provenance)

    def rows(self) -> list[dict]:
        return [{"approach": a.name, "inputs": a.inputs, "test_accuracy": a.after.test_accuracy,
                 "test_change": a.test_change, "held_out": _mean_held(a.after), "flagged": a.flagged,
                 "fixed": a.fixed, "newly_wrong": a.broken, "seconds": a.seconds} for a in self.approaches]

    def to_dict(self) -> dict:
        """Everything but the model, as JSON-ready values (held-out rows included)."""
        return {
            "config": self.config.to_dict(),
            "model": self.model_name,
            "dataset": self.dataset,
            "files": [f.to_dict() for f in self.files],
            "mixed": self.mixed,
            "clean_test": self.clean_test,
            "before": self.before.to_dict(),
            "approaches": [a.to_dict() for a in self.approaches],
            "flagged": [a.name for a in self.approaches if a.flagged],
            "held_out_faults": self.held_out_faults,
            "verdict": self.verdict().to_dict(),
            "saved_to": self.saved_to,
            "device": self.device,
            "seconds": self.seconds,
            "held_out_rows": {k: v[1].tolist() for k, v in self.splits.items()},
        }


@dataclass(frozen=True)
class RepairVerdict:
    """The answer of a repair: which fine-tuning to keep, if any.

    Attributes:
        best: The approach that fixed the most held-out faults (net of the held-out inputs it
            broke) without losing more than the budget of clean test accuracy; ``None`` when
            no approach fixed any within the budget.
        fixed: Its net count of held-out faults fixed (0 without a ``best``).
        faults: Held-out faults before fine-tuning (held-out inputs the model got wrong).
        saved_to: Where the model fine-tuned on the found inputs was written, if anywhere.
        text: The verdict as one line (what the CLI prints and the page leads with).
    """

    best: str | None
    fixed: int
    faults: int
    saved_to: str | None
    text: str

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _fixed_text(a: ApproachResult) -> str:
    if a.broken:
        return f"{a.net_fixed} ({a.fixed} fixed, {a.broken} newly wrong)"
    return str(a.fixed)


def _saved_text(saved_to: str | None, best: str | None) -> str:
    if saved_to is None:
        return "No model was saved."
    if best == "found":
        return f"Saved it as {saved_to}."
    if best is None:
        return f"The model fine-tuned on the found inputs was saved as {saved_to} all the same: no repair."
    return (f"The model saved as {saved_to} is the one fine-tuned on the found inputs, not "
            f"{best}'s.")


def repair_verdict(approaches, *, faults: int, max_drop: float, saved_to: str | None = None) -> RepairVerdict:
    """Which fine-tuning fixed the most held-out faults within the accuracy budget.

    An approach is within the budget when it is not flagged (it lost at most ``max_drop``
    points of clean test accuracy); among those, the one with the largest net count of
    held-out faults fixed (``fixed - broken``, over every file's held-out inputs) wins, ties
    going to the larger accuracy change, then to the earlier approach (``found`` first). No
    approach wins when none fixed a fault net within the budget; the text then says why.

    Args:
        approaches: :class:`ApproachResult` s, ``found`` first.
        faults: Held-out inputs the model got wrong before fine-tuning.
        max_drop: The budget, points of clean test accuracy.
        saved_to: Where the model fine-tuned on the found inputs was written (``None``: nowhere).

    Returns:
        A :class:`RepairVerdict`.
    """
    budget = f"the {max_drop:g}-point accuracy budget"
    within = [a for a in approaches if not a.flagged and a.net_fixed > 0]
    if faults == 0:
        text = ("no verdict: no held-out input was wrong before fine-tuning, so there was no held-out fault "
                "to fix (hold out more with --holdout, or give files of inputs the model fails on).")
        return RepairVerdict(None, 0, 0, saved_to, f"{text} {_saved_text(saved_to, None)}")
    if not within:
        why = []
        for a in approaches:
            if a.flagged and a.net_fixed > 0:
                why.append(f"{a.name} fixed {_fixed_text(a)} but lost {-a.test_change:.2f} points")
            elif a.flagged:
                why.append(f"{a.name} fixed none and lost {-a.test_change:.2f} points")
            else:
                why.append(f"{a.name} fixed {_fixed_text(a) if a.fixed else 'none'}")
        text = (f"no fine-tuning fixed a held-out fault within {budget} ({faults} held-out faults): "
                f"{'; '.join(why)}.")
        return RepairVerdict(None, 0, faults, saved_to, f"{text} {_saved_text(saved_to, None)}")
    order = {id(a): i for i, a in enumerate(approaches)}
    best = max(within, key=lambda a: (a.net_fixed, a.test_change, -order[id(a)]))
    rest = "; ".join(f"{a.name} {_fixed_text(a)}"
                     + (f" but lost {-a.test_change:.2f} points" if a.flagged else "")
                     for a in approaches if a is not best)
    what = "the found inputs" if best.name == "found" else f"{best.name} inputs"
    text = (f"fine-tuning on {what} fixed the most held-out faults within {budget}: {_fixed_text(best)} of "
            f"{faults}, at {best.test_change:+.2f} points of clean test accuracy"
            + (f" (others: {rest})." if rest else "."))
    return RepairVerdict(best.name, best.net_fixed, faults, saved_to,
                         f"{text} {_saved_text(saved_to, best.name)}")
