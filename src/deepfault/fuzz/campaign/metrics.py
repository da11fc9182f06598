"""Regression fuzzing metrics (spec section 8) from a list of faults.

- **#RF**: regression faults generated (M1 right, M2 wrong); the seeds M2 already gets
  wrong are reported apart (``initial_rf``);
- **#URF**: distinct ``(root, y1, y2)`` among the generated regression faults;
- **#Seed**: distinct roots with at least one generated regression fault;
- **#GF**: generated inputs on which M2 is wrong (regression faults + both fail).

Also the wall time and the number of model queries (inputs run through each model) until
the first generated regression fault, and **#URF at SSIM >= 0.99**: the unique regression
faults whose SSIM to their seed is at least DRFuzz's fidelity threshold, one yardstick of
realism for every strategy (DeepHunter's faults are not checked for fidelity).

Examples:
    >>> import numpy as np
    >>> faults = FaultTable.from_rows([
    ...     dict(kind="rf", root=3, y1=1, y2=7), dict(kind="rf", root=3, y1=1, y2=7),
    ...     dict(kind="rf", root=3, y1=1, y2=2), dict(kind="both_fail", root=5, y1=4, y2=4),
    ...     dict(kind="rf", root=9, y1=0, y2=6, initial=True)])
    >>> m = compute_metrics(faults)
    >>> (m.rf, m.urf, m.seeds, m.gf, m.initial_rf)
    (3, 2, 1, 4, 1)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ...errors import DeepFaultError
from ..fidelity.checks import SSIM_THRESHOLD as REALISTIC_SSIM  # a fault in ``urf_ssim`` needs it

__all__ = ["FAULT_KINDS", "REALISTIC_SSIM", "FaultTable", "Metrics", "compare_campaigns", "compute_metrics",
           "metrics_until"]

#: ``rf`` (regression fault) or ``both_fail`` (both models wrong).
FAULT_KINDS = ("rf", "both_fail")

_COLUMNS = {
    "kind": np.int8,  # index into FAULT_KINDS
    "root": np.int64,  # the root's index in the test split
    "y1": np.int64,
    "y2": np.int64,
    "initial": np.bool_,
    "elapsed": np.float64,  # seconds of fuzzing when found
    "queries": np.int64,  # inputs run through each model when found (this one included)
    "iteration": np.int64,
    "ssim": np.float32,  # SSIM of the input to its seed (NaN where not computed)
    "rule": np.int16,  # the mutation rule that made it (index into the campaign's rules; -1: none)
}



@dataclass(frozen=True)
class FaultTable:
    """Faults as columns (every array ``(F,)``); see ``_COLUMNS`` for the fields."""

    kind: np.ndarray
    root: np.ndarray
    y1: np.ndarray
    y2: np.ndarray
    initial: np.ndarray
    elapsed: np.ndarray
    queries: np.ndarray
    iteration: np.ndarray
    ssim: np.ndarray
    rule: np.ndarray

    def __len__(self) -> int:
        return len(self.kind)

    @classmethod
    def empty(cls) -> FaultTable:
        return cls(**{name: np.zeros(0, dtype=dtype) for name, dtype in _COLUMNS.items()})

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping]) -> FaultTable:
        """From dicts with ``kind`` (a name), ``root``, ``y1``, ``y2`` and optional others."""
        rows = list(rows)
        cols: dict[str, list] = {name: [] for name in _COLUMNS}
        for row in rows:
            kind = row["kind"]
            if kind not in FAULT_KINDS:
                raise DeepFaultError(f"fault kind must be one of {', '.join(FAULT_KINDS)}; got {kind!r}")
            cols["kind"].append(FAULT_KINDS.index(kind))
            for name in ("root", "y1", "y2"):
                cols[name].append(int(row[name]))
            cols["initial"].append(bool(row.get("initial", False)))
            cols["elapsed"].append(float(row.get("elapsed", 0.0)))
            cols["queries"].append(int(row.get("queries", 0)))
            cols["iteration"].append(int(row.get("iteration", 0)))
            cols["ssim"].append(float(row.get("ssim", np.nan)))
            cols["rule"].append(int(row.get("rule", -1)))
        return cls(**{name: np.asarray(cols[name], dtype=dtype) for name, dtype in _COLUMNS.items()})

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> FaultTable:
        n = len(arrays["kind"])
        def missing(dtype):  # a column older files lack: NaN, or -1 for integers ("unknown")
            return np.full(n, -1 if np.issubdtype(dtype, np.integer) else np.nan, dtype=dtype)

        return cls(**{name: np.asarray(arrays[name], dtype=dtype) if name in arrays else missing(dtype)
                      for name, dtype in _COLUMNS.items()})

    @classmethod
    def concat(cls, parts: Iterable[FaultTable]) -> FaultTable:
        parts = list(parts)
        if not parts:
            return cls.empty()
        return cls(**{name: np.concatenate([getattr(p, name) for p in parts]) for name in _COLUMNS})

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in _COLUMNS}

    def select(self, mask: np.ndarray) -> FaultTable:
        return FaultTable(**{name: getattr(self, name)[mask] for name in _COLUMNS})


@dataclass(frozen=True)
class Metrics:
    """The spec's metrics of a campaign (module docstring).

    Attributes:
        rf, urf, seeds, gf: #RF, #URF, #Seed, #GF over generated inputs.
        urf_ssim: #URF among the regression faults with SSIM to their seed >= 0.99.
        initial_rf: Seeds on which M2 was already wrong (not generated, not in ``rf``).
        both_fail: Generated inputs on which both models are wrong.
        seconds_to_first_rf: Fuzzing seconds until the first generated RF (``None``: none).
        queries_to_first_rf: Inputs run through each model until then (``None``: none).
    """

    rf: int
    urf: int
    seeds: int
    gf: int
    initial_rf: int
    both_fail: int
    urf_ssim: int
    seconds_to_first_rf: float | None
    queries_to_first_rf: int | None

    def to_dict(self) -> dict:
        return {
            "rf": self.rf, "urf": self.urf, "seeds": self.seeds, "gf": self.gf,
            "initial_rf": self.initial_rf, "both_fail": self.both_fail, "urf_ssim": self.urf_ssim,
            "seconds_to_first_rf": self.seconds_to_first_rf, "queries_to_first_rf": self.queries_to_first_rf,
        }


def compute_metrics(faults: FaultTable) -> Metrics:
    """The metrics of a fault table (module docstring)."""
    rf = (faults.kind == FAULT_KINDS.index("rf"))
    generated = ~faults.initial
    grf = rf & generated
    keys = {(int(r), int(a), int(b)) for r, a, b in zip(faults.root[grf], faults.y1[grf], faults.y2[grf],
                                                         strict=True)}
    roots = {int(r) for r in faults.root[grf]}
    real = grf & (faults.ssim >= REALISTIC_SSIM)
    real_keys = {(int(r), int(a), int(b)) for r, a, b in zip(faults.root[real], faults.y1[real],
                                                              faults.y2[real], strict=True)}
    both = int(np.count_nonzero(~rf & generated))
    first = None
    queries = None
    if grf.any():
        i = int(np.flatnonzero(grf)[np.argmin(faults.queries[grf])])
        first = float(faults.elapsed[i])
        queries = int(faults.queries[i])
    return Metrics(
        rf=int(np.count_nonzero(grf)),
        urf=len(keys),
        seeds=len(roots),
        gf=int(np.count_nonzero(grf)) + both,
        initial_rf=int(np.count_nonzero(rf & faults.initial)),
        both_fail=both,
        urf_ssim=len(real_keys),
        seconds_to_first_rf=first,
        queries_to_first_rf=queries,
    )


def metrics_until(faults: FaultTable, *, iterations: int | None = None,
                  seconds: float | None = None) -> Metrics:
    """The metrics of the faults found within the first ``iterations`` iterations and/or
    ``seconds`` of fuzzing (initial faults always count): campaigns compared at equal
    iterations or at equal wall time.
    """
    keep = np.ones(len(faults.kind), dtype=bool)
    if iterations is not None:
        keep &= faults.initial | (faults.iteration <= iterations)
    if seconds is not None:
        keep &= faults.initial | (faults.elapsed <= seconds)
    return compute_metrics(faults.select(keep))


class _Filtered(Protocol):
    @property
    def shared_fidelity(self) -> str | None: ...


class ComparedCampaign(Protocol):
    """What :func:`compare_campaigns` reads of a campaign (:class:`~.result.CampaignResult` has it)."""

    @property
    def config(self) -> _Filtered: ...

    @property
    def faults(self) -> FaultTable: ...

    @property
    def metrics(self) -> Metrics: ...

    @property
    def seconds(self) -> float: ...

    @property
    def iterations(self) -> int: ...


def compare_campaigns(results: Mapping[str, ComparedCampaign]) -> dict:
    """Strategies' campaigns side by side, at equal wall time and at equal iterations.

    Args:
        results: ``{strategy: CampaignResult}`` of campaigns run under one budget and one
            shared fidelity filter.

    Returns:
        ``{"wall_seconds": t, "iterations": n, "filter": spec, "rows": {strategy: {...}}}``:
        each row holds its metrics within ``t`` seconds (the shortest campaign's time) and
        within ``n`` iterations (the fewest any campaign ran), and ``urf_filtered``: its
        unique faults whose inputs passed the shared filter (all of them when one was
        applied; ``None`` without one).
    """
    if not results:
        raise DeepFaultError("compare_campaigns needs at least one campaign result")
    t = min(float(r.seconds) for r in results.values())
    n = min(int(r.iterations) for r in results.values())
    filters = {r.config.shared_fidelity for r in results.values()}
    rows = {}
    for name, r in results.items():
        at_t, at_n = metrics_until(r.faults, seconds=t), metrics_until(r.faults, iterations=n)
        rows[name] = {"at_equal_time": at_t.to_dict(), "at_equal_iterations": at_n.to_dict(),
                      "urf_filtered": r.metrics.urf if r.config.shared_fidelity else None,
                      "iterations": r.iterations, "seconds": r.seconds}
    return {"wall_seconds": t, "iterations": n, "filter": filters.pop() if len(filters) == 1 else None,
            "rows": rows}
