"""Tables, figures and one self-contained HTML page from a results store.

The report restates the paper's evaluation (Eniser et al., FASE 2019, Section 5 and the
appendix) for one experiment of a :class:`~deepfault.experiment.store.ResultStore`:

- ``table3_loss_accuracy``: mean loss and accuracy on the synthesized inputs (Table 3);
- ``table4_distances``: L1, L2 and L_inf distances to the originals (Table 4);
- ``table5_increase``: share of the suspicious neurons whose value increased (Table 5);
- ``table6_increase_kprime``: share of the top ``k'`` neurons that increased (Tables 6/7);
- ``table8_significance``: one-sided Mann-Whitney tests with A12 (Tables 8/9);
- ``table10_timing``: synthesis and spectrum wall time (Table 10);
- ``summary_accuracy_vs_random``: does each measure give significantly lower accuracy
  than random, per model and ``k``;
- ``fig3_layers_<model>.png`` (Fig. 3) and ``fig4_examples.png`` (Fig. 4).

Every table is written as Markdown (rounded, laid out like the paper) and as CSV (tidy,
full precision: one row per model, ``k``, approach and so on), and all of them go into
``tables.md`` and ``report.html``. Per-input samples are pooled over classes and, for the
random baseline, over repetitions before averaging or testing, as in the paper (100
inputs per measure, 500 for random).

matplotlib and jinja2 are imported inside the functions that need them.
"""

from __future__ import annotations

import base64
import csv
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import DeepFaultError
from .analysis import DeepFaultAnalysis as _Data
from .analysis import choose_experiment, load_analysis
from .store import ResultStore

__all__ = ["ReportPaths", "write_report"]

#: Significance level of every test in the report.
ALPHA = 0.05
#: Classes shown in Fig. 4.
EXAMPLE_CLASSES = 4

_SHORT = {"tarantula": "T", "ochiai": "O", "dstar": "D", "random": "R", "uniform": "U"}
_LONG = {"tarantula": "Tarantula", "ochiai": "Ochiai", "dstar": "D*", "random": "Random",
         "uniform": "Uniform"}
_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]


@dataclass(frozen=True)
class ReportPaths:
    """Where :func:`write_report` put each file.

    ``tables`` and ``csvs`` map a table's name (``"table3_loss_accuracy"``, ...) to its
    Markdown and CSV files; ``figures`` maps a figure's file stem to its PNG.
    """

    out_dir: Path
    config_hash: str
    html: Path
    tables_md: Path
    tables: dict[str, Path] = field(default_factory=dict)
    csvs: dict[str, Path] = field(default_factory=dict)
    figures: dict[str, Path] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "out_dir": str(self.out_dir), "config_hash": self.config_hash, "html": str(self.html),
            "tables_md": str(self.tables_md),
            "tables": {k: str(v) for k, v in self.tables.items()},
            "csvs": {k: str(v) for k, v in self.csvs.items()},
            "figures": {k: str(v) for k, v in self.figures.items()},
        }


# --- tables ------------------------------------------------------------------------------


@dataclass
class _Grid:
    """A table as shown: text cells, with marks ``"best"`` (bold) or ``"sig"`` (p < alpha).

    The first ``group`` columns name the row; the HTML page blanks them where they repeat
    the row above, as the paper's merged cells do.
    """

    columns: list
    rows: list
    marks: dict = field(default_factory=dict)
    subtitle: str = ""
    group: int = 1

    def html_rows(self) -> list:
        out, previous = [], None
        for i, row in enumerate(self.rows):
            head = row[: self.group]
            cells, same = [], previous is not None
            for j, text in enumerate(row):
                if j < self.group:
                    same = same and previous[j] == text
                classes = [self.marks.get((i, j), "")]
                classes.append("key" if j < self.group else "num")
                cells.append({"text": "" if j < self.group and same else text,
                              "cls": " ".join(c for c in classes if c)})
            new_group = previous is not None and previous[0] != row[0]
            out.append({"cls": "group-start" if new_group else "", "cells": cells})
            previous = head
        return out


@dataclass
class _Table:
    name: str
    title: str
    caption: str
    grids: list
    csv_columns: list
    csv_rows: list


def _mean(values) -> float:
    return float(np.mean(values)) if len(values) else float("nan")


def _short(approach: str) -> str:
    return _SHORT.get(approach, approach)


def _long(approach: str) -> str:
    return _LONG.get(approach, approach)


def _legend(approaches) -> str:
    return ", ".join(f"{_short(a)}: {_long(a)}" for a in approaches if _short(a) != _long(a))


def _fixed(x: float, digits: int = 2) -> str:
    return "–" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def _num(x: float) -> str:
    """Three significant figures without exponents for the magnitudes distances take."""
    if x is None or not math.isfinite(x):
        return "–"
    a = abs(x)
    if a >= 100:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}" if a >= 0.01 or a == 0 else f"{x:.2g}"


def _pct(x: float) -> str:
    return "–" if not math.isfinite(x) else f"{100 * x:.1f}%"


def _p(p: float) -> str:
    return "–" if not math.isfinite(p) else f"{p:.2g}"


def _seconds(s: float) -> str:
    if not math.isfinite(s):
        return "–"
    return f"{s * 1000:.3g} ms" if s < 1 else f"{s:.3g} s"


def _table3(d: _Data) -> _Table:
    grid = _Grid(["model", "k", "metric", *[_short(a) for a in d.approaches]], [], group=3)
    rows = []
    for m in d.models:
        for k in d.ks:
            present = [a for a in d.approaches if d.pool(m, k, a) is not None]
            if not present:
                continue
            loss = {a: _mean(d.pool(m, k, a).loss) for a in present}
            acc = {a: _mean(d.pool(m, k, a).correct) for a in present}
            for a in present:
                rows.append([m, k, a, len(d.pool(m, k, a).loss), loss[a], acc[a]])
            for metric, values, best in (("loss", loss, max), ("accuracy", acc, min)):
                i = len(grid.rows)
                grid.rows.append([m, str(k), metric, *[_fixed(values.get(a)) for a in d.approaches]])
                finite = [v for v in values.values() if math.isfinite(v)]
                if finite:
                    top = best(finite)
                    for j, a in enumerate(d.approaches):
                        if a in values and math.isfinite(values[a]) and math.isclose(values[a], top):
                            grid.marks[(i, 3 + j)] = "best"
    return _Table(
        "table3_loss_accuracy", "Table 3. Loss and accuracy of the synthesized inputs",
        "Mean cross-entropy loss and accuracy of the model on the inputs synthesized from each "
        "approach's suspicious neurons (labels: the originals'), pooled over classes"
        + (" and, for the baselines, over repetitions" if d.baselines else "")
        + ". Bold: the most adversarial approach per model and k (highest loss, lowest accuracy). "
        + _legend(d.approaches) + ".",
        [grid], ["model", "k", "approach", "inputs", "loss", "accuracy"], rows)


def _table4(d: _Data) -> _Table:
    by_k = _Grid(["model", "k", "L1", "L2", "L_inf"], [], group=1,
                 subtitle="Averaged over the inputs of the measures (" + ", ".join(
                     _short(a) for a in d.measures) + ")")
    by_a = _Grid(["model", "approach", "L1", "L2", "L_inf"], [], group=1,
                 subtitle="Per approach, over every k")
    rows = []
    for m in d.models:
        for k in d.ks:
            for a in d.approaches:
                p = d.pool(m, k, a)
                if p is not None:
                    rows.append([m, k, a, len(p.l1), _mean(p.l1), _mean(p.l2), _mean(p.linf)])
            pooled = [d.pooled(m, k, d.measures, attr) for attr in ("l1", "l2", "linf")]
            if pooled[0]:
                rows.append([m, k, "measures", len(pooled[0]), *[_mean(v) for v in pooled]])
                by_k.rows.append([m, str(k), *[_num(_mean(v)) for v in pooled]])
        for a in d.approaches:
            values = [[x for k in d.ks for x in d.pooled(m, k, [a], attr)] for attr in ("l1", "l2", "linf")]
            if values[0]:
                by_a.rows.append([m, _long(a), *[_num(_mean(v)) for v in values]])
    return _Table(
        "table4_distances", "Table 4. Distance between synthesized and original inputs",
        "Mean L1 (Manhattan), L2 (Euclidean) and L_inf (Chebyshev) distance between each "
        "synthesized input and its original, in the data set's pixel units "
        f"(bounds {d.config.get('bounds', '?')}, maximum distance d = {d.config.get('distance', '?')}). "
        "The CSV also has one row per approach and k; approach 'measures' pools the measures.",
        [by_k, by_a], ["model", "k", "approach", "inputs", "l1", "l2", "linf"], rows)


def _table5(d: _Data) -> _Table:
    cols = [_short(a) for a in d.approaches] + (["measures"] if len(d.measures) > 1 else [])
    grid = _Grid(["model", "k", *cols], [], group=1)
    rows = []
    for m in d.models:
        for k in d.ks:
            cells, any_ = [], False
            for a in d.approaches:
                p = d.pool(m, k, a)
                value = _mean(p.increased) if p is not None else float("nan")
                if p is not None:
                    any_ = True
                    rows.append([m, k, a, len(p.increased), value])
                cells.append(_pct(value))
            if len(d.measures) > 1:
                pooled = d.pooled(m, k, d.measures, "increased")
                if pooled:
                    rows.append([m, k, "measures", len(pooled), _mean(pooled)])
                cells.append(_pct(_mean(pooled)))
            if any_:
                grid.rows.append([m, str(k), *cells])
    return _Table(
        "table5_increase", "Table 5. Suspicious neurons whose value increased",
        "Share of the k suspicious neurons whose value is larger on the synthesized input than "
        "on its original, averaged over inputs; 'measures' pools "
        + ", ".join(_short(a) for a in d.measures) + ". " + _legend(d.approaches) + ".",
        [grid], ["model", "k", "approach", "inputs", "increased"], rows)


def _table6(d: _Data) -> _Table:
    grid = _Grid(["model", "approach", "k", *[f"k'={kp}" for kp in d.ks]], [], group=2)
    rows = []
    for m in d.models:
        for a in d.measures:
            for k in d.ks:
                p = d.pool(m, k, a)
                if p is None:
                    continue
                cells = []
                for kp in d.ks:
                    values = p.increased if kp == k else p.increased_at.get(kp, [])
                    if kp < k or not values:
                        cells.append("" if kp < k else "–")
                        continue
                    rows.append([m, a, k, kp, len(values), _mean(values)])
                    cells.append(_fixed(_mean(values)))
                grid.rows.append([m, _long(a), str(k), *cells])
    return _Table(
        "table6_increase_kprime", "Tables 6/7. Increase of the top k' neurons",
        "For inputs synthesized to increase the k most suspicious neurons (rows), the share of "
        "the k' >= k most suspicious neurons of the same ranking (columns) whose value increased. "
        "The diagonal k' = k is Table 5; '–': k' not recorded (more than the model's neurons).",
        [grid], ["model", "approach", "k", "k_prime", "inputs", "increased"], rows)


def _table8(d: _Data, tests: dict) -> _Table:
    opponents = d.measures + d.baselines
    columns = ["technique", "model", "k"]
    for b in opponents:
        columns += [f"vs {_short(b)} loss", f"vs {_short(b)} accuracy"]
    grid = _Grid(columns, [], group=2)
    rows = []
    for a in d.measures:
        for m in d.models:
            for k in d.ks:
                if d.pool(m, k, a) is None:
                    continue
                cells = []
                for b in opponents:
                    for metric in ("loss", "correct"):
                        c = tests.get((m, k, a, b, metric))
                        if c is None:
                            cells.append("—" if a == b else "–")
                            continue
                        sig = c.significant(ALPHA)
                        rows.append([m, k, a, b, metric, c.alternative, c.statistic, c.p_value,
                                     c.a12, c.n_a, c.n_b, sig])
                        if sig:
                            grid.marks[(len(grid.rows), len(cells) + 3)] = "sig"
                        cells.append(("✓ " if sig else "") + f"p={_p(c.p_value)}\nA12={_fixed(c.a12)}")
                grid.rows.append([_long(a), m, str(k), *cells])
    return _Table(
        "table8_significance", "Tables 8/9. Statistical significance",
        "One-sided Mann-Whitney U test per model and k of the technique in the row against the "
        "one in the column, on the per-input loss (is the row's loss greater?) and correctness "
        f"(is the row's accuracy lower?). ✓: p < {ALPHA}, the row is significantly more adversarial. "
        "A12 (Vargha-Delaney) is the probability that a row input's value exceeds a column "
        "input's (ties count half): above 0.5 means higher loss; for accuracy, below 0.5 means "
        "lower accuracy. Baseline samples pool all repetitions. " + _legend(opponents) + ".",
        [grid], ["model", "k", "approach", "versus", "metric", "alternative", "statistic", "p_value",
                 "a12", "n_approach", "n_versus", "significant"], rows)


def _table10(d: _Data) -> _Table:
    grid = _Grid(["model", "approach", *[f"k={k}" for k in d.ks], "all k", "spectrum / class"], [], group=1)
    rows = []
    for m in d.models:
        spectra = [s for (mm, _), s in d.spectrum.items() if mm == m]
        spectrum = _mean(spectra)
        for a in d.approaches:
            cells, total_s, total_n = [], 0.0, 0
            for k in d.ks:
                p = d.pool(m, k, a)
                if p is None:
                    cells.append("–")
                    continue
                n = len(p.loss)
                rows.append([m, a, k, p.cells, n, p.synthesis_seconds,
                             p.synthesis_seconds / n if n else float("nan"), spectrum])
                total_s += p.synthesis_seconds
                total_n += n
                cells.append(_seconds(p.synthesis_seconds / n if n else float("nan")))
            if total_n:
                grid.rows.append([m, _long(a), *cells, _seconds(total_s / total_n), _seconds(spectrum)])
    return _Table(
        "table10_timing", "Table 10. Wall time",
        "Mean wall time of the synthesis per input (the cell's synthesis time divided by its "
        "inputs, pooled over classes and repetitions) per k, over every k, and the mean time "
        "of one class's spectrum analysis (shared by every approach and k of that class).",
        [grid], ["model", "approach", "k", "cells", "inputs", "synthesis_seconds",
                 "synthesis_seconds_per_input", "spectrum_seconds_per_class"], rows)


def _summary(d: _Data, tests: dict) -> _Table:
    grid = _Grid(["model", "k", "R accuracy", *[f"{_short(a)} accuracy" for a in d.measures],
                  *[f"{_short(a)} < R" for a in d.measures]], [], group=1)
    rows = []
    wins = total = 0
    if "random" in d.approaches:
        for m in d.models:
            for k in d.ks:
                pr = d.pool(m, k, "random")
                if pr is None:
                    continue
                r_acc = _mean(pr.correct)
                accs, verdicts = [], []
                for a in d.measures:
                    c = tests.get((m, k, a, "random", "correct"))
                    if c is None:
                        accs.append("–")
                        verdicts.append("–")
                        continue
                    acc = _mean(d.pool(m, k, a).correct)
                    sig = c.significant(ALPHA)
                    wins += sig
                    total += 1
                    rows.append([m, k, a, acc, r_acc, c.p_value, sig])
                    accs.append(_fixed(acc))
                    if sig:
                        grid.marks[(len(grid.rows), 3 + len(d.measures) + len(verdicts))] = "sig"
                    verdicts.append(("✓" if sig else "✗") + f" p={_p(c.p_value)}")
                grid.rows.append([m, str(k), _fixed(r_acc), *accs, *verdicts])
        verdict = (f"In {wins} of {total} (model, k, measure) combinations the measure's synthesized "
                   f"inputs have significantly lower accuracy than random's (p < {ALPHA}).")
    else:
        verdict = "The experiment has no random baseline, so there is nothing to compare with."
    return _Table(
        "summary_accuracy_vs_random", "Summary: lower accuracy than random?",
        "Accuracy on the synthesized inputs, and whether each measure's is significantly lower "
        "than the random baseline's (one-sided Mann-Whitney U on per-input correctness, random "
        f"pooled over repetitions; ✓: p < {ALPHA}). " + verdict,
        [grid], ["model", "k", "approach", "accuracy", "random_accuracy", "p_value", "significant"], rows)


# --- writing tables ----------------------------------------------------------------------


def _md_cell(text) -> str:
    # Escape what a Markdown renderer would read as a column break or an HTML tag.
    text = str(text).replace("\n", " ").replace("|", "\\|")
    return re.sub(r"<(?=[A-Za-z/!?])", "&lt;", text)


def _markdown(table: _Table, level: int = 2) -> str:
    lines = [f"{'#' * level} {table.title}", "", table.caption, ""]
    for grid in table.grids:
        if grid.subtitle:
            lines += [f"{'#' * (level + 1)} {grid.subtitle}", ""]
        if not grid.rows:
            lines += ["(no data)", ""]
            continue
        lines.append("| " + " | ".join(_md_cell(c) for c in grid.columns) + " |")
        align = [" --- " if j < grid.group else " ---: " for j in range(len(grid.columns))]
        lines.append("|" + "|".join(align) + "|")
        for i, row in enumerate(grid.rows):
            cells = []
            for j, text in enumerate(row):
                text = _md_cell(text)
                if grid.marks.get((i, j)) == "best" and text:
                    text = f"**{text}**"
                cells.append(text)
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def _write_csv(path: Path, table: _Table) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(table.csv_columns)
        for row in table.csv_rows:
            writer.writerow([repr(v) if isinstance(v, float) else v for v in row])


# --- figures -----------------------------------------------------------------------------


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "model"


def _tex_safe(text: str) -> str:
    # A '$' would switch matplotlib to mathtext.
    return str(text).replace("$", r"\$")


def _new_figure(width: float, height: float, layout: str | None = None):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout=layout)
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path: Path) -> None:
    fig.savefig(path, format="png", dpi=100, bbox_inches="tight", metadata={"Software": None})


def _fig3(d: _Data, model: str, path: Path) -> str | None:
    """Grouped bars: suspicious neurons per layer (depth order) for each measure, largest k."""
    ks = [k for k in d.ks if any((model, k, a) in d.layer_counts for a in d.measures)]
    layers = sorted(d.layers.get(model) or [], key=lambda la: la["depth"])
    if not ks or not layers or not d.measures:
        return None
    k = ks[-1]
    names = [la["name"] for la in layers]
    classes = max((len(d.pool(model, k, a).classes) for a in d.measures if d.pool(model, k, a)), default=0)
    width = min(16.0, max(5.0, 0.35 * len(names) * max(1, len(d.measures)) ** 0.5 + 1.5))
    fig = _new_figure(width, 3.6)
    ax = fig.add_subplot(1, 1, 1)
    x = np.arange(len(names))
    bar = 0.8 / len(d.measures)
    for i, a in enumerate(d.measures):
        counts = d.layer_counts.get((model, k, a), {})
        ax.bar(x - 0.4 + bar * (i + 0.5), [counts.get(n, 0) for n in names], bar,
               label=_long(a), color=_COLORS[i % len(_COLORS)])
    ax.set_xticks(x)
    ax.set_xticklabels([_tex_safe(n) for n in names], rotation=45 if len(names) > 6 else 0,
                       ha="right" if len(names) > 6 else "center")
    ax.set_xlabel("layer (input side → output side)")
    ax.set_ylabel(f"suspicious neurons (sum over {classes} classes)")
    ax.set_title(_tex_safe(f"{model}, k = {k}"))
    ax.legend(frameon=False)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    _save(fig, path)
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


def _fig4(d: _Data, path: Path) -> str | None:
    """Originals, synthesized inputs and their differences for a few classes."""
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
    if _image(first[0]) is None:
        return None
    lo, hi = (list(d.config.get("bounds") or []) + [None, None])[:2]
    if lo is None or hi is None or not float(hi) > float(lo):
        # No usable domain recorded: stretch over the examples' own range.
        values = np.concatenate([np.ravel(e[i]) for e in d.examples.values() for i in (0, 1)])
        lo, hi = float(values.min()), float(values.max())
        hi = hi if hi > lo else lo + 1.0
    lo, hi = float(lo), float(hi)
    names = d.config.get("class_names") or []

    def label(c):
        return str(names[c]) if c is not None and 0 <= c < len(names) else str(c)

    diffs = {}
    for c in classes:
        for a in approaches:
            e = d.examples.get((model, c, a, k))
            if e is not None:
                diff = (_image(e[1]) - _image(e[0])) / (hi - lo)
                diffs[(c, a)] = diff.mean(-1) if diff.ndim == 3 else diff
    vmax = max([float(np.abs(v).max()) for v in diffs.values()] + [1e-12])
    ncols = 1 + 2 * len(approaches)
    fig = _new_figure(1.45 * ncols, 1.6 * len(classes) + 0.5, layout="constrained")
    axes = fig.subplots(len(classes), ncols, squeeze=False)
    shown = None
    for r, c in enumerate(classes):
        original = next(d.examples[(model, c, a, k)][0] for a in approaches if (model, c, a, k) in d.examples)
        for j in range(ncols):
            axes[r, j].set_xticks([])
            axes[r, j].set_yticks([])
        img = np.clip((_image(original) - lo) / (hi - lo), 0, 1)
        axes[r, 0].imshow(img, cmap="gray" if img.ndim == 2 else None, vmin=0, vmax=1)
        axes[r, 0].set_ylabel(_tex_safe(f"class {label(c)}"), fontsize=9)
        if r == 0:
            axes[r, 0].set_title("original", fontsize=9)
        for i, a in enumerate(approaches):
            ax_s, ax_d = axes[r, 1 + 2 * i], axes[r, 2 + 2 * i]
            if r == 0:
                ax_s.set_title(f"{_long(a)}", fontsize=9)
                ax_d.set_title(f"{_short(a)} − original", fontsize=9)
            e = d.examples.get((model, c, a, k))
            if e is None:
                ax_s.axis("off")
                ax_d.axis("off")
                continue
            img = np.clip((_image(e[1]) - lo) / (hi - lo), 0, 1)
            ax_s.imshow(img, cmap="gray" if img.ndim == 2 else None, vmin=0, vmax=1)
            changed = e[2] is not None and e[2] != c
            ax_s.set_xlabel(_tex_safe(f"pred {label(e[2])}"), fontsize=8,
                            color="#c00000" if changed else "#333333")
            shown = ax_d.imshow(diffs[(c, a)], cmap="RdBu_r", vmin=-vmax, vmax=vmax)
    fig.suptitle(_tex_safe(f"{model}, k = {k}: originals, synthesized inputs and differences"), fontsize=10)
    if shown is not None:
        cbar = fig.colorbar(shown, ax=axes.ravel().tolist(), shrink=0.6)
        cbar.set_label("difference / (hi − lo)", fontsize=8)
        cbar.ax.tick_params(labelsize=7)
    _save(fig, path)
    return (f"Inputs of {len(classes)} classes for {model} and k = {k}: the original, then for each "
            "approach the synthesized input (with the model's prediction below it, red when it "
            "changed) and its difference from the original (red: brighter, blue: darker; common "
            f"scale ±{vmax:.3g} of the pixel range [{lo:g}, {hi:g}]; colour images show the mean "
            "over channels). The paper's Fig. 4. File: fig4_examples.png.")


# --- the page ----------------------------------------------------------------------------


def _value(v) -> str:
    return v if isinstance(v, str) else json.dumps(v, sort_keys=True)


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def _render_html(d: _Data, tables: list, figures: list) -> str:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("deepfault.experiment", "templates"),
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
    )
    exp = d.experiment
    config = dict(d.config)
    accuracy = config.pop("model_accuracy", None)
    return env.get_template("report.html.j2").render(
        name=exp["name"], config_hash=exp["config_hash"], created=exp["created"],
        num_cells=d.num_cells,
        config=[(k, _value(v)) for k, v in sorted(config.items())],
        provenance=[(k, _value(v)) for k, v in sorted(exp["provenance"].items())],
        accuracy=sorted(accuracy.items()) if isinstance(accuracy, dict) else [],
        tables=tables, figures=figures,
    )


def _write_deepfault(store_path, out_dir, *, config_hash: str | None = None) -> ReportPaths:
    """Write the tables, figures and ``report.html`` of one DeepFault experiment.

    Args:
        store_path: The SQLite results store written by
            :func:`~deepfault.experiment.run_experiment`.
        out_dir: Folder for the report (created when missing; files in it are replaced).
        config_hash: The experiment (a unique prefix is enough); ``None``: the most recent.

    Returns:
        The paths of every file written.

    Raises:
        DeepFaultError: The store does not exist, holds no experiment, or not the one asked
            for (the message lists the available ones), or the experiment has no cells.

    Example::

        paths = write_report("results/paper-mnist.sqlite", "results/report")
        print(paths.html)
    """
    d = load_analysis(Path(store_path), config_hash)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tests = d.comparisons()
    tables = [_summary(d, tests), _table3(d), _table4(d), _table5(d), _table6(d), _table8(d, tests),
              _table10(d)]
    md_paths, csv_paths = {}, {}
    for table in tables:
        md_paths[table.name] = out / f"{table.name}.md"
        md_paths[table.name].write_text(_markdown(table, level=1) + "\n", encoding="utf-8")
        csv_paths[table.name] = out / f"{table.name}.csv"
        _write_csv(csv_paths[table.name], table)
    exp = d.experiment
    head = (f"# {exp['name']}: DeepFault report\n\nExperiment `{exp['config_hash']}`, created "
            f"{exp['created']}, {d.num_cells} cells.\n\n")
    tables_md = out / "tables.md"
    tables_md.write_text(head + "\n".join(_markdown(t) for t in tables), encoding="utf-8")

    fig_paths, used, layer_images = {}, set(), []
    for m in d.models:
        stem = f"fig3_layers_{_safe(m)}"
        while stem in used:
            stem += "_"
        used.add(stem)
        caption = _fig3(d, m, out / f"{stem}.png")
        if caption:
            fig_paths[stem] = out / f"{stem}.png"
            layer_images.append({"src": _data_uri(fig_paths[stem]), "alt": f"{stem}.png", "caption": caption})
    figures = []
    if layer_images:
        figures.append({
            "title": "Fig. 3. Suspicious neurons per layer", "images": layer_images,
            "caption": "For each model, where the suspicious neurons of the largest k lie: the number "
                       "of neurons each measure selected in each analysed layer, input side left, "
                       "summed over classes. Files: fig3_layers_<model>.png."})
    caption = _fig4(d, out / "fig4_examples.png")
    if caption:
        fig_paths["fig4_examples"] = out / "fig4_examples.png"
        figures.append({"title": "Fig. 4. Original and synthesized inputs", "caption": caption,
                        "images": [{"src": _data_uri(fig_paths["fig4_examples"]),
                                    "alt": "fig4_examples.png", "caption": ""}]})

    html = out / "report.html"
    html.write_text(_render_html(d, tables, figures), encoding="utf-8")
    return ReportPaths(out, exp["config_hash"], html, tables_md, md_paths, csv_paths, fig_paths)


#: Report writers of the other methods: ``method -> module`` with
#: ``render_report(store, experiment_hash, out_dir) -> dict(title, markdown, html, files)``.
METHOD_REPORTS = {"deepxplore": "deepfault.xplore.report", "drfuzz": "deepfault.fuzz.report"}


def _write_method(method: str, store_path: Path, experiment: dict, out: Path) -> ReportPaths:
    import importlib


    module = METHOD_REPORTS.get(method)
    if module is None:
        raise DeepFaultError(
            f"no report writer for method {method!r} (experiment {experiment['config_hash']})")
    with ResultStore(store_path, readonly=True) as store:
        section = importlib.import_module(module).render_report(store, experiment["config_hash"], out)
    md = out / "report.md"
    md.write_text(section["markdown"], encoding="utf-8")
    html = out / "report.html"
    page = render_page(section["title"], section["html"], experiment["provenance"])
    html.write_text(page, encoding="utf-8")
    files = {Path(f).stem: Path(f) for f in section.get("files", [])}
    return ReportPaths(out, experiment["config_hash"], html, md, {"report": md}, {}, files)


def render_page(title: str, body_html: str, provenance: dict | None = None) -> str:
    """A self-contained HTML page: ``body_html`` (trusted, made by deepfault) under ``title``,
    with a provenance table. Used by the method sections and by ``coverage measure --plot``."""
    import jinja2

    env = jinja2.Environment(autoescape=True)
    page = env.from_string(
        "<!doctype html><html><head><meta charset='utf-8'><title>{{ title }}</title>"
        "<style>body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
        "img{max-width:100%}pre{background:#f6f6f6;padding:1em;overflow-x:auto}</style></head>"
        "<body><h1>{{ title }}</h1>{{ body }}"
        "{% if provenance %}<h2>Provenance</h2><table>{% for k, v in provenance %}<tr><th>{{ k }}</th>"
        "<td>{{ v }}</td></tr>{% endfor %}</table>{% endif %}</body></html>")
    rows = [(k, _value(v)) for k, v in sorted((provenance or {}).items())]
    return page.render(title=title, body=jinja2.utils.markupsafe.Markup(body_html), provenance=rows)


def image_tag(path: Path, caption: str = "") -> str:
    """An ``<img>`` with the PNG inlined as a data URI, and its caption."""
    import html

    return (f"<figure><img src='{_data_uri(Path(path))}' alt='{html.escape(Path(path).name)}'>"
            f"<figcaption>{html.escape(caption)}</figcaption></figure>")


def _moved(paths: ReportPaths, tmp: Path, out: Path) -> ReportPaths:
    def move(p):
        p = Path(p)
        return out / p.relative_to(tmp) if p.is_relative_to(tmp) else p

    return ReportPaths(out, paths.config_hash, move(paths.html), move(paths.tables_md),
                       {k: move(v) for k, v in paths.tables.items()},
                       {k: move(v) for k, v in paths.csvs.items()},
                       {k: move(v) for k, v in paths.figures.items()})


def write_report(store_path, out_dir, *, config_hash: str | None = None) -> ReportPaths:
    """Write the tables, figures and ``report.html`` of one experiment of any method.

    The report is written to a temporary folder beside ``out_dir`` and renamed into place
    only when complete, so an interrupted report leaves nothing behind and a previous
    report in ``out_dir`` is replaced whole.

    Args:
        store_path: The SQLite results store.
        out_dir: Folder for the report.
        config_hash: The experiment (a unique prefix is enough); ``None``: the most recent.

    Returns:
        The paths of every file written.

    Raises:
        DeepFaultError: The store does not exist or holds no such experiment (the message
            lists the available ones), the experiment has no cells, or ``out_dir`` is a
            file or cannot be written.

    Example::

        paths = write_report("results/paper-mnist.sqlite", "results/report")
        print(paths.html)
    """
    import shutil
    import tempfile

    for module in ("matplotlib", "jinja2"):
        try:
            __import__(module)
        except ModuleNotFoundError as err:
            raise ModuleNotFoundError(
                f"'deepfault report' needs {module}; install the extra: pip install 'deepfault[report]'"
            ) from err
    store_path, out = Path(store_path), Path(out_dir)
    with ResultStore(store_path, readonly=True) as store:
        experiment = choose_experiment(store, config_hash)
    if out.exists() and not out.is_dir():
        raise DeepFaultError(f"report folder {str(out)!r} is an existing file; give a folder name")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    except OSError as err:
        raise DeepFaultError(
            f"cannot write the report to {str(out)!r}: {err.strerror or err}; choose a writable folder"
        ) from None
    try:
        tmp.chmod(0o777 & ~_umask())
        if experiment["method"] == "deepfault":
            paths = _write_deepfault(store_path, tmp, config_hash=experiment["config_hash"])
        else:
            paths = _write_method(experiment["method"], store_path, experiment, tmp)
        old = None
        if out.exists():
            old = out.with_name(f".{out.name}.old-{tmp.name}")
            out.rename(old)
        tmp.rename(out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return _moved(paths, tmp, out)


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask
