"""Stage 1, the held-out comparison: both models over one split, one forward pass each.

The two models run batch by batch side by side (:func:`deepfault.core.batches.iterate_batches`
for each, with one batch size so their slices line up) and each batch is folded into a
:class:`~.stats.Tally`; nothing grows with the inputs but the bounded buffers of the
worst flips. :class:`HeldOutResult` holds the numbers the verdict judges.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..core.batches import iterate_batches
from ..core.capture import eval_mode
from ..core.memory import AUTO, resolve_batch_size
from ..core.runtime import Runtime
from ..coverage.uncertainty import probabilities
from ..fuzz.pair import Pair
from .config import GateConfig
from .stats import Tally, accuracy_interval, mcnemar_exact

__all__ = ["HeldOutResult", "ClassFlips", "compare_heldout", "summarise"]


@dataclass(frozen=True)
class ClassFlips:
    """One class's flips and recalls on the labelled split.

    Attributes:
        label: The class index.
        name: Its name.
        support: Its inputs.
        negative_flips, positive_flips: Its inputs M1 gets right and M2 wrong, and the reverse.
        negative_flip_rate, positive_flip_rate: Those over ``support`` (0 without inputs).
        recall_m1, recall_m2: Each model's recall of the class (``None`` without inputs).
        recall_delta: ``recall_m2 - recall_m1`` (``None`` without inputs).
    """

    label: int
    name: str
    support: int
    negative_flips: int
    positive_flips: int
    negative_flip_rate: float
    positive_flip_rate: float
    recall_m1: float | None
    recall_m2: float | None
    recall_delta: float | None

    def to_dict(self) -> dict:
        """The class's record in the result document."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class HeldOutResult:
    """The held-out comparison's numbers.

    Attributes:
        inputs: Inputs compared.
        labelled: Whether they had labels (the accuracy, flip and McNemar fields are ``None``
            without).
        disagree: Inputs where M1's and M2's classes differ; ``disagreement_rate`` its share.
        accuracy_m1, accuracy_m2: Each model's accuracy; ``interval_m1``, ``interval_m2`` their
            ``1 - alpha`` Clopper-Pearson intervals.
        accuracy_delta: ``accuracy_m2 - accuracy_m1``.
        negative_flips, positive_flips: Inputs M1 gets right and M2 wrong, and the reverse (the
            discordant pairs); ``negative_flip_rate``, ``positive_flip_rate`` over all inputs.
        mcnemar_p: The exact McNemar test's p-value on the discordant pairs.
        classes: One :class:`ClassFlips` per class.
        worst_flips: The negative flips M2 is most confident about, first (index, label, both
            predictions, M2's confidence).
        flip_inputs: ``(K, ...)`` their inputs, same order.
        disagreements: The disagreeing inputs with the smallest M1 margin (top-1 minus top-2
            probability), first.
        disagreement_inputs: ``(K, ...)`` their inputs.
        complete: ``False`` when the stage was interrupted (the numbers cover ``inputs``).
    """

    inputs: int
    labelled: bool
    disagree: int
    disagreement_rate: float
    accuracy_m1: float | None = None
    accuracy_m2: float | None = None
    interval_m1: tuple[float, float] | None = None
    interval_m2: tuple[float, float] | None = None
    accuracy_delta: float | None = None
    negative_flips: int | None = None
    positive_flips: int | None = None
    negative_flip_rate: float | None = None
    positive_flip_rate: float | None = None
    mcnemar_p: float | None = None
    classes: tuple[ClassFlips, ...] = ()
    worst_flips: tuple[dict, ...] = ()
    flip_inputs: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32), repr=False)
    disagreements: tuple[dict, ...] = ()
    disagreement_inputs: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32), repr=False)
    complete: bool = True

    def class_named(self, label: int) -> ClassFlips:
        """The record of class ``label``."""
        return self.classes[label]

    def to_dict(self) -> dict:
        """The stage's record in the result document (no inputs)."""
        out = {k: v for k, v in self.__dict__.items() if k not in ("flip_inputs", "disagreement_inputs")}
        out["classes"] = [c.to_dict() for c in self.classes]
        out["worst_flips"] = list(self.worst_flips)
        out["disagreements"] = list(self.disagreements)
        for k in ("interval_m1", "interval_m2"):
            out[k] = None if out[k] is None else list(out[k])
        return out


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def summarise(
    tally: Tally, class_names: tuple[str, ...], *, alpha: float, complete: bool = True
) -> HeldOutResult:
    """The numbers of a :class:`~.stats.Tally` (intervals at ``1 - alpha``)."""
    n = tally.total
    common: dict[str, Any] = {
        "inputs": n,
        "labelled": bool(tally.labelled),
        "disagree": tally.disagree,
        "disagreement_rate": _share(tally.disagree, n),
        "complete": complete,
        "disagreements": tuple(tally.disagreements.to_dict()),
        "disagreement_inputs": tally.disagreements.columns.get("inputs", np.zeros(0, np.float32)),
    }
    if not tally.labelled:
        return HeldOutResult(**common)
    r1, r2 = int(tally.right1.sum()), int(tally.right2.sum())
    neg, pos = int(tally.negative.sum()), int(tally.positive.sum())
    classes = []
    for c in range(tally.num_classes):
        s = int(tally.support[c])
        rec1 = tally.right1[c] / s if s else None
        rec2 = tally.right2[c] / s if s else None
        classes.append(
            ClassFlips(
                label=c,
                name=str(class_names[c]) if c < len(class_names) else str(c),
                support=s,
                negative_flips=int(tally.negative[c]),
                positive_flips=int(tally.positive[c]),
                negative_flip_rate=_share(int(tally.negative[c]), s),
                positive_flip_rate=_share(int(tally.positive[c]), s),
                recall_m1=None if rec1 is None else float(rec1),
                recall_m2=None if rec2 is None else float(rec2),
                recall_delta=None if s == 0 else float((tally.right2[c] - tally.right1[c]) / s),
            )
        )
    return HeldOutResult(
        **common,
        accuracy_m1=_share(r1, n),
        accuracy_m2=_share(r2, n),
        interval_m1=accuracy_interval(r1, n, alpha),
        interval_m2=accuracy_interval(r2, n, alpha),
        accuracy_delta=_share(r2 - r1, n),
        negative_flips=neg,
        positive_flips=pos,
        negative_flip_rate=_share(neg, n),
        positive_flip_rate=_share(pos, n),
        mcnemar_p=mcnemar_exact(neg, pos),
        classes=tuple(classes),
        worst_flips=tuple(tally.flips.to_dict()),
        flip_inputs=tally.flips.columns.get("inputs", np.zeros(0, np.float32)),
    )


def compare_heldout(
    pair: Pair,
    inputs,
    labels,
    config: GateConfig,
    *,
    num_classes: int,
    batch_size: int | str = AUTO,
    progress: bool = False,
    runtime: Runtime | None = None,
) -> tuple[HeldOutResult, Tally]:
    """Compare the pair's champion and challenger on ``inputs``, one pass each.

    Args:
        pair: The prepared champion (``p1``) and challenger (``p2``), and their data set (the
            class names).
        inputs: ``(N, ...)`` array, tensor or memory map in the models' native layout.
        labels: ``(N,)`` class labels, or ``None`` (the disagreement only).
        config: The gate's config: ``alpha`` (the intervals are ``1 - alpha``) and ``worst``
            (flipped and disagreeing inputs kept).
        num_classes: The models' classes.
        batch_size: Inputs per forward pass of each model, or ``"auto"``.
        progress: Show a progress bar.
        runtime: Where ``runtime.parallel`` names several workers, the pass spreads over them
            (:mod:`deepfault.core.shards`; the counts add up exactly, the kept inputs are the
            same) and the tally's ``spread`` says where it ran.

    Returns:
        ``(result, tally)``; on ``KeyboardInterrupt`` the interruption propagates.
    """
    p1, p2 = pair.p1, pair.p2
    if batch_size == AUTO:
        batch_size = min(resolve_batch_size(p.module, inputs[:1], AUTO, count=len(inputs)) for p in (p1, p2))
    if runtime is not None and runtime.parallel.spread:
        tally = _spread_tally(pair, inputs, labels, config, num_classes, int(batch_size), runtime)
        return summarise(tally, pair.data.class_names, alpha=config.alpha), tally
    tally = _tally(p1, p2, inputs, labels, Tally(num_classes, worst=config.worst), int(batch_size), progress)
    return summarise(tally, pair.data.class_names, alpha=config.alpha), tally


def _tally(p1, p2, inputs, labels, tally: Tally, batch_size: int, progress: bool, start: int = 0) -> Tally:
    """The held-out pass of the pair's prepared models over ``inputs`` (input ``k`` is input
    ``start + k`` of the split), folded into ``tally``.
    """
    first = iterate_batches(
        p1.module,
        inputs,
        labels=labels,
        neurons=False,
        batch_size=batch_size,
        progress="held-out" if progress else False,
    )
    second = iterate_batches(p2.module, inputs, neurons=False, batch_size=batch_size)
    # The two loops' contexts (eval mode, inference mode) interleave: entered here once around
    # both and the loops closed last-in first-out, so that the caller's modes come back whatever
    # order the loops end in (an interruption included).
    with eval_mode(p1.module), eval_mode(p2.module), torch.inference_mode():
        try:
            for b1, b2 in zip(first, second, strict=True):
                tally.update(
                    start + b1.start,
                    b1.inputs,
                    probabilities(b1.outputs, output_kind=p1.output_kind),
                    probabilities(b2.outputs, output_kind=p2.output_kind),
                    b1.labels,
                )
        finally:
            for loop in (second, first):
                getattr(loop, "close", lambda: None)()  # a generator: its contexts exit now, in order
    return tally


@dataclass(frozen=True)
class _Side:
    """What a worker needs of one prepared model: its module and output kind."""

    module: Any
    output_kind: str


def _heldout_shard(modules: tuple, columns: tuple, options: tuple, context) -> Tally:
    """One shard's tally (a worker's job of :func:`_spread_tally`)."""
    kinds, num_classes, worst = options
    x, y = columns
    p1, p2 = (_Side(m, k) for m, k in zip(modules, kinds, strict=True))
    return _tally(p1, p2, x, y, Tally(num_classes, worst=worst), int(context.batch_size), False,
                  start=context.start)


def _spread_tally(pair: Pair, inputs, labels, config: GateConfig, num_classes: int, batch_size: int,
                  runtime: Runtime) -> Tally:
    """The held-out pass over the shards of ``runtime.parallel``'s workers, merged in order."""
    from ..core.shards import sharded_pass

    results, spread = sharded_pass(
        "gate heldout", _heldout_shard, (pair.p1.module, pair.p2.module), (inputs, labels),
        ((pair.p1.output_kind, pair.p2.output_kind), num_classes, config.worst),
        runtime=runtime.with_(batch_size=batch_size))
    tally = Tally(num_classes, worst=config.worst)
    for part in results:
        tally.merge(part)
    tally.spread = spread
    return tally
