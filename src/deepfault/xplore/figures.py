"""Figures of DeepXplore runs: the image grid, coverage against ``t`` (the paper's Figure 9)
and coverage over time. matplotlib is imported inside each function (the ``report`` extra).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ..experiment.report import new_figure, save_figure

__all__ = ["image_grid", "coverage_vs_threshold", "coverage_over_time"]


def image_grid(found, model_names: Sequence[str], path: str | os.PathLike, *, rows: int = 8,
               bounds: Sequence[float] = (0.0, 1.0), class_names: Sequence[str] | None = None,
               title: str | None = None, true_labels: np.ndarray | None = None) -> Path:
    """A PNG of difference-inducing inputs: seed, generated input, difference, predictions.

    Args:
        found: A :class:`~deepfault.xplore.results.FoundInputs` (its first ``rows`` rows).
        model_names: Names of the models, in the predictions' order.
        path: The PNG to write (atomically).
        rows: Inputs shown.
        bounds: Value range of the inputs (grey scale limits).
        class_names: Names of the classes (default their indices).
        title: Figure title.
        true_labels: ``(F,)`` each input's true label (its seed's): shown beside the seed, and a
            tick after each model that predicts it.
    """
    from ..experiment.figures import GridCaptions, difference_grid

    def note(text: str) -> Path:
        fig = new_figure(4.0, 1.0)
        fig.text(0.5, 0.5, text, ha="center", va="center")
        return save_figure(fig, Path(path))

    n = min(rows, len(found))
    if n == 0:
        return note("no difference-inducing input")
    label = (lambda c: class_names[c]) if class_names else str
    after, before = [], []
    for i in range(n):
        truth = None if true_labels is None else int(true_labels[i])
        pairs = zip(model_names, found.predictions[i], strict=True)
        preds = "\n".join(f"{m}: {label(int(p))}" + (" \u2713" if int(p) == truth else "") for m, p in pairs)
        after.append(f"after {int(found.iteration[i])} step(s)\n{preds}")
        said = "" if truth is None else f", label {label(truth)}"
        common = label(int(found.common_class[i]))
        before.append(f"seed #{int(found.seed_index[i])}{said}\nall predict {common}")
    png = difference_grid(
        found.seeds[:n], found.inputs[:n], path, bounds=bounds, columns=1, title=title,
        captions=GridCaptions(before=before, after=after, highlight=[True] * n, labels=("seed", "generated")))
    # difference_grid writes nothing for inputs that are no images (a vector of 10 features)
    return png if png is not None else note(f"{len(found)} inputs found; they are not images")


def coverage_vs_threshold(coverage: Mapping[str, Mapping[str, Sequence[float]]], thresholds: Sequence[float],
                          path: str | os.PathLike, *, title: str | None = None) -> Path:
    """Neuron coverage against the threshold ``t``, one panel per model (the paper's Figure 9).

    Args:
        coverage: ``{method: {model: [coverage at each t]}}`` (ratios in [0, 1]).
        thresholds: The ``t`` values.
        path: The PNG to write.
        title: The figure's title (default: none).
    """
    models = list(next(iter(coverage.values())))
    fig = new_figure(3.4 * len(models), 3.0, layout="constrained")
    axes = fig.subplots(1, len(models), squeeze=False, sharey=True)
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
    return save_figure(fig, Path(path))


def coverage_over_time(trace: Sequence[Mapping], model_names: Sequence[str], num_neurons: Sequence[int],
                       path: str | os.PathLike, *, title: str | None = None) -> Path:
    """Each model's coverage and the number found against time, from a run's trace."""
    seconds = [p["seconds"] for p in trace]
    fig = new_figure(5.5, 3.2, layout="constrained")
    ax = fig.subplots()
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
    return save_figure(fig, Path(path))
