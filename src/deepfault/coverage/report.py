"""The coverage pages: what ``coverage measure --report DIR`` (and ``--plot``) and
``coverage rank --report DIR`` show.

A measurement: one row per criterion and setting (covered, total, ratio), one table per
criterion with a row per layer (the same :func:`layer_tables` ``coverage measure`` prints),
the surprise coverages with their bound (:func:`surprise_table`), and the curves the
measurement recorded (coverage against the number of inputs, against the threshold, per
layer, the surprise scores). A prioritisation (:func:`rank_page`): which prioritiser found
the misclassified inputs earliest and the first inputs to look at, the ranking curves, and
the score distributions. jinja2 and matplotlib are imported inside the functions that need
them.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

from ..experiment.tables import Table
from .text import layer_tables, never_activated_line, surprise_table

__all__ = ["measure_page", "rank_page", "CAPTIONS", "RANK_CAPTIONS", "CRITERION_LINES", "criterion_line",
           "layer_tables", "never_activated_line", "never_activated_table", "rank_table",
           "surprise_table", "write_plot_folder", "PLOT_FILES"]

#: What each figure of :func:`~deepfault.coverage.figures.save_figures` shows, by file-name part.
CAPTIONS = {
    "growth": "Coverage against the number of inputs (log scale): how fast the inputs reach what they "
              "cover in the end; a curve still rising at the right says more inputs would cover more. "
              "TKNP counts patterns, on the right axis.",
    "threshold": "Coverage against the activation threshold t (DeepXplore's Figure 9 style): a higher t "
                 "asks more of a neuron, so coverage falls.",
    "layers": "Coverage of each layer under each criterion: where the inputs leave neurons unexercised.",
    "surprise": "The surprise adequacy of every input, one panel per score, with the range [0, U) that its "
                "surprise coverage splits into equal buckets shaded: scores below 0 or at or above U cover "
                "no "
                "bucket.",
}

#: What each figure of :func:`~deepfault.coverage.figures.save_rank_figures` shows.
RANK_CAPTIONS = {
    "curves": "The share of the misclassified inputs found (y) after inspecting a share of the inputs (x) in "
              "each prioritiser's order; higher and further left is better, and APFD is the area under the "
              "curve. The grey diagonal is what a random order gets on average, the dotted line the ideal "
              "order (every misclassified input first). Right: the first 10% of the inputs, where a tester's "
              "budget usually ends. The legend lists the prioritisers by APFD, best first.",
    "scores": "Each score's distribution over the correctly classified (blue) and the misclassified (red) "
              "inputs, each normalised to its own count. The title says which end is looked at first; the "
              "less the two overlap, the earlier that score's order finds the misclassified inputs.",
}


#: One line per criterion: what it counts (the page lists those it measured).
CRITERION_LINES = {
    "nc": "neuron coverage (DeepXplore): the share of neurons that some input drives above the threshold t.",
    "nac": "neuron activation coverage (DeepGauge): the same count as nc, on raw values; at the same t the "
           "two numbers are equal.",
    "kmnc": "k-multisection coverage: each neuron's training range [low, high] cut into k equal sections; "
            "the share of sections some input's value falls in.",
    "nbc": "neuron boundary coverage: the share of corners (below low - s*std, above high + s*std of the "
           "training values, two per neuron) that some input reaches.",
    "snac": "strong neuron activation coverage: nbc's upper corners only (above high + s*std).",
    "tknc": "top-k neuron coverage: the share of neurons that are among their layer's k largest for some "
            "input.",
    "tknp": "top-k patterns: how many distinct tuples of per-layer top-k sets the inputs produce (a count, "
            "no total).",
    "lsc": "likelihood-based surprise coverage (Kim et al.): the share of K equal buckets of [0, U) that the "
           "inputs' LSA falls in.",
    "dsc": "distance-based surprise coverage: the same for DSA.",
    "mdsc": "Mahalanobis-distance surprise coverage: the same for MDSA.",
}

#: Indices of never-activated units listed per layer on the page (the JSON result has them all).
DEAD_SHOWN = 24


def criterion_line(name: str) -> str:
    """What ``name`` counts, in one line (for a criterion registered later: its docstring's first
    line).
    """
    if name in CRITERION_LINES:
        return CRITERION_LINES[name]
    from .criteria import CRITERIA

    doc = (CRITERIA.get(name).__doc__ or "").strip() if name in CRITERIA else ""
    return doc.splitlines()[0] if doc else ""


def never_activated_table(report, *, shown: int = DEAD_SHOWN) -> Table | None:
    """The never-activated neurons per layer: units, how many never went above 0 and which
    (the first ``shown`` indices, then how many more); ``None`` without neuron values.
    """
    dead = report.never_activated()
    if dead is None:
        return None
    rows = []
    for la in report.layout.layers:
        units = dead[la.name]
        listed = ", ".join(map(str, units[:shown]))
        if len(units) > shown:
            listed += f" and {len(units) - shown} more"
        share = f"{len(units)} ({100 * len(units) / la.size:.1f}%)" if la.size else "0"
        rows.append((la.name, la.size, share, listed or "-"))
    total = sum(len(u) for u in dead.values())
    rows.append(("all", report.layout.num_neurons,
                 f"{total} ({100 * total / report.layout.num_neurons:.1f}%)" if report.layout.num_neurons
                 else "0", ""))
    return Table(("layer", "units", "never activated", "which units"), rows,
                 title="never-activated neurons (no input gave a value above 0)")


def _dead_verdict(report) -> str:
    dead = report.never_activated()
    if dead is None:
        return ""
    total = sum(len(u) for u in dead.values())
    n = report.layout.num_neurons
    if not total:
        return f"Every one of the {n:,} neurons is activated (value above 0) by some input."
    where = ", ".join(f"{name} ({len(u)})" for name, u in dead.items() if u)
    return (f"{total:,} of the {n:,} neurons ({100 * total / n:.1f}%) are never activated by these "
            f"{report.num_inputs:,} inputs: {where}.")


def _ratio(covered: int, total: int | None) -> str:
    if total is None:
        return "–"
    return f"{100 * covered / total:.1f}%" if total else "–"


def measure_page(report, folder, *, model_name: str, data_name: str, device: str = "",
                 provenance: dict | None = None, config: dict | None = None) -> dict:
    """The page of one coverage measurement.

    Args:
        report: The :class:`~deepfault.coverage.measure.CoverageReport`.
        folder: Where the PNGs go.
        model_name: How the page names the model.
        data_name: The inputs measured (data set and split).
        device: Where it ran.
        provenance: Where it came from.
        config: The options it ran with.

    Returns:
        ``dict(title, html, meta, nav, config, provenance, figures)`` for
        :func:`~deepfault.experiment.report.write_page` (``figures``: the PNGs written).
    """
    from .figures import save_figures

    parts, nav = _measure_sections(report)
    figures = save_figures(report, Path(folder))
    titles = {"growth": "Coverage against the number of inputs",
              "threshold": "Coverage against the threshold", "layers": "Coverage of each layer",
              "surprise": "Surprise adequacy of the inputs"}
    # the growth curve first: the question most readers bring
    _figure_sections(figures, CAPTIONS, titles, lambda p, key: key in p.stem, parts, nav)
    meta = (f"{model_name} on {data_name}: {report.num_inputs:,} inputs, {len(report.layout.layers)} layers, "
            f"{report.layout.num_neurons:,} neurons, transform {report.transform}"
            + (f", {device}" if device else "") + f"; measured in {report.seconds:.2f} s.")
    return {"title": f"Coverage of {model_name}", "meta": meta, "html": "\n".join(parts), "nav": nav,
            "config": config, "provenance": provenance, "figures": figures}


def _measure_sections(report) -> tuple[list[str], list[tuple[str, str]]]:
    """The measurement page's tables, as ``(sections, nav)``: the coverage per criterion, the
    never-activated neurons, the coverage per layer and the surprise coverage (each one that
    the report has).
    """
    from ..experiment.report import section

    rows = [[r.label, f"{r.covered:,}", "–" if r.total is None else f"{r.total:,}",
             _ratio(r.covered, r.total)] for r in report.results]
    names = list(dict.fromkeys(r.criterion for r in report.results))
    lines = "".join(f"<li><b>{html.escape(n)}</b>: {html.escape(criterion_line(n))}</li>" for n in names)
    verdict = _dead_verdict(report)
    parts = [section(
        "summary", "Coverage per criterion",
        f"What the {report.num_inputs:,} inputs cover under each criterion and setting: items covered, items "
        "in all (neurons for NC, sections for KMNC, ...) and their ratio. TKNP counts distinct top-k "
        "patterns and has no total.",
        *([f"<p class='verdict'>{html.escape(verdict)}</p>"] if verdict else []),
        Table(["criterion", "covered", "total", "ratio"], rows).html(),
        f"<ul class='criteria'>{lines}</ul>")]
    nav = [("summary", "Coverage per criterion")]
    dead = never_activated_table(report)
    if dead is not None:
        parts.append(section(
            "never-activated", "Never-activated neurons",
            f"The neurons that none of the {report.num_inputs:,} inputs drove above 0 ({report.transform} "
            "values): NC's uncovered neurons at t = 0, whatever thresholds were measured. A dead unit is a "
            "candidate for pruning, or a sign that the inputs miss what it detects. The page lists the first "
            f"{DEAD_SHOWN} units of a layer; the JSON result (--out) has them all under never_activated.",
            dead.html([["key", "", "", "key"]] * len(dead.rows))))
        nav.append(("never-activated", "Never-activated neurons"))
    tables = layer_tables(report)
    if tables:  # none with surprise coverage alone
        parts.append(section(
            "layers", "Coverage per layer",
            "Each analysed layer's units and its coverage under each criterion, one table per criterion "
            "(covered/total and the ratio; the last row: every layer); a table scrolls sideways when there "
            "are many settings.",
            *[f"<h3>{html.escape(t.title)}</h3>{t.html()}" for t in tables]))
        nav.append(("layers", "Coverage per layer"))
    sa = surprise_table(report)
    if sa is not None:
        parts.append(_surprise_section(report, sa))
        nav.append(("surprise", "Surprise coverage"))
    return parts, nav


def _figure_sections(figures, captions: dict, titles: dict, matches, parts: list, nav: list) -> None:
    """A section per figure written, in the order of ``captions`` (``matches(path, key)``)."""
    from ..experiment.report import image_tag, section

    for key, caption in captions.items():
        path = next((p for p in figures if matches(p, key)), None)
        if path is None:
            continue
        nav.append((f"figure-{key}", titles[key]))
        parts.append(section(f"figure-{key}", titles[key], caption, image_tag(path, path.name)))


def _surprise_section(report, sa: Table) -> str:
    from ..experiment.report import section

    state = report.surprise["state"]
    layers = ", ".join(f"{la['name']} ({la['size']})" for la in state["layers"])
    return section(
            "surprise", "Surprise coverage",
            "Kim et al.'s surprise coverage: the share of K equal buckets of [0, U) that the inputs' "
            "surprise "
            "adequacies fall in (LSC: likelihood, DSC: distance, MDSC: Mahalanobis distance), with the state "
            f"fitted on {state['count']:,} training inputs, layers {layers}, {state['transform']}, grouped "
            "by "
            f"{state['grouping']}. When U is the largest score of these inputs the coverage says how they "
            "spread over their own range and is not comparable with another input set's; a given U is.",
            sa.html())


def _f3(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def rank_table(report, *, head: float = 0.1, first: int = 8) -> tuple[Table, list[list[str]]]:
    """The prioritisers by APFD, best first: APFD, the share of the misclassified inputs in the
    first ``head`` of the order, how many of its ``first`` inputs are misclassified, its time
    and its first inputs; and the cells' CSS classes (the best row bold).
    """
    n, k = report.num_inputs, report.num_failing
    cut = max(1, math.ceil(head * n))
    ranked = sorted(report.rankings, key=lambda r: -(r.apfd if r.apfd is not None else -1.0))
    best = report.best()
    rows, classes = [], []
    for r in ranked:
        top = r.order[:first]
        rows.append((r.name, _f3(r.apfd), f"{100 * r.found(report.failing)[cut - 1]:.1f}%" if k else "-",
                     f"{int(report.failing[top].sum())} of {len(top)}", f"{r.seconds:.4f}",
                     " ".join(map(str, top.tolist()))))
        classes.append(["best" if best is not None and r is best else ""] * 6)
    return Table(("prioritiser", "APFD", f"found in the first {cut:,} ({head:.0%})",
                  f"misclassified among its first {first}", "seconds", "its first inputs"), rows), classes


def _first_inputs(report, ranking, count: int = 12) -> str:
    """The first inputs of one ranking, one column each: index, label, prediction, score (the
    misclassified ones marked).
    """
    top = ranking.order[:count].tolist()
    heads = ["", *[f"{i + 1}." for i in range(len(top))]]
    rows = [("input", *top)]
    if report.labels is not None:
        rows.append(("label", *[int(report.labels[i]) for i in top]))
    if report.predictions is not None:
        rows.append(("predicted", *[int(report.predictions[i]) for i in top]))
    rows.append(("misclassified", *["yes" if report.failing[i] else "no" for i in top]))
    if ranking.scores is not None:
        rows.append((ranking.prioritiser, *[f"{ranking.scores[i]:.4g}" for i in top]))
    classes = [["" if row[0] != "misclassified" or cell != "yes" else "sig" for cell in row] for row in rows]
    return Table(heads, rows).html(classes)


def rank_page(report, folder, *, model_name: str, data_name: str, device: str = "",
              provenance: dict | None = None, config: dict | None = None, notes: str = "") -> dict:
    """The page of one prioritisation (``coverage rank --report DIR``): first the answer (which
    prioritiser found the misclassified inputs earliest, and the first inputs to look at),
    then the ranking curves and the score distributions.

    Args:
        report: The :class:`~deepfault.coverage.results.RankReport`.
        folder: Where the PNGs go.
        model_name: How the page names the model.
        data_name: The inputs ranked (data set and split).
        device: Where it ran.
        provenance: Where it came from.
        config: The options it ran with.
        notes: A line under the answer (for example that a surprise state was fitted first).

    Returns:
        ``dict(title, html, meta, nav, config, provenance, figures)`` for
        :func:`~deepfault.experiment.report.write_page`.
    """
    from ..experiment.report import section
    from .figures import save_rank_figures

    folder = Path(folder)
    n, k = report.num_inputs, report.num_failing
    best = report.best()
    verdict = _rank_verdict(report)
    table, classes = rank_table(report)
    parts = [section(
        "answer", "Which prioritiser finds the misclassified inputs earliest",
        f"APFD of each order (1 - mean position of the misclassified inputs / N + 1/(2N)): the higher, the "
        f"earlier the {k:,} misclassified inputs among the {n:,} come. Seconds: the prioritiser's own time "
        "beyond "
        "the forward pass all share.",
        f"<p class='verdict'>{html.escape(verdict)}</p>", table.html(classes))]
    nav = [("answer", "Which prioritiser finds the misclassified inputs earliest")]
    if best is not None:
        parts.append(section(
            "first", f"The first inputs to look at ({best.name}'s order)",
            "Input indices into the ranked set, with their label, the model's prediction and the score.",
            _first_inputs(report, best)))
        nav.append(("first", "The first inputs to look at"))
    if notes:
        parts.append(f"<p class='note'>{html.escape(notes)}</p>")
    figures = save_rank_figures(report, folder)
    titles = {"curves": "Ranking curves", "scores": "Score distributions: misclassified against correct"}
    _figure_sections(figures, RANK_CAPTIONS, titles, lambda p, key: p.stem.endswith(key), parts, nav)
    if any(r.prioritiser == "cam" for r in report.rankings):
        parts.append(_coverage_orders(report))
        nav.append(("coverage", "Coverage orders"))
    meta = (f"{model_name} on {data_name}: {n:,} inputs, {k:,} misclassified"
            + (f" ({100 * k / n:.1f}%)" if n else "") + (f", {device}" if device else "")
            + f"; ranked in {report.seconds:.2f} s, of which the shared forward pass "
              f"{report.forward_seconds:.2f} s.")
    return {"title": f"Which inputs to look at first: {model_name}", "meta": meta, "html": "\n".join(parts),
            "nav": nav, "config": config, "provenance": provenance, "figures": figures}


def _rank_verdict(report) -> str:
    n, k = report.num_inputs, report.num_failing
    best = report.best()
    cut = max(1, math.ceil(0.1 * n))
    if best is None:
        verdict = (f"The model classifies all {n:,} inputs correctly, so no order finds a misclassified "
                   "input "
                   "earlier than another (APFD is undefined).")
    else:
        assert best.apfd is not None
        verdict = (f"{best.name} found the {k:,} misclassified inputs earliest: APFD {best.apfd:.3f} (a "
                   "random "
                   f"order 0.5 on average, the ideal one {1 - k / (2 * n):.3f}); the first {cut:,} inputs "
                   "of its "
                   f"order ({cut / n:.0%}) hold {100 * best.found(report.failing)[cut - 1]:.0f}% of the "
                   "misclassified ones.")
    return verdict


def _coverage_orders(report) -> str:
    from ..experiment.report import section

    rows = [(r.criterion, "-" if r.covered is None else f"{r.covered:,}",
             "-" if r.total is None else f"{r.total:,}", r.greedy, _f3(r.apfd), _f3(r.apfd_total))
            for r in report.rankings if r.prioritiser == "cam"]
    return section(
        "coverage", "Coverage orders",
        "Per coverage criterion: the items the whole set covers, how many inputs cam picks before they "
        "cover "
        "it all (then the rest by their own coverage), and the APFD of cam and of ctm (most covered "
        "items "
        "first).", Table(("criterion", "covered", "total", "cam's greedy inputs", "APFD cam", "APFD ctm"),
                         rows).html())


#: The files :func:`write_plot_folder` may write into its folder: the page and each figure of
#: :func:`~.figures.save_figures` (``coverage measure --plot DIR``).
PLOT_FILES = ("report.html", "coverage_threshold.png", "coverage_layers.png", "coverage_growth.png",
              "coverage_surprise.png")


def write_plot_folder(folder, render) -> list[Path]:
    """``coverage measure --plot DIR``: the page ``render(folder)`` (:func:`measure_page`) and its
    figures written straight into ``folder`` (``--report DIR`` is the write-whole-or-nothing
    form); returns the paths written, the page last.
    """
    from ..experiment.report import render_page

    shown = render(folder)
    path = Path(folder) / "report.html"
    path.write_text(render_page(shown["title"], shown["html"], shown["provenance"], config=shown["config"],
                                meta=shown["meta"], nav=shown["nav"]), encoding="utf-8")
    return [*shown["figures"], path]
