"""Figures of a repair: accuracy before and after each approach (matplotlib, imported on use)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["accuracy_bars", "zoomed_range"]


def zoomed_range(values: Sequence[float], *, pad: float = 0.25, min_span: float = 2.0) -> tuple[float, float]:
    """An axis range (percent) that shows differences of a point or two: the values' range
    widened by ``pad`` of it on each side, at least ``min_span`` points wide, on whole or half
    points, within ``[0, 100]``.
    """
    lo, hi = min(values), max(values)
    span = max(hi - lo, min_span)
    mid = (lo + hi) / 2
    lo, hi = mid - span * (0.5 + pad), mid + span * (0.5 + pad)
    lo, hi = math.floor(2 * lo) / 2, math.ceil(2 * hi) / 2
    if lo < 0:
        lo, hi = 0.0, min(100.0, hi - lo)
    if hi > 100:
        lo, hi = max(0.0, lo - (hi - 100)), 100.0
    return lo, hi


def accuracy_bars(
    groups: Mapping[str, Mapping[str, float | None]],
    path,
    *,
    title: str = "",
    ylabel: str = "accuracy (%)",
    order: Sequence[str] | None = None,
) -> Path | None:
    """Bars of accuracy, one panel per key of ``groups`` (a test set or a model), one bar per
    model or approach inside it (``{group: {approach: value}}``, values in [0, 1]; ``None`` is
    skipped).

    Each panel has its own zoomed y axis (:func:`zoomed_range`), named in its title, so that
    differences of a point or two show; every bar carries its value; the legend sits below the
    panels, never over a bar.

    Returns ``None`` (and writes nothing) without matplotlib.
    """
    from ..experiment.report import new_figure, save_figure, tex_safe

    names = list(order or dict.fromkeys(a for g in groups.values() for a in g))
    try:
        fig = new_figure(max(4.0, 0.6 + (0.45 * len(names) + 0.9) * len(groups)), 3.4, layout="constrained")
    except ModuleNotFoundError:
        return None
    axes = fig.subplots(1, max(len(groups), 1), squeeze=False)[0]
    colors = {n: f"C{i % 10}" for i, n in enumerate(names)}
    handles: dict[str, object] = {}
    for ax, (group, values) in zip(axes, groups.items(), strict=False):
        shown = [(n, 100 * v) for n in names if (v := values.get(n)) is not None]
        if not shown:
            ax.set_axis_off()
            ax.set_title(f"{tex_safe(group)}\n(no inputs)", fontsize=8)
            continue
        lo, hi = zoomed_range([v for _, v in shown])
        for i, (n, v) in enumerate(shown):
            bar = ax.bar(i, v - lo, bottom=lo, width=0.8, color=colors[n], label=n,
                         hatch="//" if n == "before" else None, edgecolor="white" if n == "before" else None)
            handles.setdefault(n, bar)
            ax.text(i, v, f"{v:.1f}", ha="center", va="bottom", fontsize=7)
        ax.set_ylim(lo, hi)
        ax.set_xticks([])
        ax.set_xlim(-0.6, len(shown) - 0.4)
        ax.grid(axis="y", alpha=0.3)
        ax.set_title(f"{tex_safe(group)}\naxis {lo:g}-{hi:g}%", fontsize=8, pad=12)
    axes[0].set_ylabel(ylabel)
    if title:
        fig.suptitle(tex_safe(title), fontsize=9)
    fig.legend([handles[n] for n in names if n in handles], [n for n in names if n in handles],
               loc="outside lower center", ncol=min(len(handles), 6), fontsize=8, frameon=False)
    return save_figure(fig, Path(path))
