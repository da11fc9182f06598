"""What a repair reports: the model before and after each approach, on the test split and on
every file's held-out inputs (frozen dataclasses with ``to_dict()``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from torch import nn

from ..core.summary import Summarised
from .config import RepairConfig

__all__ = ["Evaluation", "FileSummary", "ApproachResult", "RepairResult"]


@dataclass(frozen=True)
class Evaluation:
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
        after: The fine-tuned model's :class:`Evaluation`.
        test_change: Change of test accuracy in percentage points (after - before).
        flagged: The change is a loss of more than ``config.max_drop`` points.
        train_loss: Mean loss of the last epoch.
        seconds: Time to make the inputs and fine-tune.
    """

    name: str
    inputs: int
    after: Evaluation
    test_change: float
    flagged: bool
    train_loss: float
    seconds: float

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "inputs": self.inputs,
            "after": self.after.to_dict(),
            "test_change": self.test_change,
            "flagged": self.flagged,
            "train_loss": self.train_loss,
            "seconds": self.seconds,
        }


def _mean_held(e: Evaluation) -> float | None:
    values = [v for v in e.held_out.values() if v is not None]
    return sum(values) / len(values) if values else None


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


@dataclass(frozen=True, eq=False, repr=False)
class RepairResult(Summarised):
    """One repair.

    Attributes:
        config: The settings.
        model_name: How the model is named (file name or architecture).
        dataset: The data set's name.
        files: One :class:`FileSummary` per input file.
        before: The model's :class:`Evaluation` before any fine-tuning.
        approaches: ``found`` first, then the baselines.
        mixed: Training inputs mixed into every fine-tuning.
        clean_test: Test inputs in ``clean_test_accuracy``.
        splits: ``{file name: (train_rows, held_rows)}`` rows of each file (disjoint).
        model: The model fine-tuned on the found inputs (on the CPU, ``eval()`` mode).
        device: Where it ran.
        seconds: Wall-clock time.
    """

    config: RepairConfig
    model_name: str
    dataset: str
    files: tuple[FileSummary, ...]
    before: Evaluation
    approaches: tuple[ApproachResult, ...]
    mixed: int
    clean_test: int
    splits: dict[str, tuple[np.ndarray, np.ndarray]]
    model: nn.Module
    device: str = "cpu"
    seconds: float = 0.0

    @property
    def found(self) -> ApproachResult:
        return self.approaches[0]

    def approach(self, name: str) -> ApproachResult:
        for a in self.approaches:
            if a.name == name:
                return a
        raise KeyError(f"no approach {name!r}; ran: {', '.join(a.name for a in self.approaches)}")

    def headline(self) -> str:
        f = self.found
        return (f"fine-tuning on the found inputs: held-out accuracy {_pct(_mean_held(self.before))} -> "
                f"{_pct(_mean_held(f.after))}, test accuracy {f.test_change:+.2f} points"
                + (" (over the accuracy budget)" if f.flagged else ""))

    def best(self) -> ApproachResult | None:
        """The fine-tuning that fixed the most held-out inputs within the accuracy budget."""
        ok = [a for a in self.approaches if not a.flagged and _mean_held(a.after) is not None]
        return max(ok, key=lambda a: _mean_held(a.after) or 0.0) if ok else None

    def summary(self) -> str:
        """The verdict first (the best fine-tuning within the budget), then every approach."""
        best = self.best()
        verdict = ("no fine-tuning stayed within the accuracy budget" if best is None else
                   f"best within the budget: {best.name} (held-out {_pct(_mean_held(best.after))})")
        lines = [f"repair of {self.model_name}: {verdict}",
                 f"  before: test {_pct(self.before.test_accuracy)}, "
                 f"held-out {_pct(_mean_held(self.before))}"]
        for a in self.approaches:
            flag = "  over the budget" if a.flagged else ""
            lines.append(f"  {a.name}: test {_pct(a.after.test_accuracy)} ({a.test_change:+.2f} points), "
                         f"held-out {_pct(_mean_held(a.after))}, {a.inputs} inputs{flag}")
        return "\n".join(lines)

    def rows(self) -> list[dict]:
        return [{"approach": a.name, "inputs": a.inputs, "test_accuracy": a.after.test_accuracy,
                 "test_change": a.test_change, "held_out": _mean_held(a.after), "flagged": a.flagged,
                 "seconds": a.seconds} for a in self.approaches]

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
            "device": self.device,
            "seconds": self.seconds,
            "held_out_rows": {k: v[1].tolist() for k, v in self.splits.items()},
        }
