"""Coverage figures as PNG files: coverage versus threshold, per-layer coverage, growth.

matplotlib (extra ``report``) is imported inside each function, with the ``Agg`` backend, so
importing deepfault never imports it. Every figure is written atomically.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..experiment.report import new_figure, save_figure
from .measure import CoverageReport

__all__ = ["plot_threshold_curve", "plot_layer_coverage", "plot_growth", "save_figures", "threshold_curves"]


def _pyplot():
    """Check that matplotlib is installed, or name the extra (the figures themselves use
    :func:`~deepfault.experiment.report.new_figure`, no pyplot state).
    """
    try:
        import matplotlib
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            "coverage figures need matplotlib; install the extra: pip install 'deepfault[report]'"
        ) from err
    return matplotlib


def threshold_curves(report: CoverageReport) -> dict[str, list[tuple[float, float]]]:
    """``{criterion: [(threshold, ratio), ...]}`` for the thresholded criteria with two or more
    thresholds in ``report``.
    """
    curves: dict[str, list[tuple[float, float]]] = {}
    for r in report.results:
        if "threshold" in r.params and r.ratio is not None:
            curves.setdefault(r.criterion, []).append((r.params["threshold"], r.ratio))
    return {k: sorted(v) for k, v in curves.items() if len(v) > 1}


def plot_threshold_curve(
    curves: Mapping[str, Sequence[tuple[float, float]]],
    path: str | os.PathLike,
    *,
    title: str = "Neuron coverage versus threshold",
    xlabel: str = "threshold t",
) -> Path:
    """DeepXplore's figure: coverage (%) against the activation threshold, one line per entry.

    Args:
        curves: ``{label: [(threshold, ratio), ...]}`` (for example one line per model).
        path: The PNG file.
        title: The figure's title.
        xlabel: The x axis' label.
    """
    fig = new_figure(5.5, 3.8)
    ax = fig.subplots()
    for label, points in curves.items():
        xs, ys = zip(*sorted(points), strict=True)
        ax.plot(xs, [100 * y for y in ys], marker="o", label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("coverage (%)")
    ax.set_ylim(0, 100)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save_figure(fig, Path(path))


def plot_layer_coverage(report: CoverageReport, path: str | os.PathLike, *, title: str | None = None) -> Path:
    """Grouped bars: each layer's coverage (%) under each criterion of ``report`` that has a
    ratio (TKNP, which counts patterns, is left out).
    """
    results = [r for r in report.results if r.total is not None]
    layers = list(report.layout.names)
    fig = new_figure(max(5.5, 0.9 * len(layers) + 2), 3.8)
    ax = fig.subplots()
    width = 0.8 / max(len(results), 1)
    for j, r in enumerate(results):
        ys = [100 * c / t if t else 0.0 for c, t in (r.per_layer[name] for name in layers)]
        ax.bar([i + (j - (len(results) - 1) / 2) * width for i in range(len(layers))], ys, width,
               label=r.label)
    ax.set_xticks(range(len(layers)))
    ax.set_xticklabels(layers, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("coverage (%)")
    ax.set_ylim(0, 100)
    ax.set_title(title or f"Coverage per layer ({report.num_inputs} inputs, {report.transform})")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save_figure(fig, Path(path))


def plot_growth(report: CoverageReport, path: str | os.PathLike, *, title: str | None = None) -> Path:
    """Coverage (%) after the first ``n`` inputs, ``n`` on a log scale (TKNP on its own axis, in
    patterns).
    """
    fig = new_figure(5.5, 3.8)
    ax = fig.subplots()
    totals = {r.label: r.total for r in report.results}
    twin = None
    for label, points in report.growth.items():
        if not points:
            continue
        xs, ys = zip(*points, strict=True)
        total = totals.get(label)
        if total:
            ax.plot(xs, [100 * y / total for y in ys], marker=".", label=label)
        else:
            twin = twin or ax.twinx()
            twin.plot(xs, ys, marker=".", linestyle="--", color="grey", label=label)
            twin.set_ylabel("patterns")
            twin.legend(fontsize=7, loc="lower left", bbox_to_anchor=(1.15, 0.0))
    ax.set_xscale("log")
    ax.set_xlabel("inputs")
    ax.set_ylabel("coverage (%)")
    ax.set_ylim(0, 100)
    ax.set_title(title or "Coverage growth over inputs")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.15 if twin else 1.01, 1.0))
    return save_figure(fig, Path(path))


def save_figures(
    report: CoverageReport, directory: str | os.PathLike, *, prefix: str = "coverage"
) -> list[Path]:
    """Write ``{prefix}_threshold.png`` (when a criterion has several thresholds),
    ``{prefix}_layers.png`` and ``{prefix}_growth.png`` (when growth was recorded) into
    ``directory``; returns the paths written.
    """
    directory = Path(directory)
    paths = []
    curves = threshold_curves(report)
    if curves:
        paths.append(plot_threshold_curve(curves, directory / f"{prefix}_threshold.png"))
    if any(r.total is not None for r in report.results):
        paths.append(plot_layer_coverage(report, directory / f"{prefix}_layers.png"))
    if any(report.growth.values()):
        paths.append(plot_growth(report, directory / f"{prefix}_growth.png"))
    return paths
