"""The held-out comparison's statistics: pure functions of counts, and the streaming tally.

- :func:`accuracy_interval`: the Clopper-Pearson ("exact") interval of a proportion, from the
  beta distribution (docs/decisions.md says why not Wilson's);
- :func:`mcnemar_exact`: the exact McNemar test, a two-sided binomial test of the discordant
  pairs at one half;
- :class:`Tally`: M1's and M2's predictions folded batch by batch into counts, overall
  and per class, and the worst flipped and disagreeing inputs kept in a bounded buffer, so
  memory does not grow with the inputs.

Definitions (Yan et al., CVPR 2021): a *negative flip* is an input M1 classifies right and
M2 wrong, a *positive flip* the reverse; each rate is over all labelled inputs (a class's,
over the inputs of that class).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

__all__ = ["accuracy_interval", "mcnemar_exact", "Tally", "Kept"]


def accuracy_interval(right: int, total: int, alpha: float = 0.05) -> tuple[float, float]:
    """The ``1 - alpha`` Clopper-Pearson interval of ``right / total``.

    ``lo = B(alpha/2; k, n-k+1)``, ``hi = B(1-alpha/2; k+1, n-k)`` with ``B`` the beta
    distribution's quantile, ``lo = 0`` at ``k = 0`` and ``hi = 1`` at ``k = n``
    (statsmodels' ``proportion_confint(method="beta")``). ``(nan, nan)`` for no input.
    """
    from scipy.stats import beta  # noqa: PLC0415  (scipy only when a gate runs)

    if total <= 0:
        return (float("nan"), float("nan"))
    lo = 0.0 if right == 0 else float(beta.ppf(alpha / 2, right, total - right + 1))
    hi = 1.0 if right == total else float(beta.ppf(1 - alpha / 2, right + 1, total - right))
    return (lo, hi)


def mcnemar_exact(negative: int, positive: int) -> float:
    """The exact McNemar p-value of the discordant pairs: M1 right and M2 wrong (``negative``)
    against the reverse (``positive``), a two-sided binomial test of ``min(b, c)`` in ``b + c``
    at ``p = 1/2`` (statsmodels' ``mcnemar(exact=True)``); ``1.0`` without a discordant pair.
    """
    from scipy.stats import binomtest  # noqa: PLC0415

    n = negative + positive
    if n == 0:
        return 1.0
    return float(min(1.0, binomtest(min(negative, positive), n, 0.5).pvalue))


@dataclass
class Kept:
    """The ``size`` inputs of the highest score seen so far, ties to the earlier input.

    Attributes:
        size: How many are kept.
        score: ``(K,)`` their scores.
        index: ``(K,)`` their positions in the split.
        columns: Named ``(K, ...)`` arrays kept alongside (inputs, labels, predictions).
    """

    size: int
    score: np.ndarray = field(default_factory=lambda: np.zeros(0))
    index: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    columns: dict[str, np.ndarray] = field(default_factory=dict)

    def offer(self, score: np.ndarray, index: np.ndarray, **columns: np.ndarray) -> None:
        """Merge a batch's candidates and keep the best :attr:`size`."""
        if len(score) == 0:
            return
        if not self.columns:
            self.columns = {k: v[:0] for k, v in columns.items()}
        s = np.concatenate([self.score, score])
        i = np.concatenate([self.index, index])
        order = np.lexsort((i, -s))[: self.size]
        self.score, self.index = s[order], i[order]
        self.columns = {k: np.concatenate([self.columns[k], v])[order] for k, v in columns.items()}

    def merge(self, other: Kept) -> Kept:
        """Keep the best :attr:`size` of both (another shard's, its indices in the same split)."""
        if len(other.score):
            self.offer(other.score, other.index, **other.columns)
        return self

    def to_dict(self) -> list[dict]:
        """One record per kept input, best first (its inputs left out)."""
        rows = []
        for r in range(len(self.index)):
            row = {"index": int(self.index[r]), "score": float(self.score[r])}
            row.update({k: v[r].item() for k, v in self.columns.items() if k != "inputs"})
            rows.append(row)
        return rows


class _Batch:
    """One batch's predictions, computed once; its inputs on the CPU only when one is kept."""

    def __init__(self, start: int, inputs: torch.Tensor, prob1: torch.Tensor, prob2: torch.Tensor):
        self.prob1, self.prob2, self._inputs = prob1, prob2, inputs
        self.p1 = prob1.argmax(1).cpu().numpy()
        self.p2 = prob2.argmax(1).cpu().numpy()
        self.index = np.arange(start, start + len(self.p1))
        self._x: np.ndarray | None = None

    @property
    def x(self) -> np.ndarray:
        if self._x is None:
            self._x = self._inputs.detach().cpu().numpy()
        return self._x


@dataclass
class Tally:
    """M1 and M2 compared on a split, folded batch by batch (:meth:`update`).

    Attributes:
        num_classes: The classifier's classes.
        worst: How many flipped and disagreeing inputs are kept.
        keep_flips: How many negative flips' inputs are kept for the corpus (bounded memory).
        total: Inputs seen.
        labelled: Whether the inputs had labels (all or none).
        disagree: Inputs where the two predictions differ.
        support, right1, right2, negative, positive: ``(C,)`` per true class: inputs, M1
            right, M2 right, negative flips, positive flips.
        flips: The worst negative flips, by M2's confidence in its wrong class.
        disagreements: The disagreeing inputs M1 is least sure of (smallest top-1 minus top-2
            margin, Hu et al. 2022), first.
        corpus: The negative flips' inputs and labels for the corpus (at most ``keep_flips``).
        spread: The workers a spread pass ran on (:class:`~deepfault.core.shards.Spread`), or ``None``.
    """

    num_classes: int
    worst: int = 16
    keep_flips: int = 10_000
    total: int = 0
    labelled: bool | None = None
    disagree: int = 0
    support: np.ndarray = field(init=False)
    right1: np.ndarray = field(init=False)
    right2: np.ndarray = field(init=False)
    negative: np.ndarray = field(init=False)
    positive: np.ndarray = field(init=False)
    flips: Kept = field(init=False)
    disagreements: Kept = field(init=False)
    corpus: list = field(init=False, default_factory=list)
    spread: Any = field(init=False, default=None)

    def __post_init__(self) -> None:
        for name in ("support", "right1", "right2", "negative", "positive"):
            setattr(self, name, np.zeros(self.num_classes, dtype=np.int64))
        self.flips = Kept(self.worst)
        self.disagreements = Kept(self.worst)

    def _count(self, mask: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.bincount(y[mask], minlength=self.num_classes)[: self.num_classes]

    def update(
        self,
        start: int,
        inputs: torch.Tensor,
        prob1: torch.Tensor,
        prob2: torch.Tensor,
        labels: torch.Tensor | None,
    ) -> None:
        """Fold one batch: ``inputs[k]`` is input ``start + k``; ``prob1``, ``prob2`` are
        ``(B, C)`` class probabilities; ``labels`` ``(B,)`` or ``None``.
        """
        has = labels is not None
        if self.labelled is not None and self.labelled != has:
            from ..errors import DeepFaultError  # noqa: PLC0415

            raise DeepFaultError(
                "the held-out inputs must all have labels or none; a batch at input "
                f"{start} {'has' if has else 'lacks'} them"
            )
        self.labelled = has
        batch = _Batch(start, inputs, prob1, prob2)
        self._disagreements(batch)
        if labels is not None:
            self._flips(batch, labels.cpu().numpy().astype(np.int64))

    def _disagreements(self, b: _Batch) -> None:
        """Count the disagreements; keep those M1 is least sure of (smallest top-1 minus top-2)."""
        top = torch.topk(b.prob1, min(2, b.prob1.shape[1]), dim=1).values.cpu().numpy()
        margin = top[:, 0] - (top[:, 1] if top.shape[1] > 1 else 0.0)
        differ = b.p1 != b.p2
        self.total += len(b.p1)
        self.disagree += int(differ.sum())
        if differ.any():
            self.disagreements.offer(
                -margin[differ],
                b.index[differ],
                inputs=b.x[differ],
                m1=b.p1[differ],
                m2=b.p2[differ],
                margin=margin[differ],
            )

    def _flips(self, b: _Batch, y: np.ndarray) -> None:
        """Count rights and flips per class; keep the flips M2 is surest of, and some for the corpus."""
        ok1, ok2 = b.p1 == y, b.p2 == y
        neg, pos = ok1 & ~ok2, ~ok1 & ok2
        self.support += np.bincount(y, minlength=self.num_classes)[: self.num_classes]
        self.right1 += self._count(ok1, y)
        self.right2 += self._count(ok2, y)
        self.negative += self._count(neg, y)
        self.positive += self._count(pos, y)
        if not neg.any():
            return
        conf2 = b.prob2.max(1).values.cpu().numpy()
        self.flips.offer(
            conf2[neg],
            b.index[neg],
            inputs=b.x[neg],
            label=y[neg],
            m1=b.p1[neg],
            m2=b.p2[neg],
            confidence=conf2[neg],
        )
        room = self.keep_flips - sum(len(c[1]) for c in self.corpus)
        if room > 0:
            self.corpus.append((b.x[neg][:room], y[neg][:room]))

    def merge(self, other: Tally) -> Tally:
        """Fold in ``other``, the tally of the inputs after this one's (a later shard): the counts
        add up, the kept inputs are the best of both, the corpus keeps its first inputs.
        """
        if other.labelled is not None:
            if self.labelled is not None and self.labelled != other.labelled:
                from ..errors import DeepFaultError  # noqa: PLC0415

                raise DeepFaultError("the held-out inputs must all have labels or none")
            self.labelled = other.labelled
        self.total += other.total
        self.disagree += other.disagree
        for name in ("support", "right1", "right2", "negative", "positive"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.flips.merge(other.flips)
        self.disagreements.merge(other.disagreements)
        for x, y in other.corpus:
            room = self.keep_flips - sum(len(c[1]) for c in self.corpus)
            if room > 0:
                self.corpus.append((x[:room], y[:room]))
        return self

    def corpus_inputs(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The kept negative flips as ``(inputs, labels)``, ``None`` when there is none."""
        if not self.corpus:
            return None
        return np.concatenate([c[0] for c in self.corpus]), np.concatenate([c[1] for c in self.corpus])
