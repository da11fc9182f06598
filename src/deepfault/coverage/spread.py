"""The coverage passes spread over workers (``--workers N``; :mod:`deepfault.core.shards`).

Each pass runs on contiguous shards of the inputs and is put together in shard order:

- ``measure``: the criteria are accumulators, merged (bit sets by ``or``, pattern sets by union,
  surprise scores concatenated); the growth curve's point at ``n`` inputs is the merge of the
  shards before ``n`` with a snapshot of the shard holding ``n`` taken there, so it equals the
  serial curve exactly; the never- and always-active neurons are ``or`` and ``and`` of the shards'.
- ``rank``: every per-input record (predictions, scores, covered items) is concatenated.
- ``surprise``'s fit: the activation traces and predicted classes are concatenated.

(``profile`` merges its accumulators itself: :func:`deepfault.coverage.profile.compute_profile`.)
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
from torch import nn

from ..core.runtime import Runtime
from ..core.shards import ShardContext, Spread, sharded_pass
from ..errors import DeepFaultError

if TYPE_CHECKING:
    from .config import CoverageConfig
    from .measure import Run

__all__ = ["spread_measure", "spread_rank", "spread_trace"]


def _shard_runtime(context: ShardContext) -> Runtime:
    return Runtime(device=context.device, threads=None, batch_size=context.batch_size)


def _pass(name: str, work, run: Run, columns: tuple, options: Any, runtime: Runtime) -> tuple[list, Spread]:
    return sharded_pass(name, work, run.module, columns, (replace(run, module=None), *options),
                        parallel=runtime.parallel, device=runtime.device, batch_size=runtime.batch_size,
                        state=runtime.shard_state)


# --------------------------------------------------------------------------- measure


def _snapshot(crit) -> Any:
    from .criteria import Criterion

    return crit.state_dict() if isinstance(crit, Criterion) else None


def _measure_shard(module: nn.Module, columns: tuple, options: tuple, context: ShardContext) -> dict:
    from .measure import _measure_pass

    run, config, marks = options
    here = [m - context.start for m in marks if context.start < m <= context.stop]
    crits, curves, layout, (active, always) = _measure_pass(replace(run, module=module), columns[0], config,
                                                            _shard_runtime(context), here, snapshot=_snapshot)
    return {"crits": crits, "curves": [[(m + context.start, s) for m, s in c] for c in curves],
            "layout": layout, "active": active, "always": always}


def _covered_at(prefix, part, snapshot) -> int:
    """Items covered by the shards before a mark and the part of its own shard up to it."""
    from .criteria import Criterion

    if not isinstance(part, Criterion):
        return 0  # a surprise coverage redraws its curve from its scores at the end
    probe = copy.deepcopy(prefix)
    probe.merge(copy.deepcopy(part).load_state_dict(snapshot))
    return probe.covered_count()


def spread_measure(run: Run, x, config: CoverageConfig, runtime: Runtime, marks: list[int]):
    """:func:`~deepfault.coverage.measure.measure_coverage`'s pass over shards: what its serial
    pass returns, and the :class:`~deepfault.core.shards.Spread`.
    """
    from .measure import _criteria

    results, spread = _pass("coverage measure", _measure_shard, run, (x,), (config, marks), runtime)
    layout = results[0]["layout"]
    crits = _criteria(config, run, layout) if results[0]["crits"] else []
    curves: list[list[tuple[int, int]]] = [[] for _ in crits]
    active = always = None
    for r in results:
        for i, (mine, part) in enumerate(zip(crits, r["crits"], strict=True)):
            curves[i] += [(m, _covered_at(mine, part, snap)) for m, snap in r["curves"][i]]
            mine.merge(part)
        if r["active"] is not None:
            active = r["active"] if active is None else active | r["active"]
            always = r["always"] if always is None else always & r["always"]
    return (crits, curves, layout, (active, always)), spread


# --------------------------------------------------------------------------- rank


def _rank_shard(module: nn.Module, columns: tuple, options: tuple, context: ShardContext) -> dict:
    from ..core.batches import iterate_batches
    from .measure import surprise_scorer
    from .rank import _rank_pass

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


def spread_rank(run: Run, x, y: np.ndarray, names, uncertain, surprising, kind: str, runtime: Runtime,
                make_items):
    """:func:`~deepfault.coverage.rank.rank_inputs`' pass over shards: ``(predictions, scores by
    name, items or None, seconds by name)`` in input order, and the
    :class:`~deepfault.core.shards.Spread`.
    """
    results, spread = _pass("coverage rank", _rank_shard, run, (x, y),
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


# --------------------------------------------------------------------------- surprise's fit


def _trace_shard(module: nn.Module, columns: tuple, options: tuple, context: ShardContext) -> tuple:
    from .surprise import _trace

    layers, config = options
    n = context.stop - context.start
    ats, assigned, _, layout, num_classes = _trace(module, columns[0], None, False, n, layers, config,
                                                   _shard_runtime(context))
    return ats, assigned, layout, num_classes


def spread_trace(module: nn.Module, x, n: int, layers, config, runtime: Runtime):
    """The surprise fit's pass over shards: what its serial ``_trace`` returns (no labels from a
    stream: a stream is not sharded), and the :class:`~deepfault.core.shards.Spread`.
    """
    from .surprise import MAX_VALUES

    results, spread = sharded_pass("coverage surprise", _trace_shard, module, (x,), (layers, config),
                                   parallel=runtime.parallel, device=runtime.device,
                                   batch_size=runtime.batch_size, state=runtime.shard_state)
    layout, num_classes = results[0][2], results[0][3]
    if n * layout.num_neurons > MAX_VALUES:
        raise DeepFaultError(
            f"{n} inputs x {layout.num_neurons} neurons is more than the {MAX_VALUES:,} training values a "
            "surprise state may hold; choose fewer or smaller layers (--layers) or a subset of the inputs")
    ats = np.concatenate([r[0] for r in results])
    assigned = np.concatenate([r[1] for r in results])
    return (ats, assigned, None, layout, num_classes), spread
