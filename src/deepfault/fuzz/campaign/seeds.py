"""The seeds a campaign starts from (spec section 2): the test inputs evaluated by both models,
the roots the strategy picks among them, and the faults they already are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ...core.capture import as_tensor
from ...core.kinds import INPUT_KINDS
from ...core.mapped import release
from ...core.memory import input_bytes
from ...errors import DeepFaultError
from ..mutation.diversity import tendency_of
from .execution import ModelPair, pass_rows
from .metrics import FAULT_KINDS, FaultTable

__all__ = ["SEED_BATCH", "SEED_PASS_BYTES", "SeedEvaluation", "Seeds", "evaluate_seeds", "seed_rows",
           "select_roots", "test_inputs"]

#: Inputs per forward pass while evaluating the seeds.
SEED_BATCH = 1024
#: Bytes of activations one pass of the seeds' evaluation may take (by
#: :func:`~deepfault.core.memory.input_bytes`, on the CPU an upper bound).
SEED_PASS_BYTES = 256 << 20


def test_inputs(inputs, labels) -> tuple[torch.Tensor, np.ndarray]:
    """``(x, y)``: the test inputs (images ``(N, C, H, W)``, sequences ``(N, C, L)`` or vectors
    ``(N, F)``) as a tensor and their labels ``(N,)`` as int64.

    Raises:
        DeepFaultError: Inputs of another rank, or labels that do not match them.
    """
    x = as_tensor(inputs)
    if x.ndim - 1 not in INPUT_KINDS:
        raise DeepFaultError("regression fuzzing mutates images (N, C, H, W), sequences (N, C, L) or vectors "
                             f"(N, F); got inputs of shape {tuple(x.shape)}")
    y = np.asarray(labels.cpu() if isinstance(labels, torch.Tensor) else labels).astype(np.int64)
    if y.shape != (len(x),):
        raise DeepFaultError(f"labels must be (N,) with N = {len(x)}; got shape {y.shape}")
    return x, y


@dataclass(frozen=True)
class SeedEvaluation:
    """The candidate seeds and both models' probabilities ``(N, classes)`` on them."""

    x: torch.Tensor
    y: np.ndarray
    p1: np.ndarray
    p2: np.ndarray

    @property
    def num_classes(self) -> int:
        return int(self.p1.shape[1])


def seed_rows(pair: ModelPair, x: torch.Tensor) -> int:
    """Inputs per pass of the seeds' evaluation: :data:`SEED_BATCH`, fewer when the inputs are
    large (1,024 ViT inputs of 3x224x224 took several GB of activations: issue 26) or when
    either model's activations for that many would exceed :data:`SEED_PASS_BYTES` (a power of
    two, at least 1). Without the second bound a CIFAR ResNet-18 ran all of 128 seeds in one
    pass and all of 32 in another, so the campaign's peak grew with its seeds up to 1,024
    (bench_scale: 136 -> 213 MiB from 32 to 128). MNIST-sized models keep 1,024 rows. The
    rows depend on the models and the input's shape alone, so a campaign stays reproducible.
    """
    rows = pass_rows(tuple(x.shape[1:]), limit=SEED_BATCH)
    if len(x) == 0:
        return rows
    try:
        per = max(input_bytes(m, x[:1]) for m in (pair.m1, pair.m2))
    except DeepFaultError:  # a model that cannot take the inputs: the evaluation says which
        return rows
    by_memory = max(1, SEED_PASS_BYTES // max(1, per))
    return min(rows, 1 << (by_memory.bit_length() - 1))


def evaluate_seeds(pair: ModelPair, x: torch.Tensor, y: np.ndarray, max_seeds: int | None) -> SeedEvaluation:
    """Run the first ``max_seeds`` test inputs (all: ``None``) through both models.

    Raises:
        DeepFaultError: No inputs, models with different classes, labels outside them.
    """
    n = len(x) if max_seeds is None else min(len(x), max_seeds)
    if n == 0:
        raise DeepFaultError("no test inputs to fuzz from: the input set is empty")
    x, y = x[:n], y[:n]
    # written into arrays made once: a list of each pass's outputs kept small blocks alive
    # between the passes' large ones, and glibc's heap then grew by every pass (14 MiB for
    # 4,400 inputs of 4 KiB, one pass's activations per 1,024 inputs)
    p1 = p2 = np.zeros((0, 0), dtype=np.float32)
    rows = seed_rows(pair, x)
    for start in range(0, n, rows):
        a, b = pair.seed_probabilities(x[start : start + rows].to(pair.device))
        if start == 0:
            if a.shape[1] != b.shape[1]:
                raise DeepFaultError(
                    f"M1 has {a.shape[1]} classes and M2 {b.shape[1]}; regression fuzzing compares two "
                    "versions of one classifier, with the same classes"
                )
            p1, p2 = np.empty((n, *a.shape[1:]), dtype=a.dtype), np.empty((n, *b.shape[1:]), dtype=b.dtype)
        p1[start : start + len(a)] = a
        p2[start : start + len(b)] = b
        del a, b
        release()  # a memory-mapped data set's pages read so far go back (core/mapped.py)
    if y.max(initial=0) >= p1.shape[1] or y.min(initial=0) < 0:
        raise DeepFaultError(
            f"labels must lie in 0..{p1.shape[1] - 1} (the models' classes); got {y.min()}..{y.max()}"
        )
    return SeedEvaluation(x, y, p1, p2)


@dataclass(frozen=True)
class Seeds:
    """The roots: the test inputs a campaign's lineages start from, by dense root index.

    Attributes:
        index: ``(R,)`` each root's index in the test inputs.
        label: ``(R,)`` their labels.
        source: ``(N, ...)`` the test inputs, as given (not copied: the roots' images are
            read from them on demand by :meth:`images_at`, so a campaign holds no copy of its
            seeds beyond the queue's own).
        device: The campaign's device (where :meth:`images_at` puts them).
        p1, p2: ``(R, classes)`` both models' probabilities.
        y1, y2: ``(R,)`` both models' predictions.
    """

    index: np.ndarray
    label: np.ndarray
    source: torch.Tensor
    device: torch.device
    p1: np.ndarray
    p2: np.ndarray
    y1: np.ndarray
    y2: np.ndarray

    def images_at(self, rows) -> torch.Tensor:
        """``(k, ...)`` the images of roots ``rows`` (dense root indices) on :attr:`device`."""
        at = torch.as_tensor(self.index[np.asarray(rows, dtype=np.int64)], device=self.source.device)
        return self.source[at].to(self.device)

    @property
    def initial(self) -> np.ndarray:
        """``(R,)`` bool: roots that already are regression faults (M1 right, M2 wrong)."""
        return (self.y1 == self.label) & (self.y2 != self.label)

    @property
    def queued(self) -> np.ndarray:
        """Dense indices of the roots that join the queue (all but the initial faults)."""
        return np.flatnonzero(~self.initial)

    def queue_fields(self) -> dict[str, np.ndarray]:
        """The queue entries of :attr:`queued` (generation 0, no parent, no rule)."""
        q = self.queued
        rows = np.arange(len(self.index))
        d = self.p1[rows, self.y1] - self.p2[rows, self.y1]
        return {
            "root": q, "generation": np.zeros(len(q)), "parent": np.full(len(q), -1), "d": d[q],
            "p2_label": self.p2[q, self.label[q]],
            "tendency": tendency_of(self.p1[q], self.p2[q], self.label[q]),
            "ref": q, "affine": np.zeros(len(q), dtype=bool), "rule": np.full(len(q), -1),
        }

    def initial_faults(self) -> tuple[FaultTable, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The initial regression faults' table and their inputs and probabilities."""
        f = np.flatnonzero(self.initial)
        n = len(f)
        table = FaultTable(
            kind=np.full(n, FAULT_KINDS.index("rf"), dtype=np.int8), root=self.index[f].astype(np.int64),
            y1=self.y1[f].astype(np.int64), y2=self.y2[f].astype(np.int64), initial=np.ones(n, dtype=bool),
            elapsed=np.zeros(n), queries=np.zeros(n, dtype=np.int64), iteration=np.zeros(n, dtype=np.int64),
            ssim=np.ones(n, dtype=np.float32), rule=np.full(n, -1, dtype=np.int16),
        )
        images = self.images_at(f).cpu().numpy()
        return table, (images, self.p1[f], self.p2[f])


def select_roots(evaluation: SeedEvaluation, strategy, device: torch.device) -> Seeds:
    """The roots ``strategy`` picks among the evaluated inputs.

    Raises:
        DeepFaultError: None qualifies (the strategy's :meth:`~.strategies.FuzzStrategy.no_seed_message`).
    """
    e = evaluation
    y1, y2 = e.p1.argmax(1), e.p2.argmax(1)
    roots = np.flatnonzero(strategy.roots(y1 == e.y, y2 == e.y))
    if len(roots) == 0:
        raise DeepFaultError(strategy.no_seed_message())
    return Seeds(index=roots, label=e.y[roots], source=e.x, device=torch.device(device), p1=e.p1[roots],
                 p2=e.p2[roots], y1=y1[roots], y2=y2[roots])
