"""DeepFault's figures: suspicious neurons per layer (the paper's Fig. 3) and original
against synthesized inputs (Fig. 4). matplotlib is imported inside the functions.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from ..experiment.report import new_figure, save_figure, tex_safe
from .analysis import DeepFaultAnalysis as _Data

__all__ = ["fig3_layers", "fig4_examples", "short_name", "long_name", "safe_name", "EXAMPLE_CLASSES"]

#: Classes shown in Fig. 4.
EXAMPLE_CLASSES = 4

_SHORT = {"tarantula": "T", "ochiai": "O", "dstar": "D", "random": "R", "uniform": "U"}
_LONG = {"tarantula": "Tarantula", "ochiai": "Ochiai", "dstar": "D*", "random": "Random",
         "uniform": "Uniform"}
_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]


def short_name(approach: str) -> str:
    """One letter for an approach in a table's legend (T, O, D, R, U)."""
    return _SHORT.get(approach, approach)


def long_name(approach: str) -> str:
    """An approach's name as the paper prints it."""
    return _LONG.get(approach, approach)


def safe_name(name: str) -> str:
    """``name`` as a file-name stem."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "model"


def fig3_layers(d: _Data, model: str, path: Path) -> str | None:
    """Grouped bars: suspicious neurons per layer (depth order) for each measure, largest k."""
    ks = [k for k in d.ks if any((model, k, a) in d.layer_counts for a in d.measures)]
    layers = sorted(d.layers.get(model) or [], key=lambda la: la["depth"])
    if not ks or not layers or not d.measures:
        return None
    k = ks[-1]
    names = [la["name"] for la in layers]
    classes = max((len(p.classes) for a in d.measures if (p := d.pool(model, k, a))), default=0)
    width = min(16.0, max(5.0, 0.35 * len(names) * max(1, len(d.measures)) ** 0.5 + 1.5))
    fig = new_figure(width, 3.6)
    ax = fig.add_subplot(1, 1, 1)
    x = np.arange(len(names))
    bar = 0.8 / len(d.measures)
    for i, a in enumerate(d.measures):
        counts = d.layer_counts.get((model, k, a), {})
        ax.bar(x - 0.4 + bar * (i + 0.5), [counts.get(n, 0) for n in names], bar,
               label=long_name(a), color=_COLORS[i % len(_COLORS)])
    ax.set_xticks(x)
    ax.set_xticklabels([tex_safe(n) for n in names], rotation=45 if len(names) > 6 else 0,
                       ha="right" if len(names) > 6 else "center")
    ax.set_xlabel("layer (input side → output side)")
    ax.set_ylabel(f"suspicious neurons (sum over {classes} classes)")
    ax.set_title(tex_safe(f"{model}, k = {k}"))
    ax.legend(frameon=False)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    save_figure(fig, path)
    return f"{model}: k = {k}, {classes} classes."


def _image(x: np.ndarray):
    """An example as (H, W) grey or (H, W, 3) RGB, or None when it is not an image."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 3 and x.shape[0] in (1, 3):
        return x[0] if x.shape[0] == 1 else np.moveaxis(x, 0, -1)
    if x.ndim == 2:
        return x
    if x.ndim == 1:
        side = math.isqrt(x.size)
        if side * side == x.size and side > 1:
            return x.reshape(side, side)
    return None


def _display_range(d: _Data) -> tuple[float, float]:
    """The pixel range the examples are shown in: the recorded bounds, else their own range."""
    lo, hi = (list(d.config.get("bounds") or []) + [None, None])[:2]
    if lo is None or hi is None or not float(hi) > float(lo):
        # No usable domain recorded: stretch over the examples' own range.
        values = np.concatenate([np.ravel(e[i]) for e in d.examples.values() for i in (0, 1)])
        lo, hi = float(values.min()), float(values.max())
        hi = hi if hi > lo else lo + 1.0
    return float(lo), float(hi)


def _fig4_choice(d: _Data) -> tuple | None:
    """``(model, k, classes, approaches)`` the examples figure shows (``None``: no image to show)."""
    model = next((m for m in d.models if any(key[0] == m for key in d.examples)), None)
    if model is None:
        return None
    ks = [k for k in d.ks if any(key[0] == model and key[3] == k for key in d.examples)]
    k = ks[-1]
    classes = sorted({c for (m, c, _, kk) in d.examples if m == model and kk == k})
    classes = [c for c in classes if any((model, c, a, k) in d.examples for a in d.approaches)]
    if len(classes) > EXAMPLE_CLASSES:
        classes = [classes[i] for i in np.linspace(0, len(classes) - 1, EXAMPLE_CLASSES).round().astype(int)]
    approaches = [a for a in d.approaches if any((model, c, a, k) in d.examples for c in classes)]
    first = d.examples[next((model, c, a, k) for c in classes for a in approaches
                            if (model, c, a, k) in d.examples)]
    return None if _image(first[0]) is None else (model, k, classes, approaches)


def _fig4_differences(d: _Data, model, k, classes, approaches, lo: float, hi: float) -> dict:
    """``(class, approach) -> synthesized - original`` in units of the display range."""
    diffs = {}
    for c in classes:
        for a in approaches:
            e = d.examples.get((model, c, a, k))
            if e is not None:
                diff = (_image(e[1]) - _image(e[0])) / (hi - lo)
                diffs[(c, a)] = diff.mean(-1) if diff.ndim == 3 else diff
    return diffs


def fig4_examples(d: _Data, path: Path) -> str | None:
    """Originals, synthesized inputs and their differences for a few classes."""
    choice = _fig4_choice(d)
    if choice is None:
        return None
    model, k, classes, approaches = choice
    lo, hi = _display_range(d)
    names = d.config.get("class_names") or []

    def label(c):
        return str(names[c]) if c is not None and 0 <= c < len(names) else str(c)

    diffs = _fig4_differences(d, model, k, classes, approaches, lo, hi)
    vmax = max([float(np.abs(v).max()) for v in diffs.values()] + [1e-12])
    ncols = 1 + 2 * len(approaches)
    fig = new_figure(1.45 * ncols, 1.6 * len(classes) + 0.5, layout="constrained")
    axes = fig.subplots(len(classes), ncols, squeeze=False)
    shown = None
    for r, c in enumerate(classes):
        original = next(d.examples[(model, c, a, k)][0] for a in approaches if (model, c, a, k) in d.examples)
        for j in range(ncols):
            axes[r, j].set_xticks([])
            axes[r, j].set_yticks([])
        img = np.clip((_image(original) - lo) / (hi - lo), 0, 1)
        axes[r, 0].imshow(img, cmap="gray" if img.ndim == 2 else None, vmin=0, vmax=1)
        axes[r, 0].set_ylabel(tex_safe(f"class {label(c)}"), fontsize=9)
        if r == 0:
            axes[r, 0].set_title("original", fontsize=9)
        for i, a in enumerate(approaches):
            ax_s, ax_d = axes[r, 1 + 2 * i], axes[r, 2 + 2 * i]
            if r == 0:
                ax_s.set_title(f"{long_name(a)}", fontsize=9)
                ax_d.set_title(f"{short_name(a)} − original", fontsize=9)
            e = d.examples.get((model, c, a, k))
            if e is None:
                ax_s.axis("off")
                ax_d.axis("off")
                continue
            img = np.clip((_image(e[1]) - lo) / (hi - lo), 0, 1)
            ax_s.imshow(img, cmap="gray" if img.ndim == 2 else None, vmin=0, vmax=1)
            changed = e[2] is not None and e[2] != c
            ax_s.set_xlabel(tex_safe(f"pred {label(e[2])}"), fontsize=8,
                            color="#c00000" if changed else "#333333")
            shown = ax_d.imshow(diffs[(c, a)], cmap="RdBu_r", vmin=-vmax, vmax=vmax)
    fig.suptitle(tex_safe(f"{model}, k = {k}: originals, synthesized inputs and differences"), fontsize=10)
    if shown is not None:
        cbar = fig.colorbar(shown, ax=axes.ravel().tolist(), shrink=0.6)
        cbar.set_label("difference / (hi − lo)", fontsize=8)
        cbar.ax.tick_params(labelsize=7)
    save_figure(fig, path)
    return (f"Inputs of {len(classes)} classes for {model} and k = {k}: the original, then for each "
            "approach the synthesized input (with the model's prediction below it, red when it "
            "changed) and its difference from the original (red: brighter, blue: darker; common "
            f"scale ±{vmax:.3g} of the pixel range [{lo:g}, {hi:g}]; colour images show the mean "
            "over channels). The paper's Fig. 4. File: fig4_examples.png.")

