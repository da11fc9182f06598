"""Coverage figures as PNG files: coverage versus threshold, per-layer coverage, growth, the
surprise scores of a measurement, and a prioritisation's ranking curves and score
distributions.

matplotlib (extra ``report``) is imported inside each function, with the ``Agg`` backend, so
importing deepfault never imports it. Every figure is written atomically.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ..experiment.report import new_figure, save_figure, tex_safe
from .measure import CoverageReport
from .results import RankReport

__all__ = ["plot_threshold_curve", "plot_layer_coverage", "plot_growth", "plot_ranking_curves",
           "plot_score_distributions", "plot_surprise_scores", "save_figures", "save_rank_figures",
           "threshold_curves"]

#: Line styles cycled with the colours, so that lines stay apart in grey print and for
#: readers who cannot tell the colours apart.
_STYLES = ("-", "--", "-.", ":")
#: matplotlib's default colours without its grey (C7), which the reference lines use.
_COLOURS = ("C0", "C1", "C2", "C3", "C4", "C5", "C6", "C8", "C9")
#: Hollow markers, one per line with its colour and style, so that curves that coincide (NC
#: and NAC at the same threshold) stay visible as two marker shapes on one line.
#: Ten of them against nine colours, so a colour comes back with another marker.
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")
#: Legend text size (points) of the coverage figures, about 12 px at the figures' 100 dpi.
_LEGEND = 9


def _line_style(i: int) -> dict:
    """The ``i``-th line's colour, dash and marker: no two of the first 90 lines share both colour
    and marker.
    """
    return {"color": _COLOURS[i % len(_COLOURS)], "linestyle": _STYLES[i % len(_STYLES)],
            "marker": _MARKERS[i % len(_MARKERS)], "markerfacecolor": "none",
            "markersize": 7 - 1.5 * (i % 3), "linewidth": 1.6}


def _same_as(curves: Mapping[str, Sequence]) -> dict[str, str]:
    """``{label: earlier label}`` for each curve whose points equal an earlier curve's."""
    seen: dict[tuple, str] = {}
    out = {}
    for label, points in curves.items():
        key = tuple(tuple(p) for p in points)
        if key in seen:
            out[label] = seen[key]
        else:
            seen[key] = label
    return out


def _pyplot():
    """Check that matplotlib is installed, or name the extra (the figures themselves use
    :func:`~deepfault.experiment.report.new_figure`, no pyplot state).
    """
    try:
        import matplotlib
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            "coverage figures need matplotlib; install the extra: pip install -e '.[report]'"
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
    fig = new_figure(6.5, 3.8)
    ax = fig.subplots()
    same = _same_as({k: sorted(v) for k, v in curves.items()})
    for i, (label, points) in enumerate(curves.items()):
        xs, ys = zip(*sorted(points), strict=True)
        ax.plot(xs, [100 * y for y in ys], label=label + (f" (= {same[label]})" if label in same else ""),
                **_line_style(i))
    ax.set_xlabel(xlabel)
    ax.set_ylabel("coverage (%)")
    ax.set_ylim(0, 100)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=_LEGEND, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save_figure(fig, Path(path))


def plot_layer_coverage(report: CoverageReport, path: str | os.PathLike, *, title: str | None = None) -> Path:
    """Grouped bars: each layer's coverage (%) under each criterion of ``report`` that has a
    ratio (TKNP, which counts patterns, is left out).
    """
    results = [r for r in report.results if r.total is not None and r.per_layer]
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
    ax.legend(fontsize=_LEGEND, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save_figure(fig, Path(path))


def plot_growth(report: CoverageReport, path: str | os.PathLike, *, title: str | None = None) -> Path:
    """Coverage (%) after the first ``n`` inputs, ``n`` on a log scale (TKNP on its own axis, in
    patterns). Each curve has its own colour, dash and hollow marker, and a curve equal to an
    earlier one says so in the legend (``nac(threshold=0) (= nc(threshold=0))``), so that
    neither hides the other.
    """
    fig = new_figure(7.0, 4.0)
    ax = fig.subplots()
    totals = {r.label: r.total for r in report.results}
    curves = {label: points for label, points in report.growth.items() if points}
    same = _same_as({label: [(x, y / (totals.get(label) or 1)) for x, y in points]
                     for label, points in curves.items()})
    twin = None
    handles = []
    for i, (label, points) in enumerate(curves.items()):
        xs, ys = zip(*points, strict=True)
        total = totals.get(label)
        shown = label + (f" (= {same[label]})" if label in same else "")
        if total:
            handles += ax.plot(xs, [100 * y / total for y in ys], label=shown, **_line_style(i))
        else:
            twin = twin or ax.twinx()
            handles += twin.plot(xs, ys, label=shown + ", patterns (right axis)",
                                 **{**_line_style(i), "color": "grey"})
            twin.set_ylabel("patterns")
    ax.set_xscale("log")
    ax.set_xlabel("inputs")
    ax.set_ylabel("coverage (%)")
    ax.set_ylim(0, 100)
    ax.set_title(title or "Coverage growth over inputs")
    ax.grid(alpha=0.3)
    ax.legend(handles=handles, fontsize=_LEGEND, loc="upper left",
              bbox_to_anchor=(1.12 if twin else 1.01, 1.0))
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
    if any(r.total is not None and r.per_layer for r in report.results):
        paths.append(plot_layer_coverage(report, directory / f"{prefix}_layers.png"))
    if any(report.growth.values()):
        paths.append(plot_growth(report, directory / f"{prefix}_growth.png"))
    if report.scores:
        paths.append(plot_surprise_scores(report, directory / f"{prefix}_surprise.png"))
    return paths


def plot_surprise_scores(report: CoverageReport, path: str | os.PathLike) -> Path:
    """One histogram per surprise adequacy of a measurement, with its coverage's range
    ``[0, U)`` shaded: how the inputs spread over the buckets.
    """
    summary = (report.surprise or {}).get("criteria", {})
    uppers = {v["score"]: v["upper"] for v in summary.values()}
    kinds = list(report.scores)
    fig = new_figure(3.6 * len(kinds) + 0.6, 3.0, layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(kinds)))
    for ax, kind in zip(axes, kinds, strict=True):
        s = report.scores[kind]
        fin = s[np.isfinite(s)]
        edges, scale = _bins(fin, bins=min(60, max(10, len(fin) // 10)))
        if scale is not None:
            ax.set_xscale("asinh", linear_width=scale)
        if len(fin):
            ax.hist(fin, bins=edges, color="#4c72b0")
        upper = uppers.get(kind)
        if upper is not None:
            ax.axvspan(0, upper, color="#55a868", alpha=0.12, label=f"[0, U), U = {upper:.4g}")
            ax.axvline(upper, color="#55a868", linewidth=1)
            ax.legend(fontsize=7, loc="upper right")
        inf = len(s) - len(fin)
        notes = (f" ({inf} not finite)" if inf else "") + (", asinh axis" if scale else "")
        ax.set_title(kind.upper() + notes, fontsize=10)
        ax.set_xlabel("score")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("inputs")
    return save_figure(fig, Path(path))


def _curve(found: np.ndarray, points: int = 1500) -> tuple[np.ndarray, np.ndarray]:
    """``(share inspected, share found)`` with at most ``points`` steps, starting at (0, 0)."""
    n = len(found)
    idx = np.unique(np.linspace(0, n - 1, min(n, points)).round().astype(np.int64))
    return np.concatenate([[0.0], (idx + 1) / n]), np.concatenate([[0.0], found[idx]])


def plot_ranking_curves(report: RankReport, path: str | os.PathLike, *, head: float = 0.1) -> Path:
    """The ranking curve of every prioritiser: the share of the misclassified inputs found
    against the share of inputs inspected in its order, over all inputs (left) and over the
    first ``head`` of them (right), with a random order's diagonal and the ideal order. The
    legend lists the prioritisers by APFD, best first.
    """
    n, k = report.num_inputs, report.num_failing
    ranked = sorted(report.rankings, key=lambda r: -(r.apfd if r.apfd is not None else -1.0))
    fig = new_figure(11.0, 4.2, layout="constrained")
    full, zoom = fig.subplots(1, 2)
    ideal_x = np.array([0.0, k / n if n else 0.0, 1.0])
    for ax, right in ((full, 1.0), (zoom, head)):
        ax.plot([0, right], [0, right], color="grey", linestyle="--", linewidth=1,
                label="random order (APFD 0.5)")
        ax.plot(ideal_x, [0, 1, 1], color="black", linestyle=":", linewidth=1,
                label="ideal order" + (f" (APFD {1 - k / (2 * n):.3f})" if k else ""))
        for i, r in enumerate(ranked):
            xs, ys = _curve(r.found(report.failing))
            keep = xs <= right + 1.0 / max(n, 1)
            label = f"{r.name}  ({'-' if r.apfd is None else f'{r.apfd:.3f}'})"
            ax.step(xs[keep], ys[keep], where="post", color=_COLOURS[i % len(_COLOURS)],
                    linestyle=_STYLES[(i + i // len(_COLOURS)) % len(_STYLES)], linewidth=1.6,
                    label=tex_safe(label))
        ax.set_xlim(0, right)
        ax.set_ylim(0, 1.01)
        ax.set_xlabel(f"share of the {n:,} inputs inspected, in the prioritiser's order")
        ax.grid(alpha=0.3)
    full.set_ylabel(f"share of the {k:,} misclassified inputs found")
    full.set_title("All inputs", fontsize=10)
    zoom.set_title(f"The first {head:.0%} of the inputs", fontsize=10)
    zoom.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), title="prioritiser  (APFD)",
                title_fontsize=8)
    return save_figure(fig, Path(path))


def _bins(values: np.ndarray, bins: int = 40) -> tuple[np.ndarray, float | None]:
    """Histogram edges for ``values``; for a long tail (the full range more than 20 times the
    central 90%'s), edges equal on an ``asinh`` axis and that axis' linear width, so the bulk
    and the outliers both stay readable.
    """
    if not len(values):
        return np.linspace(0, 1, bins + 1), None
    lo, hi = float(values.min()), float(values.max())
    q5, q95 = np.quantile(values, [0.05, 0.95])
    core = float(q95 - q5)
    if core <= 0 or hi - lo <= 20 * core:
        return np.histogram_bin_edges(values, bins=bins), None
    return core * np.sinh(np.linspace(np.arcsinh(lo / core), np.arcsinh(hi / core), bins + 1)), core


def plot_score_distributions(report: RankReport, path: str | os.PathLike) -> Path | None:
    """One panel per prioritiser with a score: histograms of the scores of the misclassified
    and of the correctly classified inputs (each normalised to its own count, so a small
    misclassified group stays visible). The better a score separates the two, the earlier
    its order finds the misclassified inputs. ``None`` (nothing written) without scores.
    """
    scored = [r for r in report.rankings if r.scores is not None]
    if not scored:
        return None
    cols = min(4, len(scored))
    rows = -(-len(scored) // cols)
    fig = new_figure(3.1 * cols, 2.5 * rows + 0.3, layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows, cols)).ravel()
    failing = report.failing
    for ax, r in zip(axes, scored, strict=False):
        assert r.scores is not None
        fin = np.isfinite(r.scores)
        edges, scale = _bins(r.scores[fin])
        if scale is not None:  # a long tail (an LSA of 10^4 beside most near 10): asinh axis
            ax.set_xscale("asinh", linear_width=scale)
        for group, color, label in ((~failing, "#4c72b0", "correct"), (failing, "#dd5544", "misclassified")):
            v = r.scores[fin & group]
            if len(v):
                ax.hist(v, bins=edges, weights=np.full(len(v), 1.0 / len(v)), histtype="step", linewidth=1.5,
                        color=color, label=f"{label} ({len(v):,})")
        first = "lowest" if r.ascending else "highest"
        extra = f"; {int((~fin).sum())} not finite" if (~fin).any() else ""
        extra += "; asinh axis" if scale else ""
        ax.set_title(tex_safe(f"{r.name}: {first} first{extra}"), fontsize=9)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6.5)
    for ax in axes[len(scored):]:
        ax.set_visible(False)
    fig.supylabel("share of the group", fontsize=8)
    return save_figure(fig, Path(path))


def save_rank_figures(report: RankReport, directory: str | os.PathLike, *,
                      prefix: str = "rank") -> list[Path]:
    """Write ``{prefix}_curves.png`` and (when a prioritiser has scores) ``{prefix}_scores.png``
    into ``directory``; returns the paths written.
    """
    directory = Path(directory)
    paths = [plot_ranking_curves(report, directory / f"{prefix}_curves.png")]
    scores = plot_score_distributions(report, directory / f"{prefix}_scores.png")
    return paths + ([scores] if scores is not None else [])
