"""Findings: what one run found, ready to be added to a corpus.

Each method's outcome that finds failing inputs answers ``findings()`` with one of these
(``regress``: its regression faults; ``xplore``: its difference-inducing inputs; ``run``: the
synthesized inputs that change the model's prediction), so that a command adds them with one
call and no command decides what an expected label is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from .corpus import RegressionCorpus
from .provenance import Provenance

__all__ = ["Findings"]


@dataclass(frozen=True)
class Findings:
    """Inputs a run found failing, each with the label it should get, and where they came from.

    Attributes:
        inputs: ``(N, *input_shape)`` float32.
        labels: ``(N,)`` int64 expected labels.
        provenance: the run, its models and its method.
        dataset: the data set's name (:attr:`deepfault.data.Dataset.name`), which the corpus must
            have been made for.
        num_classes: the class count (``None``: unknown).
    """

    inputs: np.ndarray
    labels: np.ndarray
    provenance: Provenance
    dataset: str
    num_classes: int | None = None

    @property
    def input_shape(self) -> tuple[int, ...]:
        """One input's shape."""
        return tuple(int(d) for d in self.inputs.shape[1:])

    def __len__(self) -> int:
        return len(self.labels)

    def add_to(self, path: str | os.PathLike) -> int:
        """Add these to the corpus at ``path`` (made where it does not exist yet, for this data set,
        input shape and class count; refused where it was made for others). Nothing found makes
        no corpus.

        Returns:
            The number of new entries.
        """
        if not len(self):
            return 0
        corpus = RegressionCorpus.open(path, create=True, dataset=self.dataset, input_shape=self.input_shape,
                                       num_classes=self.num_classes)
        return corpus.add(self.inputs, self.labels, self.provenance)
