"""DeepFault's report: the paper's tables and figures from one experiment of a results store.

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

import csv
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .._deprecation import grouped
from ..experiment.report import ReportPaths, data_uri, page_environment, page_rows
from .analysis import DeepFaultAnalysis as _Data
from .analysis import load_analysis
from .figures import fig3_layers, fig4_examples, long_name, safe_name, short_name
from .selection import get_approach

__all__ = ["write_deepfault_report", "run_page", "BaselineComparison", "flip_counts", "recurring_neurons",
           "recurrence_line", "chance_recurrence", "ALPHA"]

#: Significance level of every test in the report.
ALPHA = 0.05


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
        out: list[dict] = []
        previous: list | None = None
        for i, row in enumerate(self.rows):
            head = row[: self.group]
            cells, same = [], previous is not None
            for j, text in enumerate(row):
                if j < self.group:
                    same = same and previous is not None and previous[j] == text
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


def _legend(approaches) -> str:
    return ", ".join(f"{short_name(a)}: {long_name(a)}" for a in approaches if short_name(a) != long_name(a))


def _fixed(x: float | None, digits: int = 2) -> str:
    return "–" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def _num(x: float | None) -> str:
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
    grid = _Grid(["model", "k", "metric", *[short_name(a) for a in d.approaches]], [], group=3)
    rows = []
    for m in d.models:
        for k in d.ks:
            pools = {a: p for a in d.approaches if (p := d.pool(m, k, a)) is not None}
            if not pools:
                continue
            loss = {a: _mean(p.loss) for a, p in pools.items()}
            acc = {a: _mean(p.correct) for a, p in pools.items()}
            for a, p in pools.items():
                rows.append([m, k, a, len(p.loss), loss[a], acc[a]])
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
                     short_name(a) for a in d.measures) + ")")
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
                by_a.rows.append([m, long_name(a), *[_num(_mean(v)) for v in values]])
    return _Table(
        "table4_distances", "Table 4. Distance between synthesized and original inputs",
        "Mean L1 (Manhattan), L2 (Euclidean) and L_inf (Chebyshev) distance between each "
        "synthesized input and its original, in the data set's pixel units "
        f"(bounds {d.config.get('bounds', '?')}, maximum distance d = {d.config.get('distance', '?')}). "
        "The CSV also has one row per approach and k; approach 'measures' pools the measures.",
        [by_k, by_a], ["model", "k", "approach", "inputs", "l1", "l2", "linf"], rows)


def _table5(d: _Data) -> _Table:
    cols = [short_name(a) for a in d.approaches] + (["measures"] if len(d.measures) > 1 else [])
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
        + ", ".join(short_name(a) for a in d.measures) + ". " + _legend(d.approaches) + ".",
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
                grid.rows.append([m, long_name(a), str(k), *cells])
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
        columns += [f"vs {short_name(b)} loss", f"vs {short_name(b)} accuracy"]
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
                grid.rows.append([long_name(a), m, str(k), *cells])
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
                grid.rows.append([m, long_name(a), *cells, _seconds(total_s / total_n), _seconds(spectrum)])
    return _Table(
        "table10_timing", "Table 10. Wall time",
        "Mean wall time of the synthesis per input (the cell's synthesis time divided by its "
        "inputs, pooled over classes and repetitions) per k, over every k, and the mean time "
        "of one class's spectrum analysis (shared by every approach and k of that class).",
        [grid], ["model", "approach", "k", "cells", "inputs", "synthesis_seconds",
                 "synthesis_seconds_per_input", "spectrum_seconds_per_class"], rows)


def _summary(d: _Data, tests: dict) -> _Table:
    grid = _Grid(["model", "k", "R accuracy", *[f"{short_name(a)} accuracy" for a in d.measures],
                  *[f"{short_name(a)} < R" for a in d.measures]], [], group=1)
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
                    pa = d.pool(m, k, a)
                    if c is None or pa is None:  # a test exists only where both pools do
                        accs.append("–")
                        verdicts.append("–")
                        continue
                    acc = _mean(pa.correct)
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


# --- the page ----------------------------------------------------------------------------
def _render_html(d: _Data, tables: list, figures: list) -> str:
    exp = d.experiment
    config = dict(d.config)
    accuracy = config.pop("model_accuracy", None)
    nav = [(t.name, t.title) for t in tables]
    nav += [(f"figure-{i}", f["title"]) for i, f in enumerate(figures, 1)]
    if isinstance(accuracy, dict):
        nav.insert(0, ("model_accuracy", "Model accuracy on the test set"))
    html: str = page_environment("deepfault.localization").get_template("report.html.j2").render(
        title=f"{exp['name']}: DeepFault report",
        meta=f"Experiment {exp['config_hash']}, created {exp['created']}, {d.num_cells} cells.",
        nav=nav, config=page_rows(config), provenance=page_rows(exp["provenance"]),
        accuracy=sorted(accuracy.items()) if isinstance(accuracy, dict) else [],
        tables=tables, figures=figures,
    )
    return html


def write_deepfault_report(store_path, out_dir, *, config_hash: str | None = None) -> ReportPaths:
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
    md_paths, csv_paths, tables_md = _write_tables(d, tables, out)
    fig_paths: dict[str, Path] = {}
    figures = _report_figures(d, out, fig_paths)
    html = out / "report.html"
    html.write_text(_render_html(d, tables, figures), encoding="utf-8")
    return ReportPaths(out, d.experiment["config_hash"], html, tables_md, md_paths, csv_paths, fig_paths)


def _write_tables(d, tables, out: Path) -> tuple[dict[str, Path], dict[str, Path], Path]:
    """Each table as Markdown and CSV, and all of them in ``tables.md``: ``(Markdown paths, CSV
    paths, tables.md)``.
    """
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
    return md_paths, csv_paths, tables_md


def _report_figures(d, out: Path, fig_paths: dict[str, Path]) -> list[dict]:
    """Fig. 3 (one image per model) and Fig. 4 written into ``out``, their paths added to
    ``fig_paths``; returns the page's figure blocks.
    """
    used: set[str] = set()
    layer_images = []
    for m in d.models:
        stem = f"fig3_layers_{safe_name(m)}"
        while stem in used:
            stem += "_"
        used.add(stem)
        caption = fig3_layers(d, m, out / f"{stem}.png")
        if caption:
            fig_paths[stem] = out / f"{stem}.png"
            layer_images.append({"src": data_uri(fig_paths[stem]), "alt": f"{stem}.png", "caption": caption})
    figures = []
    if layer_images:
        figures.append({
            "title": "Fig. 3. Suspicious neurons per layer", "images": layer_images,
            "caption": "For each model, where the suspicious neurons of the largest k lie: the number "
                       "of neurons each measure selected in each analysed layer, input side left, "
                       "summed over classes. Files: fig3_layers_<model>.png."})
    caption = fig4_examples(d, out / "fig4_examples.png")
    if caption:
        fig_paths["fig4_examples"] = out / "fig4_examples.png"
        figures.append({"title": "Fig. 4. Original and synthesized inputs", "caption": caption,
                        "images": [{"src": data_uri(fig_paths["fig4_examples"]),
                                    "alt": "fig4_examples.png", "caption": ""}]})
    return figures


# --- the page of one run (deepfault run --report DIR) --------------------------------------


def _nan(x) -> float:
    return float("nan") if x is None else float(x)


def _score(s: float | None) -> str:
    """A suspiciousness score in three significant figures (``inf`` for D*'s division by zero)."""
    if s is None:
        return "–"
    if not math.isfinite(s):
        return "inf" if s > 0 else "-inf"
    return f"{s:.3f}" if abs(s) < 10 else f"{s:.4g}"


def _neuron(n) -> str:
    return f"{n.layer}[{n.unit}]"


def chance_recurrence(num_neurons: int, k: int, classes: int, at_least: int) -> float:
    """How many neurons would be among the ``k`` of ``at_least`` of ``classes`` classes if each
    class drew its ``k`` of the ``num_neurons`` uniformly and independently:
    ``M * P(Binomial(C, k/M) >= m)``.
    """
    if num_neurons <= 0 or classes <= 0:
        return 0.0
    p = min(1.0, k / num_neurons)
    tail = sum(math.comb(classes, j) * p ** j * (1 - p) ** (classes - j)
               for j in range(at_least, classes + 1))
    return num_neurons * tail


def flip_counts(result) -> dict:
    """How many synthesized inputs flip the model's prediction: ``{class: (flipped, inputs)}``
    over every repetition, plus ``"all"``.

    An input flips when the model's prediction on it differs from its prediction on the
    original (the originals are correctly classified, so a flip is a misclassification).
    """
    out = {}
    for cr in result.classes:
        flipped = inputs = 0
        for rep in cr.repetitions:
            e = rep.evaluation
            flipped += int(np.count_nonzero(np.asarray(e.pred_synthesized) != np.asarray(e.pred_original)))
            inputs += e.num_inputs
        out[cr.target_class] = (flipped, inputs)
    out["all"] = (sum(f for f, _ in out.values()), sum(n for _, n in out.values()))
    return out


def recurring_neurons(result, *, min_classes: int = 2) -> list[tuple[str, int, tuple[int, ...]]]:
    """The neurons that are among the suspicious ones of ``min_classes`` or more classes:
    ``(layer, unit, classes)``, the most classes first, then by flat neuron index.

    A class counts when any repetition's selection holds the neuron by its score. Classes without
    a failing test input are left out, and so is a neuron whose score ties with one left out: both
    are the tie-breaking order alone (:func:`~.diagnosis.decided`).
    """
    from .diagnosis import decided

    where: dict[tuple[int, str, int], set] = {}
    for cr in result.classes:
        if cr.no_failures:
            continue
        for rep in cr.repetitions:
            for n in rep.selection.neurons:
                if not decided(n, rep.selection):
                    continue
                where.setdefault((n.index, n.layer, n.unit), set()).add(cr.target_class)
    rows = [(layer, unit, tuple(sorted(cs)), index) for (index, layer, unit), cs in where.items()
            if len(cs) >= min_classes]
    rows.sort(key=lambda r: (-len(r[2]), r[3]))
    return [(layer, unit, cs) for layer, unit, cs, _ in rows]


def _pooled_run(result, attr: str) -> dict:
    """``class -> concatenated per-input values`` over repetitions, plus ``"all"``."""
    out = {}
    for cr in result.classes:
        values = [getattr(rep.evaluation, attr) for rep in cr.repetitions]
        out[cr.target_class] = np.concatenate(values) if values else np.zeros(0)
    out["all"] = np.concatenate(list(out.values())) if out else np.zeros(0)
    return out


def _baseline_table(result, baseline, name) -> tuple[str, str]:
    """The approach against the random baseline per class: HTML table and a verdict line."""
    from ..experiment.report import html_table
    from ..experiment.stats import compare

    approach = long_name(result.config.approach)
    acc, loss, changed = (_pooled_run(result, a) for a in ("correct", "loss", "pred_synthesized"))
    labels = _pooled_run(result, "pred_original")
    heads = ["class", "inputs", f"{approach} accuracy", "random accuracy", f"{approach} changed",
             "random changed", f"{approach} loss", "random loss", f"{approach} < random? (p)", "A12"]
    racc: dict = {}
    rloss: dict = {}
    rchanged: dict = {}
    rlabels: dict = {}
    if baseline is not None:
        racc, rloss, rchanged = (_pooled_run(baseline, a) for a in ("correct", "loss", "pred_synthesized"))
        rlabels = _pooled_run(baseline, "pred_original")
    rows, marks, wins, tested = [], [], 0, 0
    for key in [*(cr.target_class for cr in result.classes), "all"]:
        a = acc[key].astype(float)
        row = ["all classes" if key == "all" else name(key), len(a), _fixed(_mean(a), 3)]
        mark = [""] * len(heads)
        if baseline is not None and key in racc and len(racc[key]) and len(a):
            r = racc[key].astype(float)
            c = compare(a, r, metric="correct")
            sig = c.significant(ALPHA)
            if key != "all":
                wins += sig
                tested += 1
            row += [_fixed(_mean(r), 3), _pct(_mean(changed[key] != labels[key])),
                    _pct(_mean(rchanged[key] != rlabels[key])), _fixed(_mean(loss[key]), 3),
                    _fixed(_mean(rloss[key]), 3), ("✓ " if sig else "✗ ") + f"p={_p(c.p_value)}",
                    _fixed(c.a12)]
            if sig:
                mark[8] = "sig"
        else:
            row += ["–", _pct(_mean(changed[key] != labels[key])), "–", _fixed(_mean(loss[key]), 3), "–",
                    "–", "–"]
        rows.append(row)
        marks.append(mark)
    if baseline is None:
        verdict = ""
    else:
        verdict = (f"In {wins} of {tested} classes the inputs synthesized from {approach}'s neurons have "
                   f"significantly lower accuracy than those from random neurons (one-sided Mann-Whitney U, "
                   f"p < {ALPHA}).")
    return html_table(heads, rows, classes=marks), verdict


def _cell(x, recurring: dict) -> str:
    """A neuron, ``×n`` when it is among the suspicious ones of ``n`` classes, and its score."""
    classes = recurring.get((x.layer, x.unit), ())
    return _neuron(x) + (f"\u00a0×{len(classes)}" if classes else "") + "\n" + _score(x.score)


def _answer(result, name) -> tuple[str, str, dict]:
    """The first section's verdict line and its table (each class's k neurons with their scores,
    recurring ones bold, and the flips), and the flip counts.
    """
    from ..experiment.report import html_table

    cfg = result.config
    flips = flip_counts(result)
    recurrent = recurring_neurons(result)
    recurring = {(layer, unit): cs for layer, unit, cs in recurrent}
    width = max((len(rep.selection.neurons) for cr in result.classes for rep in cr.repetitions), default=0)
    heads = ["class", "failing / test inputs", "flipped", *[f"#{i}" for i in range(1, width + 1)]]
    rows, marks = [], []
    for cr in result.classes:
        distinct: dict = {}  # a measure's repetitions share one selection (new inputs only)
        for rep in cr.repetitions:
            distinct.setdefault(tuple(x.index for x in rep.selection.neurons), rep)
        f, n = flips[cr.target_class]
        for i, rep in enumerate(distinct.values()):
            neurons = rep.selection.neurons
            label = name(cr.target_class) + (f" / rep {rep.index}" if len(distinct) > 1 else "")
            note = "\n(none failing: tie order)" if cr.no_failures else ""
            blank = [""] * (width - len(neurons))
            rows.append([label, f"{cr.spectrum.num_failed} / {cr.spectrum.num_inputs}{note}",
                         "" if i else f"{f}\u00a0of\u00a0{n}\n{_pct(f / n) if n else '–'}",
                         *[_cell(x, recurring) for x in neurons], *blank])
            marks.append(["key", "", "", *[""] * width])
    f, n = flips["all"]
    rows.append(["all classes", "", f"{f}\u00a0of\u00a0{n}\n{_pct(f / n) if n else '–'}", *[""] * width])
    marks.append(["key", *[""] * (width + 2)])
    approach = long_name(cfg.approach)
    which = "neurons drawn by" if get_approach(cfg.approach).baseline else "most suspicious neurons of"
    verdict = f"The {cfg.k} {which} {approach} in each of {len(result.classes)} classes"
    recurrence = _recurrence_verdict(result, recurrent)
    verdict += ". " + recurrence[0].upper() + recurrence[1:]
    verdict += (f". {f} of {n} synthesized inputs ({_pct(f / n) if n else '–'}) flip the model's "
                "prediction.")
    return verdict, html_table(heads, rows, classes=marks), flips


def _chance(result) -> dict | None:
    """The chance model behind the recurrence counts (each considered class drawing its ``k``
    neurons uniformly), or ``None`` where a class has several selections (a baseline repeated).
    """
    considered = [cr for cr in result.classes if not cr.no_failures]

    def selections(cr) -> int:
        return len({tuple(x.index for x in rep.selection.neurons) for rep in cr.repetitions})

    if len(considered) < 2 or any(selections(cr) != 1 for cr in considered):
        return None
    k = len(considered[0].repetitions[0].selection.neurons)
    m = considered[0].spectrum.layout.num_neurons
    return {"k": k, "neurons": m, "classes": len(considered),
            "expected": lambda at_least: chance_recurrence(m, k, len(considered), at_least)}


def recurrence_line(result) -> str | None:
    """The cross-class recurrence in words, as the page's verdict gives it: how many neurons are
    among the suspicious ones of two or more classes, beside what chance alone would give;
    ``None`` where fewer than two classes have a failing input (nothing can recur).

    Args:
        result: The run's :class:`~deepfault.localization.protocol.RunResult`.
    """
    if sum(1 for cr in result.classes if not cr.no_failures) < 2:
        return None
    return _recurrence_verdict(result, recurring_neurons(result))


def _recurrence_verdict(result, recurring: list) -> str:
    """The recurrence in words, beside what chance alone would give."""
    if not recurring:
        return "no neuron recurs in another class"
    chance = _chance(result)
    top = len(recurring[0][2])
    n2 = len(recurring)
    text = f"{n2} neuron{'s recur' if n2 > 1 else ' recurs'} in two or more classes"
    if chance is not None:
        text += f" (chance alone: about {chance['expected'](2):.2g})"
    if top > 2:
        best = [f"{layer}[{unit}]" for layer, unit, cs in recurring if len(cs) == top]
        names = ", ".join(best[:5]) + (f" and {len(best) - 5} more" if len(best) > 5 else "")
        text += f", {len(best)} in {top} classes ({names}"
        if chance is not None:
            text += f"; chance alone: {chance['expected'](top):.2g} in {top} or more"
        text += ")"
    return text


def _recurrence_table(result, name) -> str:
    from ..experiment.report import html_table

    ranks: dict[tuple[str, int, int], int] = {}
    for cr in result.classes:
        for rep in cr.repetitions:
            for i, x in enumerate(rep.selection.neurons, 1):
                ranks.setdefault((x.layer, x.unit, cr.target_class), i)
    considered = sum(not cr.no_failures for cr in result.classes)
    rows = [[f"{layer}[{unit}]", f"{len(cs)} of {considered}",
             ", ".join(f"{name(c)} (#{ranks[(layer, unit, c)]})" for c in cs)]
            for layer, unit, cs in recurring_neurons(result)]
    return html_table(["neuron", "classes", "which (its rank there)"], rows,
                      classes=[["key", "", "key"] for _ in rows])


@dataclass(frozen=True)
class BaselineComparison:
    """The random baseline a run's page compares with, and what each took.

    Attributes:
        baseline: The same run with ``approach="random"`` (``None``: none to compare with).
        run_seconds: The run's wall time (shown beside the baseline's).
        baseline_seconds: The baseline run's wall time, what the comparison cost.
        no_baseline: Why there is no baseline, when ``baseline`` is ``None`` (shown instead of
            the table; empty: the run's approach is a baseline itself).
    """

    baseline: object = None
    run_seconds: float | None = None
    baseline_seconds: float | None = None
    no_baseline: str = ""


def run_page(result, data, folder, *, model_name: str, comparison: BaselineComparison | None = None,
             provenance: dict | None = None, grid_rows: int = 12, **old) -> dict:
    """The page of one ``deepfault run``, the answer first: each class's suspicious neurons with
    their scores, the neurons that recur across classes and how many synthesized inputs flip the
    prediction; then the synthesized inputs, the comparison with the random baseline and the
    distances.

    Args:
        result: The run's :class:`~deepfault.localization.protocol.RunResult`.
        data: Its :class:`~deepfault.data.Dataset`.
        folder: Where the PNGs go (the report folder being written).
        model_name: How the page names the model.
        comparison: The random baseline and the times (:class:`BaselineComparison`; ``None``:
            no baseline, and no reason given).
        provenance: Where the run came from.
        grid_rows: Inputs in the image grid.
        **old: ``comparison``'s fields one by one (``baseline=``, ``run_seconds=``,
            ``baseline_seconds=``, ``no_baseline=``): deprecated.

    Returns:
        ``dict(title, html, meta, nav, config, provenance)`` for
        :func:`~deepfault.experiment.report.write_page`.
    """
    compared = grouped("run_page", "comparison", BaselineComparison, comparison, old)
    cfg = result.config
    approach = long_name(cfg.approach)

    def name(c):
        return str(c) if data.class_names[c] == str(c) else f"{c} ({data.class_names[c]})"

    verdict, table, flips = _answer(result, name)
    found = [_neurons_section(result, verdict, table), _recurring_section(result, name),
             _inputs_section(result, data, Path(folder), grid_rows, flips),
             _baseline_section(result, compared, name), _distances_section(result, name)]
    sections = [x for x in found if x is not None]
    run_seconds = compared.run_seconds
    return {"title": f"DeepFault: {approach} on {model_name}",
            "meta": f"{data.name}, {flips['all'][1]} synthesized inputs, "
                    f"k = {cfg.k}, step {cfg.step:g}, distance {cfg.distance:g}, "
                    f"test accuracy {result.test_accuracy:.1%}"
                    + (f", run in {run_seconds:.1f} s" if run_seconds is not None else "") + ".",
            "html": "\n".join(html for _, html in sections), "nav": [nav for nav, _ in sections],
            "config": cfg.to_dict(), "provenance": provenance}


def _neurons_section(result, verdict: str, table: str) -> tuple[tuple[str, str], str]:
    import html as _html

    from ..experiment.report import section

    cfg = result.config
    from .diagnosis import degenerate_lines

    title = "The most suspicious neurons"
    warnings = [f"<p class='verdict'>{_html.escape(line[0].upper() + line[1:])}.</p>"
                for line in degenerate_lines(result)]
    return ("neurons", title), section(
        "neurons", title,
        f"Per class, the {cfg.k} neurons {long_name(cfg.approach)} finds most suspicious, most suspicious "
        "first (#1), each with its score; ×n: the neuron is among the suspicious ones of n classes. "
        "Failing / test inputs: the class's test inputs the model gets wrong, and all of them (the "
        "spectrum). Flipped: the synthesized inputs (from correctly classified originals) on which the "
        "prediction changes.",
        *warnings, f"<p class='verdict'>{_html.escape(verdict)}</p>", table)


def _recurring_section(result, name) -> tuple[tuple[str, str], str]:
    import html as _html

    from ..experiment.report import section

    recurring = recurring_neurons(result)
    chance = _chance(result)
    chance_text = "" if chance is None else (
        f"Chance alone, each of the {chance['classes']} classes drawing its {chance['k']} of the "
        f"{chance['neurons']} neurons uniformly, would make about {chance['expected'](2):.2g} neurons "
        f"recur in two or more classes and {chance['expected'](3):.2g} in three or more: recurrence means "
        "something only above that.")
    title = "Neurons suspicious in several classes"
    return ("recurring", title), section(
        "recurring", title,
        "The neurons among the suspicious ones of two or more classes, the most classes first, with "
        "their rank in each: a neuron that many classes' failures share is a candidate for a defect of "
        "the model rather than of one class. Classes without a failing test input are left out.",
        *([f"<p class='note'>{_html.escape(chance_text)}</p>"] if chance_text else []),
        _recurrence_table(result, name) if recurring
        else "<p class='note'>None: each class has suspicious neurons of its own.</p>")


def _inputs_section(result, data, folder: Path, grid_rows: int,
                    flips) -> tuple[tuple[str, str], str] | None:
    from ..experiment.figures import GridCaptions, changed_first, difference_grid
    from ..experiment.report import image_tag, section
    from .outputs import _collect

    arrays = _collect(result, data)
    changed = arrays["pred_synthesized"] != arrays["pred_original"]
    # changed predictions first, one per class in turn, so the grid spans the classes
    turn = np.zeros(len(changed))
    for c in np.unique(arrays["target_class"]):
        mine = arrays["target_class"] == c
        turn[mine] = np.cumsum(changed[mine]) - 1
    rows = changed_first(changed, limit=grid_rows, key=-turn)
    captions = GridCaptions(
        before=[f"test #{int(arrays['test_index'][i])}\nlabel {data.class_names[int(arrays['labels'][i])]}"
                for i in rows],
        after=[f"synthesized\npredicted {data.class_names[int(arrays['pred_synthesized'][i])]}"
               for i in rows],
        highlight=changed[rows], labels=("original", "synthesized"))
    png = difference_grid(arrays["originals"][rows], arrays["synthesized"][rows], folder / "synthesized.png",
                          bounds=data.bounds, columns=2, captions=captions)
    if png is None:
        return None
    f, n = flips["all"]
    return ("inputs", "Synthesized inputs"), section(
        "inputs", "Synthesized inputs",
        f"{f} of {n} synthesized inputs flip the model's prediction; they come first (one class after "
        "another), red titles. Each triple: the original, the synthesized input (grey scale: the data's "
        "range, the grey colour bar) and their difference (blue: darker, red: brighter; the blue-to-red "
        "colour bar, one scale for every row).",
        image_tag(png, "synthesized.png"))


def _baseline_section(result, compared: BaselineComparison, name) -> tuple[tuple[str, str], str]:
    import html as _html

    from ..experiment.report import section

    cfg = result.config
    baseline, no_baseline = compared.baseline, compared.no_baseline
    run_seconds, baseline_seconds = compared.run_seconds, compared.baseline_seconds
    table, verdict = _baseline_table(result, baseline, name)
    if baseline is None:
        why = no_baseline or (f"{long_name(cfg.approach)} is a baseline itself, so the run has no other "
                              "baseline to be compared with.")
        body = [f"<p class='note'>{_html.escape(why)}</p>", table]
    else:
        body = [f"<p class='verdict'>{_html.escape(verdict)}</p>", table]
        if baseline_seconds is not None:
            cost = (f"The baseline cost {baseline_seconds:.1f} s" + (
                f", beside the run's {run_seconds:.1f} s" if run_seconds is not None else "")
                + ": it repeats the run from random neurons ('deepfault run --no-baseline' skips it).")
            body.append(f"<p class='note'>{_html.escape(cost)}</p>")
    title = "Against the random baseline"
    return ("baseline", title), section(
        "baseline", title,
        "Accuracy of the model on the synthesized inputs (labels: the originals'), the share whose "
        "prediction changed, and the mean loss, for the run's approach and for the same run with "
        f"{cfg.k} random neurons per class (the paper's baseline, same inputs and seed). An accuracy "
        "means something only beside random's: synthesis changes any input, suspicious neurons or not. "
        "✓: the approach's accuracy is significantly lower; A12 below 0.5 means lower accuracy.", *body)


def _distances_section(result, name) -> tuple[tuple[str, str], str]:
    from ..experiment.report import html_table, section

    cfg = result.config
    dist_rows = []
    for cr in result.classes:
        for rep in cr.repetitions:
            s = rep.evaluation.summary()
            dist_rows.append([name(cr.target_class) + (f" / {rep.index}" if cfg.repeat > 1 else ""),
                              s["inputs"], _num(_nan(s["l1"])), _num(_nan(s["l2"])),
                              _num(_nan(s["linf"])), _pct(_nan(s["increased"]))])
    return ("distances", "Distances"), section(
        "distances", "Distances",
        "Per class: the mean L1, L2 and L_inf distance of the synthesized inputs to their originals and "
        f"the share of the {cfg.k} selected neurons whose value increased.",
        html_table(["class", "inputs", "L1", "L2", "L_inf", "increased"], dist_rows))
