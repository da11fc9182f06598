"""Figures of DeepXplore runs: the image grid, coverage against ``t`` (the paper's Figure 9)
and coverage over time. matplotlib is imported inside each function (the ``report`` extra).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from .._io import atomic_path

__all__ = ["image_grid", "coverage_vs_threshold", "coverage_over_time", "as_image"]


def _pyplot():
    try:
        import matplotlib
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError("figures need matplotlib: pip install 'deepfault[report]'") from err
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def as_image(x: np.ndarray) -> np.ndarray:
    """One input as a 2-D (grey) or ``(H, W, 3)`` image: channels first or last, or flat square."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 3 and x.shape[0] in (1, 3):
        x = x[0] if x.shape[0] == 1 else x.transpose(1, 2, 0)
    elif x.ndim == 3 and x.shape[2] in (1, 3):
        x = x[..., 0] if x.shape[2] == 1 else x
    elif x.ndim == 1:
        side = int(round(np.sqrt(x.size)))
        x = x.reshape(side, side) if side * side == x.size else x[None, :]
    return x


def _save(fig, path: str | os.PathLike) -> Path:
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def image_grid(found, model_names: Sequence[str], path: str | os.PathLike, *, rows: int = 8,
               bounds: Sequence[float] = (0.0, 1.0), class_names: Sequence[str] | None = None,
               title: str | None = None) -> Path:
    """A PNG of difference-inducing inputs: seed, generated input, difference, predictions.

    Args:
        found: A :class:`~deepfault.xplore.results.FoundInputs` (its first ``rows`` rows).
        model_names: Names of the models, in the predictions' order.
        path: The PNG to write (atomically).
        rows: Inputs shown.
        bounds: Value range of the inputs (grey scale limits).
        class_names: Names of the classes (default their indices).
        title: Figure title.
    """
    plt = _pyplot()
    n = min(rows, len(found))
    lo, hi = float(bounds[0]), float(bounds[1])
    lines = 1 + len(model_names)
    fig, axes = plt.subplots(max(n, 1), 3, figsize=(7.2, (1.9 + 0.16 * lines) * max(n, 1)), squeeze=False,
                             layout="constrained")
    label = (lambda c: class_names[c]) if class_names else str
    for i in range(n):
        seed, new = as_image(found.seeds[i]), as_image(found.inputs[i])
        diff = new - seed
        span = max(float(np.abs(diff).max()), 1e-12)
        axes[i, 0].imshow(seed, cmap="gray", vmin=lo, vmax=hi)
        common = label(int(found.common_class[i]))
        axes[i, 0].set_title(f"seed #{int(found.seed_index[i])}\nall predict {common}", fontsize=8)
        axes[i, 1].imshow(new, cmap="gray", vmin=lo, vmax=hi)
        preds = "\n".join(f"{m}: {label(int(p))}" for m, p in zip(model_names, found.predictions[i],
                                                                    strict=True))
        axes[i, 1].set_title(f"after {int(found.iteration[i])} step(s)\n{preds}", fontsize=7)
        axes[i, 2].imshow(diff if diff.ndim == 2 else diff.mean(-1), cmap="coolwarm", vmin=-span, vmax=span)
        axes[i, 2].set_title(f"difference\nL1 {float(found.l1[i]):.1f}", fontsize=8)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    if n == 0:
        axes[0, 1].text(0.5, 0.5, "no difference-inducing input", ha="center", va="center")
        for ax in axes.flat:
            ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def coverage_vs_threshold(coverage: Mapping[str, Mapping[str, Sequence[float]]], thresholds: Sequence[float],
                          path: str | os.PathLike, *, title: str | None = None) -> Path:
    """Neuron coverage against the threshold ``t``, one panel per model (the paper's Figure 9).

    Args:
        coverage: ``{method: {model: [coverage at each t]}}`` (ratios in [0, 1]).
        thresholds: The ``t`` values.
        path: The PNG to write.
        title: The figure's title (default: none).
    """
    plt = _pyplot()
    models = list(next(iter(coverage.values())))
    fig, axes = plt.subplots(1, len(models), figsize=(3.4 * len(models), 3.0), squeeze=False, sharey=True,
                             layout="constrained")
    markers = ["o", "s", "^", "D", "v"]
    for ax, model in zip(axes[0], models, strict=True):
        for i, (method, per_model) in enumerate(coverage.items()):
            ax.plot(thresholds, [100 * v for v in per_model[model]], marker=markers[i % len(markers)],
                    label=method)
        ax.set_title(model, fontsize=9)
        ax.set_xlabel("threshold t")
        ax.set_xticks(list(thresholds))
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("neuron coverage (%)")
    axes[0, -1].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def coverage_over_time(trace: Sequence[Mapping], model_names: Sequence[str], num_neurons: Sequence[int],
                       path: str | os.PathLike, *, title: str | None = None) -> Path:
    """Each model's coverage and the number found against time, from a run's trace."""
    plt = _pyplot()
    seconds = [p["seconds"] for p in trace]
    fig, ax = plt.subplots(figsize=(5.5, 3.2), layout="constrained")
    for k, name in enumerate(model_names):
        ax.plot(seconds, [100 * p["covered"][k] / num_neurons[k] for p in trace], label=name)
    ax.set_xlabel("seconds")
    ax.set_ylabel("neuron coverage (%)")
    ax.grid(alpha=0.3)
    twin = ax.twinx()
    twin.plot(seconds, [p["found"] for p in trace], color="grey", linestyle="--", label="found")
    twin.set_ylabel("difference-inducing inputs")
    ax.legend(fontsize=8, loc="lower right")
    if title:
        ax.set_title(title, fontsize=10)
    return _save(fig, path)
