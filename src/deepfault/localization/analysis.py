"""DeepFault's evaluation as data: pooled per-input values and the significance tests.

:func:`load_analysis` reads one DeepFault experiment from a results store and pools the
per-input values of every (model, ``k``, approach) over classes and, for the random
baseline, over repetitions, as the paper does. The result is plain Python (no pandas
needed); :meth:`DeepFaultAnalysis.records` gives one tidy row per pool and
:meth:`DeepFaultAnalysis.to_frame` a pandas DataFrame when pandas is installed. Rendering
(Markdown, CSV, figures, HTML) lives in :mod:`deepfault.localization.report`.

Example::

    a = load_analysis("results/paper-mnist.sqlite")
    a.pool("mnist_1", 10, "tarantula").correct   # per-input 0/1 values
    a.comparisons()[("mnist_1", 10, "tarantula", "random", "correct")].p_value
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import DeepFaultError
from ..experiment.stats import Comparison, compare
from ..experiment.store import ResultStore, choose_experiment
from .results import read_cells
from .selection import APPROACHES

__all__ = ["Pool", "DeepFaultAnalysis", "load_analysis"]


def _is_baseline(approach: str) -> bool:
    return approach in APPROACHES and APPROACHES.get(approach).baseline


@dataclass
class Pool:
    """Per-input values of one (model, k, approach), pooled over classes and repetitions."""

    loss: list = field(default_factory=list)
    correct: list = field(default_factory=list)
    l1: list = field(default_factory=list)
    l2: list = field(default_factory=list)
    linf: list = field(default_factory=list)
    increased: list = field(default_factory=list)
    increased_at: dict = field(default_factory=lambda: defaultdict(list))
    synthesis_seconds: float = 0.0
    cells: int = 0
    classes: set = field(default_factory=set)


@dataclass
class DeepFaultAnalysis:
    """A DeepFault experiment's cells read back from a store and pooled for its tables and figures."""

    experiment: dict
    models: list
    ks: list
    approaches: list
    pools: dict  # (model, k, approach) -> _Pool
    spectrum: dict  # (model, cls) -> seconds
    layers: dict  # model -> [{name, size, depth}]
    layer_counts: dict  # (model, k, approach) -> {layer: count}, summed over classes
    examples: dict  # (model, cls, approach, k) -> (original, synthesized, pred_syn)
    num_cells: int

    @property
    def config(self) -> dict:
        config: dict = self.experiment["config"]
        return config

    @property
    def measures(self) -> list:
        return [a for a in self.approaches if not _is_baseline(a)]

    @property
    def baselines(self) -> list:
        return [a for a in self.approaches if _is_baseline(a)]

    def pool(self, model, k, approach) -> Pool | None:
        return self.pools.get((model, k, approach))

    def comparisons(self) -> dict[tuple, Comparison]:
        """Every one-sided Mann-Whitney test with A12 of the significance table:
        ``(model, k, a, b, metric) -> Comparison`` for each measure ``a`` against every other
        approach ``b``, on ``loss`` and ``correct``.
        """
        return _tests(self)

    def records(self) -> list[dict]:
        """One tidy row per (model, k, approach): inputs, means of every per-input value."""
        rows = []
        for (model, k, approach), p in sorted(self.pools.items(), key=lambda kv: str(kv[0])):
            row = {"model": model, "k": k, "approach": approach, "inputs": len(p.loss), "cells": p.cells}
            for attr in ("loss", "correct", "l1", "l2", "linf", "increased"):
                values = getattr(p, attr)
                row[attr] = float(np.mean(values)) if values else None
            row["synthesis_seconds"] = p.synthesis_seconds
            rows.append(row)
        return rows

    def to_frame(self):
        """:meth:`records` as a pandas DataFrame (pandas must be installed)."""
        try:
            import pandas as pd
        except ModuleNotFoundError:
            raise ModuleNotFoundError("to_frame needs pandas; use records() without it") from None
        return pd.DataFrame(self.records())

    def pooled(self, model, k, approaches, attr) -> list:
        out = []
        for a in approaches:
            p = self.pool(model, k, a)
            if p is not None:
                out.extend(getattr(p, attr))
        return out


def _ordered(preferred, seen) -> list:
    seen = set(seen)
    out = [x for x in dict.fromkeys(preferred) if x in seen]
    return out + sorted(seen - set(out))


def load_analysis(store_path: str | Path, config_hash: str | None = None) -> DeepFaultAnalysis:
    """Read and pool one experiment's cells (``config_hash``, else the most recent) from a store."""
    store_path = Path(store_path)
    if not store_path.is_file():
        raise DeepFaultError(
            f"results store {str(store_path)!r} does not exist; run 'deepfault experiment' first"
        )
    with ResultStore(store_path, readonly=True) as store:
        experiments = store.experiments()
        experiment = choose_experiment(store, config_hash)
        pools: dict = defaultdict(Pool)
        spectrum: dict = {}
        layers: dict = {}
        layer_counts: dict = defaultdict(lambda: defaultdict(int))
        examples: dict = {}
        num_cells = 0
        for cell in read_cells(store, experiment["config_hash"]):
            key = cell.key
            num_cells += 1
            pool = pools[(key.model, key.k, key.approach)]
            pool.loss.extend(cell.loss)
            pool.correct.extend(float(c) for c in cell.correct)
            pool.l1.extend(cell.l1)
            pool.l2.extend(cell.l2)
            pool.linf.extend(cell.linf)
            pool.increased.extend(cell.increased)
            for kp, values in cell.increased_at.items():
                pool.increased_at[int(kp)].extend(values)
            pool.synthesis_seconds += cell.synthesis_seconds
            pool.cells += 1
            pool.classes.add(key.cls)
            spectrum.setdefault((key.model, key.cls), cell.spectrum_seconds)
            layers.setdefault(key.model, cell.layers)
            if key.repetition == 0:
                for name, count in cell.layer_distribution.items():
                    layer_counts[(key.model, key.k, key.approach)][name] += int(count)
                ex = cell.examples
                if "originals" in ex and "synthesized" in ex and len(ex["originals"]):
                    pred = cell.pred_synthesized[0] if cell.pred_synthesized else None
                    examples[(key.model, key.cls, key.approach, key.k)] = (
                        np.asarray(ex["originals"][0]), np.asarray(ex["synthesized"][0]), pred)
    if num_cells == 0:
        raise DeepFaultError(
            f"experiment {experiment['config_hash']} ({experiment['name']}) has no results yet; "
            "run or resume it with 'deepfault experiment', or pass config_hash (available: "
            + ", ".join(f"{e['config_hash']} ({e['name']})" for e in experiments) + ")"
        )
    config = experiment["config"]
    keys = list(pools)
    models = _ordered([m["name"] if isinstance(m, dict) else str(m) for m in config.get("models", [])],
                      {m for m, _, _ in keys})
    ks = sorted({k for _, k, _ in keys})
    approaches = _ordered(config.get("approaches", []), {a for _, _, a in keys})
    return DeepFaultAnalysis(experiment, models, ks, approaches, dict(pools), spectrum, layers,
                 {k: dict(v) for k, v in layer_counts.items()}, examples, num_cells)



def _tests(d: DeepFaultAnalysis) -> dict:
    """Every comparison of the significance table: (model, k, a, b, metric) -> Comparison."""
    opponents = d.measures + d.baselines
    out = {}
    for m in d.models:
        for k in d.ks:
            for a in d.measures:
                pa = d.pool(m, k, a)
                for b in opponents:
                    pb = d.pool(m, k, b)
                    if b == a or pa is None or pb is None:
                        continue
                    out[(m, k, a, b, "loss")] = compare(pa.loss, pb.loss, metric="loss")
                    out[(m, k, a, b, "correct")] = compare(pa.correct, pb.correct, metric="correct")
    return out


