"""Figures of a repair: accuracy before and after each approach (matplotlib, imported on use)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["accuracy_bars"]


def accuracy_bars(
    groups: Mapping[str, Mapping[str, float | None]],
    path,
    *,
    title: str = "",
    ylabel: str = "accuracy (%)",
    order: Sequence[str] | None = None,
) -> Path | None:
    """Grouped bars: one group per key of ``groups`` (a test set), one bar per model or
    approach inside it (``{group: {approach: value}}``, values in [0, 1]; ``None`` is skipped).

    Returns ``None`` (and writes nothing) without matplotlib.
    """
    from ..experiment.report import new_figure, save_figure

    names = list(order or dict.fromkeys(a for g in groups.values() for a in g))
    width = 0.8 / max(len(names), 1)
    try:
        fig = new_figure(max(4.0, 1.2 + 1.3 * len(groups)), 3.2, layout="constrained")
    except ModuleNotFoundError:
        return None
    ax = fig.subplots()
    for i, name in enumerate(names):
        xs, ys = [], []
        for j, g in enumerate(groups.values()):
            v = g.get(name)
            if v is not None:
                xs.append(j + (i - (len(names) - 1) / 2) * width)
                ys.append(100 * v)
        ax.bar(xs, ys, width, label=name)
    ax.set_xticks(range(len(groups)), list(groups), fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, ncol=min(len(names), 4))
    return save_figure(fig, Path(path))
