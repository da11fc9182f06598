"""Test prioritisation: which inputs to look at first, and APFD of each order.

A prioritiser orders the inputs, the one most likely to be misclassified first. ``by``
names them (:func:`parse_by`):

========== ========================================================== ==============
name       order                                                      needs
========== ========================================================== ==============
gini       DeepGini ``1 - sum p_c^2``, highest first                  the outputs
margin     top-1 minus top-2 probability, lowest first                the outputs
entropy    softmax entropy, highest first                             the outputs
confidence max-softmax, lowest first                                  the outputs
lsa        likelihood-based surprise adequacy, highest first          a surprise state
dsa        distance-based surprise adequacy, highest first            a surprise state
mdsa       Mahalanobis-distance surprise adequacy, highest first      a surprise state
cam        coverage-additional order under each coverage criterion    ``(N, M)`` neuron values
ctm        coverage-total order (most covered items first)            ``(N, M)`` neuron values
========== ========================================================== ==============

(:mod:`~deepfault.coverage.uncertainty` and :mod:`~deepfault.coverage.surprise` define the
scores.) Every score order is a stable sort, so ties go to the lower input index and no order
depends on the batch size. All prioritisers share one forward pass: the uncertainty scores
come from each batch's outputs and the surprise adequacies from the activation traces of the
surprise state's layers (a second capture in the same pass), both streamed, one float per
input; only ``cam``/``ctm`` keep the ``(N, M)`` neuron values of their layers.

CAM (Rothermel et al. 2001; as in dnn-tip and DeepGini's evaluation) repeatedly picks the
input that covers the most items not covered by the inputs picked before it (ties to the
lower index); once no input adds anything, the rest follow by their own number of covered
items, largest first (CTM's order; ties to the lower index). The gains of all candidates are
kept in one array and lowered, after each pick, only for the inputs that share one of the
newly covered items (a column-major index of the per-input covered sets), so a pick costs
the size of what it covered, not ``N``.

APFD (average percentage of faults detected) of an order of ``n`` inputs of which ``k`` fail,
the ``i``-th failing one at position ``p_i`` (1-based):

    APFD = 1 - (p_1 + ... + p_k) / (k * n) + 1 / (2n)

A random order scores 0.5 on average, the ideal one (every failing input first)
``1 - k / (2n)``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from torch.utils.data import DataLoader

if TYPE_CHECKING:
    from torch import nn
    from torch.utils.data import Dataset

    from ..core.inputs import InputData
    from ..core.runtime import Runtime
    from ..core.shards import ShardContext
    from ..models.prepare import PreparedModel
    from .measure import Run

from ..core.batches import iterate_batches
from ..core.capture import NeuronLayout
from ..core.entry import entry
from ..errors import DeepFaultError
from ._legacy import labels_third, legacy_keywords
from ._shape import inputs_of, progress_label
from .config import COVERAGE_ORDERS, DEFAULT_BY, CoverageConfig, list_prioritisers, parse_by, parse_criteria
from .criteria import BitSetCriterion, Criterion
from .measure import SCORE_CRITERIA, build_criteria, prepare_run, surprise_scorer
from .results import Ranking, RankReport
from .surprise import SURPRISE_KINDS
from .uncertainty import UNCERTAINTY, priority_order, uncertainty_table

__all__ = ["COVERAGE_ORDERS", "DEFAULT_BY", "CoverageConfig", "Ranking", "RankReport", "apfd",
           "list_prioritisers", "parse_by", "prioritize", "rank_inputs"]

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
    cols, row_ptr = _sparse(items)
    return _prioritize_sparse(cols, row_ptr, num_items)


def _sparse(items: np.ndarray | torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """``(N, L)`` padded item indices as ``(cols, row_ptr)``: every input's items one after
    the other (int32 where the indices fit, else int64), and ``(N + 1,)`` int64 offsets.
    """
    ids = torch.as_tensor(items).cpu().numpy()
    valid = ids >= 0
    cols = ids[valid]  # row-major, so each row's items are contiguous
    cols = cols.astype(np.int32 if cols.size == 0 or cols.max() < 2**31 - 1 else np.int64)
    row_ptr = np.concatenate([[0], np.cumsum(valid.sum(axis=1))]).astype(np.int64)
    return cols, row_ptr


def _prioritize_sparse(cols: np.ndarray, row_ptr: np.ndarray, num_items: int) -> tuple[np.ndarray, int]:
    """:func:`prioritize` of inputs whose items are ``cols[row_ptr[i]:row_ptr[i + 1]]``."""
    n = len(row_ptr) - 1
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(row_ptr))
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


def _coverage_rankings(criterion: Criterion, values: torch.Tensor, failing: np.ndarray,
                       which: Sequence[str]) -> dict[str, Ranking]:
    """CAM and/or CTM of one criterion over ``(N, M)`` neuron ``values`` (the criterion's state
    is not used or changed).
    """
    t0 = time.perf_counter()
    items, num_items = criterion.input_items(values)
    cols, row_ptr = _sparse(items)
    return _sparse_rankings(criterion, cols, row_ptr, num_items, failing, which, time.perf_counter() - t0)


def _sparse_rankings(criterion: Criterion, cols: np.ndarray, row_ptr: np.ndarray, num_items: int,
                     failing: np.ndarray, which: Sequence[str], spent: float = 0.0) -> dict[str, Ranking]:
    """:func:`_coverage_rankings` from each input's covered items in sparse form (:func:`_sparse`)."""
    t0 = time.perf_counter() - spent
    totals = np.diff(row_ptr)
    covered = int(np.unique(cols).size)
    total = num_items if isinstance(criterion, BitSetCriterion) else None
    shared = time.perf_counter() - t0
    t1 = time.perf_counter()
    total_order = np.argsort(-totals, kind="stable")
    apfd_total = apfd(total_order, failing)
    ctm_seconds = time.perf_counter() - t1
    label = criterion.label
    out = {}
    if "cam" in which:
        t2 = time.perf_counter()
        order, greedy = _prioritize_sparse(cols, row_ptr, num_items)
        cam_apfd = apfd(order, failing)
        seconds = shared + ctm_seconds + time.perf_counter() - t2
        out["cam"] = Ranking(f"cam:{label}", "cam", order, cam_apfd, seconds, criterion=label, greedy=greedy,
                             covered=covered, total=total, apfd_total=apfd_total)
    if "ctm" in which:
        out["ctm"] = Ranking(f"ctm:{label}", "ctm", total_order, apfd_total, shared + ctm_seconds,
                             scores=totals.astype(np.float64), ascending=False, criterion=label, greedy=0,
                             covered=covered, total=total, apfd_total=apfd_total)
    return out


def rank_criterion(criterion: Criterion, values: torch.Tensor, failing: np.ndarray) -> Ranking:
    """The CAM ranking of one criterion over ``(N, M)`` neuron ``values``."""
    return _coverage_rankings(criterion, values, failing, ("cam",))["cam"]


def _output_kind(model) -> str:
    """A prepared model's output kind, else logits."""
    return str(getattr(model, "output_kind", None) or "logits")


def _score_uncertainty(outputs: torch.Tensor, names: Sequence[str], kind: str, part: slice,
                       scores: dict[str, np.ndarray], spent: dict[str, float]) -> None:
    """One batch's uncertainty scores into ``scores[name][part]``, from one softmax; the time is
    shared equally among the scores.
    """
    if not names:
        return
    t = time.perf_counter()
    for name, v in uncertainty_table(outputs, names, output_kind=kind).items():
        scores[name][part] = v.cpu().numpy()
    share = (time.perf_counter() - t) / len(names)
    for name in names:
        spent[name] += share


@labels_third(CoverageConfig)
@entry(CoverageConfig, legacy=legacy_keywords)
def rank_inputs(model: nn.Module | PreparedModel, data: InputData, config: CoverageConfig, *,
                runtime: Runtime) -> RankReport:
    """Order the inputs by each prioritiser of ``config.by`` and score each order by APFD of
    the inputs the model misclassifies, from one forward pass.

    Args:
        model: The classifier (a module or a prepared model, whose output kind the uncertainty
            scores follow: a softmax of logits; and whose training split a surprise state is
            fitted on when ``config.surprise`` is ``None``).
        data: The inputs with their labels (an input fails when the arg-max output differs): an
            ``(inputs, labels)`` pair, a torch ``Dataset`` or ``DataLoader`` of ``(input,
            label)`` items (streamed), or a deepfault data set (its test split).
        config: A :class:`~deepfault.coverage.config.CoverageConfig`: ``by`` (see the module
            table; default :data:`DEFAULT_BY`, everything that needs nothing fitted), the criteria
            of ``cam``/``ctm`` with their parameters and profile, the surprise state of
            ``lsa``/``dsa``/``mdsa``.
        runtime: A :class:`~deepfault.core.runtime.Runtime`; the orders do not depend on it.

    Returns:
        A :class:`RankReport`, one :class:`Ranking` per prioritiser in the order asked (per
        criterion for ``cam``/``ctm``). Everything streams: per input, the report keeps one
        float64 score per prioritiser and the prediction, and ``cam``/``ctm`` keep each input's
        covered items as int32 indices in sparse form (at most one per neuron).

    Raises:
        DeepFaultError: For ``cam``/``ctm`` as :func:`~deepfault.coverage.measure.measure_coverage`;
            a surprise adequacy without a state, or a state of another model; labels that are
            missing, do not match the inputs, or are no class of the model (negative, ``>=`` its
            number of outputs, NaN or fractional).

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> torch.manual_seed(0) and None
        >>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
        >>> x, y = torch.randn(50, 4), torch.randint(0, 3, (50,))
        >>> report = rank_inputs(model, (x, y), CoverageConfig(by="gini,margin,cam"))
        >>> [r.name for r in report.rankings]
        ['gini', 'margin', 'cam:nc(threshold=0)']
        >>> report.ranking("gini").order.shape
        (50,)
    """
    from ..checks import MAX_CLASSES, check_labels

    names = config.by
    coverage = [n for n in names if n in COVERAGE_ORDERS]
    crit_names = _coverage_criteria(config.criteria) if coverage else ()
    run = prepare_run(model, config, runtime, neurons=crit_names,
                      scores=any(n in SURPRISE_KINDS for n in names))
    x, labels, streamed, n, data_name = _labelled(data)
    y = None if labels is None and streamed else check_labels("labels", labels, MAX_CLASSES, count=n)
    make_items = _items_maker(crit_names, run, config) if coverage else None
    t0 = time.perf_counter()
    inputs = (x, labels if streamed else None, y, n)
    forwards = _spread_forward if runtime.parallel.spread else _forward
    predicted, y, joined, items, spent, forward, spread = forwards(run, inputs, names, _output_kind(model),
                                                                   runtime, make_items)
    rankings = _rankings(names, items, joined, predicted != y, spent)
    seconds = (time.perf_counter() - t0, forward)
    return _rank_report(run, config, tuple(rankings), items, predicted, y, seconds, data_name, spread)


def _spread_forward(run, inputs: tuple, names: Sequence[str], kind: str, runtime: Runtime, make_items):
    """:func:`_forward` over the shards of ``runtime.parallel``'s workers
    (:mod:`deepfault.core.shards`), ending in the :class:`~deepfault.core.shards.Spread`.
    """
    x, _, y, _ = inputs
    if y is None:
        raise DeepFaultError("--workers needs the labels beside the inputs (an array or a data set), not "
                             "in a stream's batches")
    t0 = time.perf_counter()
    uncertain = [p for p in names if p in UNCERTAINTY]
    surprising = [p for p in names if p in SURPRISE_KINDS]
    (predicted, joined, items, spent), spread = _spread_rank(run, x, y, names, uncertain, surprising, kind,
                                                            runtime, make_items)
    forward = time.perf_counter() - t0 - sum(spent.values()) - (0.0 if items is None else items.seconds)
    return predicted, y, joined, items, spent, forward, spread


def _forward(run, inputs: tuple, names: Sequence[str], kind: str, runtime: Runtime, make_items):
    """The one forward pass of :func:`rank_inputs` over ``inputs`` (``(x, the labels that come
    with the batches or None, the checked labels or None, N)``): ``(predictions, labels, scores
    by name, items or None, seconds by name, the forward pass's own seconds, None)`` (the last:
    the pass ran here, :func:`_spread_forward`'s ``Spread``).
    """
    from ..checks import MAX_CLASSES, check_labels

    x, streamed_labels, y, n = inputs
    uncertain = [p for p in names if p in UNCERTAINTY]
    surprising = [p for p in names if p in SURPRISE_KINDS]
    t0 = time.perf_counter()
    spent = dict.fromkeys(names, 0.0)
    with surprise_scorer(run.module, run.state, surprising, spent) as score_batch:
        batches = iterate_batches(run.module, x, labels=streamed_labels, neurons=make_items is not None,
                                  layers=run.layers, transform=run.transform, batch_size=runtime.batch_size,
                                  progress=progress_label(runtime, "rank"))
        predicted, seen, joined, items = _rank_pass(batches, y, n, uncertain, surprising, kind, spent,
                                                    score_batch, make_items)
    forward = time.perf_counter() - t0 - sum(spent.values()) - (0.0 if items is None else items.seconds)
    if y is None:
        y = check_labels("labels", seen, MAX_CLASSES, count=len(predicted))
    return predicted, y, joined, items, spent, forward, None


def _items_maker(crit_names: Sequence[str], run, config: CoverageConfig) -> _ItemsMaker:
    """``layout -> _Items`` of the ``cam``/``ctm`` criteria, made once the first batch tells the
    neuron layout (checked against the profile's).
    """
    return _ItemsMaker(tuple(crit_names), config, run.profile)


@dataclass(frozen=True)
class _ItemsMaker:
    """:func:`_items_maker`'s answer: a value, so that it travels to the workers of a spread pass."""

    crit_names: tuple[str, ...]
    config: CoverageConfig
    profile: Any

    def __call__(self, layout: NeuronLayout) -> _Items:
        config = self.config
        if self.profile is not None:
            self.profile.check_layout(layout)
        crits = build_criteria(self.crit_names, layout, threshold=config.threshold, sections=config.sections,
                               top_k=config.top_k, scale=config.scale, profile=self.profile)
        return _Items(crits, layout)


def _rank_report(run, config: CoverageConfig, rankings: tuple[Ranking, ...], items: _Items | None,
                 predicted: np.ndarray, y: np.ndarray, seconds: tuple[float, float],
                 data_name: str | None, spread=None) -> RankReport:
    """The :class:`RankReport` of one pass; ``seconds``: ``(all, the shared forward pass)``;
    ``spread``: the workers it ran on (``None``: here).
    """
    coverage = items is not None
    layout = None if items is None else items.layout
    report = RankReport(rankings, predicted != y, layout, run.transform if coverage else None,
                        None if run.profile is None or not coverage else run.profile.to_dict(),
                        seconds[0], seconds[1], predicted, y,
                        None if run.state is None else {**run.state.to_dict(), **run.source},
                        about=run.about(data_name, layout, config.layers))
    return report.spread_over(spread)


def _labelled(data):
    """``(inputs, labels or None, streamed, N, the data's name or None)``: a loader or a torch
    data set streams (its labels come with its batches; a data set is read through a loader);
    arrays and tensors are sliced.
    """
    from ..core.inputs import is_torch_data, num_inputs, unpack

    x, labels, name = inputs_of(data)
    streamed = isinstance(x, DataLoader) or (is_torch_data(x) and labels is None)
    if not streamed:
        x, labels = unpack(x, labels)
    n = num_inputs(x)
    if n == 0:
        raise DeepFaultError("no inputs: the input set is empty")
    if streamed and not isinstance(x, DataLoader):
        x = DataLoader(cast("Dataset", x), batch_size=_STREAM_BATCH, shuffle=False)
    return x, labels, streamed, n, name


def _rankings(names, items: _Items | None, joined: dict, failing: np.ndarray, spent: dict) -> list[Ranking]:
    """Every ranking in the order asked: the score orders, and ``cam``/``ctm`` per criterion."""
    by_coverage: dict[str, list[Ranking]] = {"cam": [], "ctm": []}
    which = [n for n in names if n in COVERAGE_ORDERS]
    if items is not None:
        for c, (cols, row_ptr, num_items, seconds) in items.sparse():
            for name, r in _sparse_rankings(c, cols, row_ptr, num_items, failing, which, seconds).items():
                by_coverage[name].append(r)
    rankings: list[Ranking] = []
    for name in names:
        if name in COVERAGE_ORDERS:
            rankings += by_coverage[name]
        else:
            rankings.append(_score_ranking(name, joined[name], failing, spent[name]))
    return rankings


def _rank_pass(batches, y, n, uncertain, surprising, kind, spent, score_batch, make_items):
    """One pass over ``batches``: ``(predictions, labels or None, scores by name, items or None)``.

    Per input it keeps one float64 score per prioritiser, the prediction, the label (when
    they come with the batches) and (cam/ctm) the covered items in sparse form
    (:class:`_Items`); never the inputs or their neuron values.
    """
    from ..checks import check_labels

    scores: dict[str, list[np.ndarray]] = {k: [] for k in (*uncertain, *surprising)}
    predictions: list[np.ndarray] = []
    seen: list[np.ndarray] = []
    items: _Items | None = None
    for batch in batches:
        if batch.start == 0 and y is not None:  # the first batch tells the number of classes
            check_labels("labels", y, int(batch.outputs.shape[1]), count=n)
        if y is None:
            seen.append(_batch_labels(batch))
        part = slice(0, batch.stop - batch.start)
        predictions.append(batch.outputs.argmax(dim=1).cpu().numpy())
        here = {k: np.empty(part.stop) for k in scores}
        _score_uncertainty(batch.outputs, uncertain, kind, part, here, spent)
        for name, v in score_batch(batch).items():
            here[name][part] = v
        for name, v in here.items():
            scores[name].append(v)
        if make_items is not None:
            if batch.values is None or batch.layout is None:  # cannot happen: neurons are captured
                raise RuntimeError("iterate_batches returned no neuron values")
            if items is None:
                items = make_items(batch.layout)
            items.add(batch.values)
    joined = {k: np.concatenate(v) for k, v in scores.items()}
    return np.concatenate(predictions), np.concatenate(seen) if seen else None, joined, items


#: Inputs per read of a ``torch.utils.data`` data set given without a loader.
_STREAM_BATCH = 256


def _batch_labels(batch) -> np.ndarray:
    if batch.labels is None:
        raise DeepFaultError("rank_inputs needs labels: pass labels=..., or a data set or loader that "
                             "yields (input, label) pairs")
    return batch.labels.numpy()


class _Items:
    """Each input's covered items per criterion, batch by batch, in sparse form.

    A fixed-set criterion keeps the items each input covers (int32 indices, at most one per
    neuron and item kind: never more than the neuron values it replaces, usually far fewer);
    top-k patterns keep each input's pattern key (4 bytes per top neuron) and number the
    patterns at the end, across all batches.
    """

    def __init__(self, criteria, layout: NeuronLayout | None = None):
        self.layout = layout
        self.criteria = list(criteria)
        self.parts: list[list] = [[] for _ in self.criteria]
        self.seconds = 0.0
        self._spent = [0.0] * len(self.criteria)

    def add(self, values: torch.Tensor) -> None:
        for i, c in enumerate(self.criteria):
            t = time.perf_counter()
            if isinstance(c, BitSetCriterion):
                cols, row_ptr = _sparse(c.covered_items(values))
                self.parts[i].append((cols, np.diff(row_ptr)))
            elif hasattr(c, "pattern_keys"):
                self.parts[i].append(c.pattern_keys(values))
            else:  # another kind of criterion: its own items, numbered per batch, are not comparable
                self.parts[i].append(values.cpu())
            spent = time.perf_counter() - t
            self._spent[i] += spent
            self.seconds += spent

    def extend(self, other: _Items) -> _Items:
        """Append ``other``'s inputs (a later shard's) in place."""
        for mine, theirs in zip(self.parts, other.parts, strict=True):
            mine += theirs
        self._spent = [a + b for a, b in zip(self._spent, other._spent, strict=True)]
        self.seconds += other.seconds
        return self

    def sparse(self):
        """``(criterion, (cols, row_ptr, num_items, seconds))`` per criterion."""
        for c, parts, spent in zip(self.criteria, self.parts, self._spent, strict=True):
            t = time.perf_counter()
            if isinstance(c, BitSetCriterion):
                cols = np.concatenate([p[0] for p in parts])
                counts = np.concatenate([p[1] for p in parts])
                row_ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
                num_items = c.num_items
            elif parts and isinstance(parts[0], np.ndarray):
                keys = np.concatenate(parts)
                unique, inverse = np.unique(keys, return_inverse=True)
                cols = inverse.reshape(-1).astype(np.int32)
                row_ptr = np.arange(len(cols) + 1, dtype=np.int64)
                num_items = len(unique)
            else:
                found, num_items = c.input_items(torch.cat(parts))
                cols, row_ptr = _sparse(found)
            yield c, (cols, row_ptr, num_items, spent + time.perf_counter() - t)


def _coverage_criteria(criteria) -> tuple[str, ...]:
    """The coverage criteria of ``cam``/``ctm``: neuron criteria only."""
    names = parse_criteria(criteria)
    scored = [n for n in names if n in SCORE_CRITERIA]
    if scored:
        raise DeepFaultError(f"{', '.join(scored)} cover one score per input and give no coverage order; "
                             f"rank by the score itself (by='{SCORE_CRITERIA.get(scored[0]).score}')")
    return names


def _score_ranking(name: str, scores: np.ndarray, failing: np.ndarray, seconds: float) -> Ranking:
    """The order of one per-input score, looked at from the end its registry entry says."""
    ascending = UNCERTAINTY.get(name).ascending if name in UNCERTAINTY else False
    bad = np.flatnonzero(~np.isfinite(scores))
    if len(bad):  # the scorers refuse these first; no order or APFD is ever made of them
        first = ", ".join(map(str, bad[:5].tolist()))
        raise DeepFaultError(f"{name} is not a number for {len(bad)} of {len(scores)} inputs (the first: "
                             f"{first}); no order or APFD is computed from it")
    t = time.perf_counter()
    order = priority_order(scores, ascending=ascending)
    found = apfd(order, failing)
    return Ranking(name, name, order, found, seconds + time.perf_counter() - t, scores=scores,
                   ascending=ascending)


def _rank_shard(module: nn.Module, columns: tuple, options: tuple, context: ShardContext) -> dict:
    run, names, uncertain, surprising, kind, make_items = options
    run = replace(run, module=module)
    x, y = columns
    spent = dict.fromkeys(names, 0.0)
    with surprise_scorer(module, run.state, surprising, spent) as score_batch:
        batches = iterate_batches(module, x, neurons=make_items is not None, layers=run.layers,
                                  transform=run.transform, batch_size=context.batch_size)
        predicted, _, joined, items = _rank_pass(batches, y, len(y), uncertain, surprising, kind, spent,
                                                 score_batch, make_items)
    return {"predicted": predicted, "joined": joined, "items": items, "spent": spent}


def _spread_rank(run: Run, x, y: np.ndarray, names, uncertain, surprising, kind: str, runtime: Runtime,
                make_items):
    """:func:`~deepfault.coverage.rank.rank_inputs`' pass over shards: ``(predictions, scores by
    name, items or None, seconds by name)`` in input order, and the
    :class:`~deepfault.core.shards.Spread`.
    """
    from .measure import _spread_pass

    results, spread = _spread_pass("coverage rank", _rank_shard, run, (x, y),
                            (tuple(names), tuple(uncertain), tuple(surprising), kind, make_items), runtime)
    predicted = np.concatenate([r["predicted"] for r in results])
    joined = {k: np.concatenate([r["joined"][k] for r in results]) for k in results[0]["joined"]}
    spent = {k: sum(r["spent"][k] for r in results) for k in results[0]["spent"]}
    items = None
    if results[0]["items"] is not None:
        items = results[0]["items"]
        for r in results[1:]:
            items.extend(r["items"])
    return (predicted, joined, items, spent), spread
