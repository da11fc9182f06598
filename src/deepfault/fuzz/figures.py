"""Figures of regression fuzzing campaigns: a grid of faults, #RF/#URF over time, rule usage.

matplotlib is imported inside each function (the ``report`` extra).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..experiment.report import new_figure, save_figure

__all__ = ["fault_grid", "plot_rule_usage", "plot_timeline", "seed_fault_lines"]


def seed_fault_lines(
    seeds: np.ndarray,
    faults: np.ndarray,
    path: str | os.PathLike,
    *,
    bounds: Sequence[float] = (0.0, 1.0),
    titles: Sequence[str] | None = None,
    title: str | None = None,
    columns: int = 3,
) -> Path:
    """A PNG with one small line plot per fault: the seed (grey) and the fault (red) over the
    elements of the input (a vector's features; a sequence's channels one after the other).

    Args:
        seeds: ``(N, F)`` or ``(N, C, L)`` the faults' root seeds.
        faults: The faults, of the same shape.
        path: The PNG (written atomically).
        bounds: The data's range (the y limits).
        titles: One title per fault.
        title: Figure title.
        columns: Panels per row.
    """
    seeds, faults = (np.asarray(a, dtype=np.float64).reshape(len(a), -1) for a in (seeds, faults))
    n = len(faults)
    cols = max(1, min(columns, n))
    rows = (n + cols - 1) // cols
    fig = new_figure(3.2 * cols, 2.0 * rows + (0.4 if title else 0.0), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    x = np.arange(seeds.shape[1])
    for i, ax in enumerate(axes.flat):
        if i >= n:
            ax.set_axis_off()
            continue
        ax.plot(x, seeds[i], color="0.55", linewidth=1.0, label="seed")
        ax.plot(x, faults[i], color="tab:red", linewidth=1.0, label="fault")
        ax.set_ylim(float(bounds[0]), float(bounds[1]))
        ax.tick_params(labelsize=7)
        if titles is not None:
            ax.set_title(titles[i], fontsize=8)
        if i == 0:
            ax.legend(fontsize=7, loc="upper right")
    if title:
        fig.suptitle(title, fontsize=9)
    return save_figure(fig, Path(path))


def fault_grid(
    seeds: np.ndarray,
    faults: Mapping[str, np.ndarray],
    path: str | os.PathLike,
    *old: object,
    bounds: Sequence[float] = (0.0, 1.0),
    columns: int = 4,
    class_names: Sequence[str] | None = None,
    title: str | None = None,
) -> Path | None:
    """A PNG of regression faults beside their seeds and their difference, with colour bars:
    ``seed (label) | fault (M1 label, M2 y2) | fault - seed``; for vectors and sequences, one
    line plot per fault of the seed and the fault over the elements (:func:`seed_fault_lines`).

    Args:
        seeds: ``(N, C, H, W)`` the faults' root seeds (or ``(N, F)``, ``(N, C, L)``).
        faults: The faults' rows as :meth:`~.campaign.result.CampaignResult.fault_arrays` gives
            them: ``inputs`` (of the seeds' shape; the first ``N`` shown), ``label`` (what M1
            predicts) and ``m2_pred`` (what M2 predicts).
        path: The PNG (written atomically).
        *old: The old form ``fault_grid(seeds, inputs, labels, m2_preds, path, ...)`` still
            works and warns (:class:`FutureWarning`).
        bounds: The pixel range (grey scale limits).
        columns: Triples per row (at most 3).
        class_names: Class names (default: indices).
        title: Figure title.
    """
    from ..experiment.figures import GridCaptions, difference_grid

    if old:
        faults, path = _old_form(faults, path, old)
    inputs, labels, m2_preds = faults["inputs"], faults["label"], faults["m2_pred"]
    name = (lambda c: class_names[c]) if class_names else str
    n = len(inputs)
    if n == 0:
        fig = new_figure(4.0, 1.0)
        fig.text(0.5, 0.5, "no regression fault", ha="center", va="center")
        return save_figure(fig, Path(path))
    if np.asarray(inputs).ndim != 4:  # vectors and sequences: line plots, not images
        return seed_fault_lines(
            seeds, inputs, path, bounds=bounds, title=title,
            titles=[f"label {name(int(a))} -> M2 {name(int(b))}"
                    for a, b in zip(labels, m2_preds, strict=True)])
    captions = GridCaptions(
        before=[f"label {name(int(c))}" for c in labels],
        after=[f"M1 {name(int(a))}, M2 {name(int(b))}" for a, b in zip(labels, m2_preds, strict=True)],
        highlight=[True] * n, labels=("seed", "fault"))
    return difference_grid(seeds, inputs, path, bounds=bounds, columns=min(columns, 3), captions=captions,
                           title=title)


def _old_form(inputs: Any, labels: Any, rest: tuple) -> tuple[Mapping[str, np.ndarray], Any]:
    """The old form's ``fault_grid(seeds, inputs, labels, m2_preds, path)`` as ``(faults, path)``."""
    if len(rest) != 2:
        raise TypeError(f"fault_grid() takes 3 positional arguments (or 5, the old form) but {3 + len(rest)} "
                        "were given")
    warnings.warn("fault_grid(seeds, inputs, labels, m2_preds, path) is deprecated: pass "
                  "fault_grid(seeds, {'inputs': ..., 'label': ..., 'm2_pred': ...}, path)",
                  FutureWarning, stacklevel=3)
    return {"inputs": inputs, "label": labels, "m2_pred": rest[0]}, rest[1]


def plot_timeline(
    series: Mapping[str, Sequence[Mapping]], path: str | os.PathLike, *, keys: Sequence[str] = ("rf", "urf"),
    title: str | None = None,
) -> Path:
    """#RF and #URF (or other ``keys``) against fuzzing time, one line per campaign.

    Args:
        series: ``{label: timeline}``, each timeline a list of ``{elapsed, rf, urf, ...}``.
        path: The PNG.
        keys: The counts to plot, one panel each.
        title: Figure title.
    """
    fig = new_figure(5.0 * len(keys), 3.4, layout="constrained")
    axes = fig.subplots(1, len(keys), squeeze=False)
    names = {"rf": "#RF", "urf": "#URF", "seeds": "#Seed", "gf": "#GF", "corpus": "queue"}
    for ax, key in zip(axes[0], keys, strict=True):
        for label, timeline in series.items():
            t = [p["elapsed"] for p in timeline]
            ax.plot(t, [p[key] for p in timeline], label=label, lw=1.2)
        ax.set_xlabel("fuzzing time (s)")
        ax.set_ylabel(names.get(key, key))
        ax.grid(alpha=0.3)
    if len(series) <= 12:
        axes[0, -1].legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    return save_figure(fig, Path(path))


def plot_rule_usage(usage: Mapping[str, Mapping[str, Mapping[str, float]]], path: str | os.PathLike, *,
                    title: str | None = None) -> Path:
    """Share of selections and of regression faults per mutation rule, one bar group per strategy.

    Args:
        usage: ``{label: {rule: {"selected": n, "rf": n, ...}}}``.
        path: The PNG.
        title: Figure title.
    """
    rules = sorted({r for u in usage.values() for r in u})
    fig = new_figure(11.0, 3.6, layout="constrained")
    axes = fig.subplots(1, 2)
    width = 0.8 / max(1, len(usage))
    x = np.arange(len(rules))
    for k, (label, u) in enumerate(usage.items()):
        for ax, key in zip(axes, ("selected", "rf"), strict=True):
            v = np.array([u.get(r, {}).get(key, 0) for r in rules], dtype=float)
            ax.bar(x + k * width, v / max(v.sum(), 1), width, label=label)
    for ax, name in zip(axes, ("share of selections", "share of regression faults"), strict=True):
        ax.set_xticks(x + 0.4 - width / 2, rules, rotation=60, ha="right", fontsize=7)
        ax.set_ylabel(name)
        ax.grid(alpha=0.3, axis="y")
    axes[1].legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    return save_figure(fig, Path(path))
