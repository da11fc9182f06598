"""Test prioritisation by coverage: order inputs "more new coverage first" and score the order
with APFD.

The order is the coverage-additional method (CAM, Rothermel et al. 2001; as in dnn-tip and
DeepGini's evaluation): repeatedly pick the input that covers the most items not covered by
the inputs picked before it (ties to the lower index); once no input adds anything, the rest
follow by their own number of covered items, largest first (the coverage-total method, CTM;
ties to the lower index). The gains of all candidates are kept in one array and lowered, after
each pick, only for the inputs that share one of the newly covered items (a column-major index
of the per-input covered sets), so a pick costs the size of what it covered, not ``N``.

APFD (average percentage of faults detected) of an order of ``n`` inputs of which ``k`` fail,
the ``i``-th failing one at position ``p_i`` (1-based):

    APFD = 1 - (p_1 + ... + p_k) / (k * n) + 1 / (2n)
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

if TYPE_CHECKING:
    from ..models.prepare import PreparedModel

from ..core.batches import iterate_batches
from ..core.capture import NeuronLayout
from ..errors import DeepFaultError
from .criteria import BitSetCriterion, Criterion
from .measure import build_criteria, check_params, parse_criteria, resolve_setup
from .profile import Profile, _module
from .results import Ranking, RankReport

__all__ = ["Ranking", "RankReport", "apfd", "prioritize", "rank_inputs"]


def apfd(order: Sequence[int] | np.ndarray, failing: np.ndarray) -> float | None:
    """APFD of ``order`` (input indices, first run first) for the ``(N,)`` bool ``failing``;
    ``None`` when nothing fails.
    """
    failing = np.asarray(failing, dtype=bool)
    order = np.asarray(order, dtype=np.int64)
    n, k = len(failing), int(failing.sum())
    if k == 0 or n == 0:
        return None
    if len(order) != n:
        raise DeepFaultError(f"the order has {len(order)} inputs but there are {n}")
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(1, n + 1)
    return float(1.0 - position[failing].sum() / (k * n) + 1.0 / (2 * n))


def _ranges(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(a, b)`` for each pair, without a Python loop."""
    lengths = stops - starts
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return offsets + np.arange(total)


def prioritize(items: np.ndarray | torch.Tensor, num_items: int) -> tuple[np.ndarray, int]:
    """Greedy additional-coverage order of inputs given their covered sets.

    Args:
        items: ``(N, L)`` int item indices each input covers (``-1`` pads; an input's
            indices are distinct).
        num_items: ``S``, the number of items.

    Returns:
        ``(order, greedy)``: the ``(N,)`` order (indices into the inputs) and how many of its
        first inputs were picked for new coverage (together they cover everything the whole
        set covers).
    """
    ids = torch.as_tensor(items).cpu().numpy().astype(np.int64, copy=False)
    n = len(ids)
    valid = ids >= 0
    rows = np.nonzero(valid)[0]  # row-major, so each row's items are contiguous
    cols = ids[valid]
    row_ptr = np.concatenate([[0], np.cumsum(valid.sum(axis=1))])
    by_col = np.argsort(cols, kind="stable")
    col_rows = rows[by_col]
    col_ptr = np.searchsorted(cols[by_col], np.arange(num_items + 1))
    totals = row_ptr[1:] - row_ptr[:-1]
    gains = totals.copy()
    covered = np.zeros(num_items, dtype=bool)
    picked = []
    while n:
        best = int(np.argmax(gains))
        if gains[best] <= 0:
            break
        picked.append(best)
        mine = cols[row_ptr[best] : row_ptr[best + 1]]
        new = mine[~covered[mine]]
        covered[new] = True
        sharing = col_rows[_ranges(col_ptr[new], col_ptr[new + 1])]
        gains -= np.bincount(sharing, minlength=n)
    chosen = np.zeros(n, dtype=bool)
    chosen[picked] = True
    rest = np.flatnonzero(~chosen)
    rest = rest[np.argsort(-totals[rest], kind="stable")]
    return np.concatenate([np.asarray(picked, dtype=np.int64), rest]), len(picked)


def rank_criterion(criterion: Criterion, values: torch.Tensor, failing: np.ndarray) -> Ranking:
    """Prioritise inputs with ``(N, M)`` neuron ``values`` by one criterion (its state is not
    used or changed).
    """
    items, num_items = criterion.input_items(values)
    order, greedy = prioritize(items, num_items)
    ids = torch.as_tensor(items).cpu().numpy()
    totals = (ids >= 0).sum(axis=1)
    covered = int(np.unique(ids[ids >= 0]).size)
    total_order = np.argsort(-totals, kind="stable")
    return Ranking(criterion.label, order, greedy, covered,
                   num_items if isinstance(criterion, BitSetCriterion) else None,
                   apfd(order, failing), apfd(total_order, failing))


def rank_inputs(
    model: nn.Module | PreparedModel,
    inputs,
    labels,
    *,
    criteria: str | Iterable[str] = ("nc",),
    threshold: float | Sequence[float] = 0.0,
    sections: int = 10,
    top_k: int = 1,
    scale: float = 0.0,
    profile: Profile | None = None,
    layers: Sequence[str] | str | None = None,
    transform: str | None = None,
    batch_size: int = 1024,
    progress: bool = False,
) -> RankReport:
    """Order ``inputs`` by additional coverage under each criterion and score each order by
    APFD of the inputs the model misclassifies.

    Args:
        model: The classifier.
        inputs: ``(N, ...)`` inputs.
        labels: ``(N,)`` true labels (an input fails when the arg-max output differs).
        criteria: Criterion names (``"nc,kmnc"``, a list, or ``"all"``); one ranking each.
        threshold: ``t`` of ``nc``/``nac``.
        sections: ``k`` of ``kmnc``.
        top_k: ``k`` of ``tknc``/``tknp``.
        scale: ``s`` of ``nbc``/``snac``.
        profile: The model's profile (needed by ``kmnc``, ``nbc``, ``snac``); it also supplies
            ``layers`` and ``transform`` when they are ``None``.
        layers: Neuron layers (``"deepxplore"``, module names, or ``None``: the default layers).
        transform: ``"raw"`` (default) or ``"layer-minmax"``.
        batch_size: Inputs per forward pass; the orders do not depend on it.
        progress: Show a progress bar over the inputs.

    Returns:
        A :class:`RankReport`. Holds the ``(N, M)`` neuron values in memory while ranking.

    Raises:
        DeepFaultError: As :func:`~deepfault.coverage.measure.measure_coverage`, and labels
            that are missing (``None``), do not match the inputs, or are no class of the model
            (negative, ``>=`` its number of outputs, NaN or fractional).
    """
    from ..checks import MAX_CLASSES, check_labels

    model = _module(model)
    names = parse_criteria(criteria)
    check_params(names, threshold=threshold, sections=sections, top_k=top_k, scale=scale, profile=profile)
    layers, transform = resolve_setup(model, profile, layers, transform)
    if len(inputs) == 0:
        raise DeepFaultError("no inputs: the input set is empty")
    labels = check_labels("labels", labels, MAX_CLASSES, count=len(inputs))
    t0 = time.perf_counter()
    values: list[torch.Tensor] = []
    wrong: list[np.ndarray] = []
    layout: NeuronLayout | None = None
    for batch in iterate_batches(model, inputs, labels=labels, layers=layers, transform=transform,
                                 batch_size=batch_size,
                                 progress=progress and "rank"):
        assert batch.values is not None  # neurons are captured
        assert batch.layout is not None
        assert batch.labels is not None  # labels are given
        layout = batch.layout
        if not values:  # the first batch tells the number of classes
            check_labels("labels", labels, int(batch.outputs.shape[1]), count=len(inputs))
        values.append(batch.values.cpu())
        wrong.append((batch.outputs.argmax(dim=1).cpu() != batch.labels).numpy())
    assert layout is not None  # inputs are not empty: there was a batch
    if profile is not None:
        profile.check_layout(layout)
    all_values = torch.cat(values)
    failing = np.concatenate(wrong)
    crits = build_criteria(names, layout, threshold=threshold, sections=sections, top_k=top_k,
                           scale=scale, profile=profile)
    rankings = tuple(rank_criterion(c, all_values, failing) for c in crits)
    return RankReport(rankings, failing, layout, transform,
                      None if profile is None else profile.to_dict(), time.perf_counter() - t0)
