"""The one image grid every report draws: before | after | difference, with colour bars.

DeepFault's synthesized inputs, DeepXplore's difference-inducing inputs and DRFuzz's
regression faults are all "an input, a changed input, and what changed". They share one
figure so that a reader learns to read it once: grey-scale inputs on the data's range, the
difference on a symmetric blue-white-red scale, each with its colour bar, and the rows the
caller chose (changed predictions first: see :func:`changed_first`). matplotlib is imported
inside the functions (through :func:`~deepfault.experiment.report.new_figure`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._deprecation import grouped
from .report import new_figure, save_figure, tex_safe

__all__ = ["GridCaptions", "as_image", "changed_first", "difference_grid"]


def _image(x) -> np.ndarray:
    """:func:`as_image` of an input of a row whose first input is an image (so all are)."""
    image = as_image(x)
    if image is None:
        raise ValueError(f"an input of shape {np.shape(x)} is no image, unlike the first of its row")
    return image


def as_image(x) -> np.ndarray | None:
    """One input as a 2-D (grey) or ``(H, W, 3)`` image: channels first or last, or a flat
    square; ``None`` when it is no image (a flat vector of non-square length).
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 3 and x.shape[0] in (1, 3):
        return x[0] if x.shape[0] == 1 else x.transpose(1, 2, 0)
    if x.ndim == 3 and x.shape[2] in (1, 3):
        return x[..., 0] if x.shape[2] == 1 else x
    if x.ndim == 2:
        return x
    side = int(round(np.sqrt(x.size)))
    return x.reshape(side, side) if side * side == x.size else None


def changed_first(changed, *, limit: int, key=None) -> np.ndarray:
    """Indices of at most ``limit`` rows: those whose prediction changed first, then the others,
    each group in its order (or by descending ``key``, e.g. the size of the change).
    """
    changed = np.asarray(changed, dtype=bool)
    order = np.arange(len(changed)) if key is None else np.argsort(-np.asarray(key, dtype=float),
                                                                   kind="stable")
    return np.concatenate([order[changed[order]], order[~changed[order]]])[:limit].astype(int)


@dataclass(frozen=True)
class GridCaptions:
    """What a :func:`difference_grid` writes beside its images.

    Attributes:
        before: One title per input before (its index, label).
        after: One title per changed input (the predictions).
        highlight: Per row, whether to draw its ``after`` title in red (a changed prediction).
        labels: Names of the two inputs in the colour bars' captions.
    """

    before: Sequence[str] = ()
    after: Sequence[str] = ()
    highlight: Sequence[bool] = ()
    labels: tuple[str, str] = ("original", "changed")


#: difference_grid's old keywords, each with the field of :class:`GridCaptions` it became.
_OLD_CAPTIONS = {"before_titles": "before", "after_titles": "after", "highlight": "highlight",
                 "labels": "labels"}


def difference_grid(before, after, path: str | os.PathLike, *, bounds: Sequence[float] = (0.0, 1.0),
                    captions: GridCaptions | None = None, columns: int = 2, title: str | None = None,
                    **old) -> Path | None:
    """A PNG grid of ``before | after | after - before`` triples, ``columns`` triples a row.

    Args:
        before: ``(N, ...)`` the inputs as they were (seeds, originals).
        after: ``(N, ...)`` the changed inputs.
        path: The PNG to write.
        bounds: The data's value range (the grey scale's limits).
        captions: The rows' titles, which to highlight and the two inputs' names
            (:class:`GridCaptions`; default: none, "original" and "changed").
        columns: Triples per row of the figure.
        title: The figure's title.
        **old: ``captions``' fields by their old names (``before_titles=``, ``after_titles=``,
            ``highlight=``, ``labels=``): deprecated.

    Returns:
        ``path``, or ``None`` (nothing written) when there is no row or the inputs are no images.
    """
    captions = grouped("difference_grid", "captions", GridCaptions, captions, old, names=_OLD_CAPTIONS)
    n = len(before)
    if n == 0 or as_image(before[0]) is None:
        return None
    lo, hi = float(bounds[0]), float(bounds[1])
    diffs = [_image(after[i]) - _image(before[i]) for i in range(n)]
    span = max(max(float(np.abs(d).max()) for d in diffs), 1e-12)
    rows = -(-n // columns)
    fig = new_figure(2.5 * 3 * min(columns, n) / 1.5 + 0.9, 1.75 * rows + (0.5 if title else 0.2),
                     layout="constrained")
    axes = fig.subplots(rows, 3 * min(columns, n), squeeze=False)
    grey = diff_image = None
    for i in range(n):
        r, c = divmod(i, columns)
        grey, diff_image = _triple(axes[r, 3 * c : 3 * c + 3], before[i], after[i], diffs[i], i, captions,
                                   (lo, hi, span))
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    for ax in list(axes.flat)[3 * n:]:
        ax.axis("off")
    shrink = 0.6 if rows <= 4 else max(0.12, 2.4 / rows)  # a bar about two rows high, not the figure's
    labels = captions.labels
    fig.colorbar(grey, ax=axes[:, :].ravel().tolist(), location="right", shrink=shrink, pad=0.01,
                 label=f"{labels[0]} / {labels[1]} value")
    fig.colorbar(diff_image, ax=axes[:, :].ravel().tolist(), location="right", shrink=shrink, pad=0.01,
                 label=f"{labels[1]} - {labels[0]}")
    if title:
        fig.suptitle(tex_safe(title), fontsize=9)
    path = Path(path)
    save_figure(fig, path)
    return path


def _triple(axes, before, after, diff, i: int, captions: GridCaptions, scale: tuple[float, float, float]):
    """Row ``i``'s before, after and difference on its three ``axes``, with their titles;
    ``scale``: ``(lo, hi, span)``. Returns the grey and the difference image (for the bars).
    """
    a, b, d = axes
    lo, hi, span = scale
    grey = a.imshow(as_image(before), cmap="gray", vmin=lo, vmax=hi)
    b.imshow(as_image(after), cmap="gray", vmin=lo, vmax=hi)
    diff = diff if diff.ndim == 2 else diff.mean(-1)
    diff_image = d.imshow(diff, cmap="coolwarm", vmin=-span, vmax=span)
    if i < len(captions.before):
        a.set_title(tex_safe(captions.before[i]), fontsize=7)
    if i < len(captions.after):
        red = i < len(captions.highlight) and bool(captions.highlight[i])
        b.set_title(tex_safe(captions.after[i]), fontsize=7, color="firebrick" if red else "black")
    d.set_title(f"L_inf {float(np.abs(diff).max()):.3g}", fontsize=7)
    return grey, diff_image

