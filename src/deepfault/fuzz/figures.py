"""Figures of regression fuzzing campaigns: a grid of faults, #RF/#URF over time, rule usage.

matplotlib is imported inside each function (the ``report`` extra).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

__all__ = ["fault_grid", "plot_rule_usage", "plot_timeline"]


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError("figures need matplotlib: pip install 'deepfault[report]'") from err
    return plt


def _save(fig, path: str | os.PathLike) -> Path:
    from .._io import atomic_path

    plt = _pyplot()
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    return path


def _image(x: np.ndarray) -> np.ndarray:
    """``(C, H, W)`` or ``(H, W)`` as something ``imshow`` takes."""
    x = np.asarray(x)
    if x.ndim == 3 and x.shape[0] in (1, 3):
        x = x[0] if x.shape[0] == 1 else np.moveaxis(x, 0, -1)
    return x


def fault_grid(
    seeds: np.ndarray,
    faults: np.ndarray,
    labels: Sequence[int],
    m2_preds: Sequence[int],
    path: str | os.PathLike,
    *,
    bounds: Sequence[float] = (0.0, 1.0),
    columns: int = 4,
    class_names: Sequence[str] | None = None,
    title: str | None = None,
) -> Path:
    """A PNG of regression faults beside their seeds: ``seed (label) | fault (M1 label, M2 y2)``.

    Args:
        seeds: ``(N, C, H, W)`` the faults' root seeds.
        faults: ``(N, C, H, W)`` the faults (the first ``N`` shown).
        labels: Each fault's label (what M1 predicts).
        m2_preds: What M2 predicts.
        path: The PNG (written atomically).
        bounds: The pixel range (grey scale limits).
        columns: Seed/fault pairs per row.
        class_names: Class names (default: indices).
        title: Figure title.
    """
    plt = _pyplot()
    n = len(faults)
    rows = max(1, -(-n // columns))
    lo, hi = float(bounds[0]), float(bounds[1])
    name = (lambda c: class_names[c]) if class_names else str
    fig, axes = plt.subplots(rows, 2 * columns, figsize=(1.45 * 2 * columns, 1.65 * rows + 0.4),
                             squeeze=False, layout="constrained")
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
        ax.axis("off")
    for i in range(n):
        r, c = divmod(i, columns)
        a, b = axes[r, 2 * c], axes[r, 2 * c + 1]
        a.imshow(_image(seeds[i]), cmap="gray", vmin=lo, vmax=hi)
        a.set_title(f"seed: {name(int(labels[i]))}", fontsize=7)
        b.imshow(_image(faults[i]), cmap="gray", vmin=lo, vmax=hi)
        b.set_title(f"M1 {name(int(labels[i]))}, M2 {name(int(m2_preds[i]))}", fontsize=7, color="firebrick")
    if n == 0:
        axes[0, 0].text(0.5, 0.5, "no regression fault", ha="left", va="center")
    if title:
        fig.suptitle(title, fontsize=9)
    return _save(fig, path)


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
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(keys), figsize=(5.0 * len(keys), 3.4), squeeze=False,
                             layout="constrained")
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
    return _save(fig, path)


def plot_rule_usage(usage: Mapping[str, Mapping[str, Mapping[str, float]]], path: str | os.PathLike, *,
                    title: str | None = None) -> Path:
    """Share of selections and of regression faults per mutation rule, one bar group per strategy.

    Args:
        usage: ``{label: {rule: {"selected": n, "rf": n, ...}}}``.
        path: The PNG.
        title: Figure title.
    """
    plt = _pyplot()
    rules = sorted({r for u in usage.values() for r in u})
    fig, axes = plt.subplots(1, 2, figsize=(11.0, 3.6), layout="constrained")
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
    return _save(fig, path)
