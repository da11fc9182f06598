"""Labels of failing inputs, from where they are defined.

- ``run`` (synthesized inputs) and ``regress`` (regression faults): the label of the test
  input they were made from (for regression faults M1's prediction, which is that label).
- ``xplore`` (difference-inducing inputs): the majority vote of the models' predictions
  saved with the inputs (DeepXplore section 7.3), or one named model's prediction. A vote
  is *tied* when two or more classes share the most votes (with two models every
  difference-inducing input is a tie); tied inputs are dropped (``ties="drop"``, the
  default: a tie says no label) or given the class every model predicted for their seed
  (``ties="seed"``: DeepXplore's transformations are meant to keep the label).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import DeepFaultError
from .inputs import InputFile

__all__ = ["Labelled", "majority_vote", "label_inputs"]


def majority_vote(predictions: np.ndarray, num_classes: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The most-voted class of each row and whether that vote is tied.

    Args:
        predictions: ``(F, n)`` integer class per input and model.
        num_classes: Classes (default: ``max + 1``).

    Returns:
        ``(labels, tied)``, both ``(F,)``: the smallest class among those with the most votes,
        and ``True`` where more than one class has the most votes.
    """
    predictions = np.asarray(predictions, dtype=np.int64)
    if predictions.ndim != 2:
        raise DeepFaultError(f"predictions must be (inputs, models); got shape {predictions.shape}")
    if len(predictions) and predictions.shape[1] == 0:
        raise DeepFaultError("majority vote of no model: predictions has no column; give at least one "
                             "model's predictions (the labels are their vote)")
    if predictions.size == 0:
        return np.zeros(len(predictions), np.int64), np.zeros(len(predictions), bool)
    k = int(num_classes or predictions.max() + 1)
    counts = np.zeros((len(predictions), k), np.int64)
    np.add.at(counts, (np.repeat(np.arange(len(predictions)), predictions.shape[1]), predictions.ravel()), 1)
    top = counts.max(1)
    return counts.argmax(1), (counts == top[:, None]).sum(1) > 1


@dataclass(frozen=True, eq=False)
class Labelled:
    """One input file with its labels.

    Attributes:
        file: The file read.
        rows: ``(U,)`` the rows of the file that are used (tied votes dropped).
        labels: ``(U,)`` their labels.
        source: Where the labels come from (``"original labels"``, ``"majority vote of ..."``, ...).
        ties: Tied votes (``xplore`` files; 0 otherwise).
        tie_policy: What was done with them (``drop`` or ``seed``); ``None`` when not voted.
    """

    file: InputFile
    rows: np.ndarray
    labels: np.ndarray
    source: str
    ties: int = 0
    tie_policy: str | None = None

    @property
    def inputs(self) -> np.ndarray:
        return self.file.inputs[self.rows]

    @property
    def seed_index(self) -> np.ndarray:
        return self.file.seed_index[self.rows]

    def to_dict(self) -> dict:
        return {
            "file": str(self.file.path),
            "kind": self.file.kind,
            "inputs": len(self.file),
            "used": len(self.rows),
            "source": self.source,
            "ties": self.ties,
            "tie_policy": self.tie_policy,
        }


def _needed(values: np.ndarray | None, file: InputFile, name: str) -> np.ndarray:
    """``values``, an array a file of this kind always has (an error naming it when missing)."""
    if values is None:
        raise DeepFaultError(f"{file.name} is a {file.kind} file without its {name!r}; write it again with "
                             f"'deepfault {file.kind}'")
    return values


def label_inputs(
    file: InputFile,
    *,
    vote_model: str | int | None = None,
    ties: str = "drop",
    num_classes: int | None = None,
) -> Labelled:
    """Label the inputs of ``file`` (see the module docstring).

    Args:
        file: An input file.
        vote_model: For ``xplore`` files: label with this model's prediction (a name from the
            file's ``model_names`` or an index) instead of the majority vote.
        ties: ``drop`` or ``seed``.
        num_classes: Classes of the task.

    Raises:
        DeepFaultError: An unknown ``vote_model``.
    """
    everything = np.arange(len(file))
    if file.kind in ("run", "regress"):
        source = "original labels" if file.kind == "run" else "M1's labels (the seeds' labels)"
        return Labelled(file, everything, _needed(file.labels, file, "labels"), source)
    predictions = _needed(file.predictions, file, "predictions")
    if vote_model is not None:
        names = list(file.model_names)
        if isinstance(vote_model, str) and vote_model in names:
            j = names.index(vote_model)
        elif isinstance(vote_model, int) or (isinstance(vote_model, str) and vote_model.isdigit()):
            j = int(vote_model)
            if not 0 <= j < len(names):
                raise DeepFaultError(
                    f"vote model {vote_model!r} is not one of the {len(names)} models of "
                    f"{file.name} ({', '.join(names)})"
                )
        else:
            raise DeepFaultError(
                f"vote model {vote_model!r} is not a model of {file.name}; its models: {', '.join(names)}"
            )
        return Labelled(file, everything, predictions[:, j], f"model {names[j]}'s predictions")
    labels, tied = majority_vote(predictions, num_classes)
    source = f"majority vote of {', '.join(file.model_names)}"
    if ties == "seed":
        labels = np.where(tied, _needed(file.common_class, file, "common_class"), labels)
        return Labelled(file, everything, labels, source, int(tied.sum()), ties)
    keep = np.flatnonzero(~tied)
    return Labelled(file, keep, labels[keep], source, int(tied.sum()), ties)
