"""The coverage section of a report page: what ``coverage measure --report DIR`` (and ``--plot``) shows.

One row per criterion and setting (covered, total, ratio), one table per criterion with a row
per layer (the same :func:`layer_tables` ``coverage measure`` prints), and the curves the
measurement recorded (coverage against the number of inputs, against the threshold, per
layer). jinja2 and matplotlib are imported inside the functions that need them.
"""

from __future__ import annotations

import html
from pathlib import Path

from ..experiment.tables import Table

__all__ = ["measure_page", "CAPTIONS", "layer_tables"]

#: What each figure of :func:`~deepfault.coverage.figures.save_figures` shows, by file-name part.
CAPTIONS = {
    "growth": "Coverage against the number of inputs (log scale): how fast the inputs reach what they "
              "cover in the end; a curve still rising at the right says more inputs would cover more. "
              "TKNP counts patterns, on the right axis.",
    "threshold": "Coverage against the activation threshold t (DeepXplore's Figure 9 style): a higher t "
                 "asks more of a neuron, so coverage falls.",
    "layers": "Coverage of each layer under each criterion: where the inputs leave neurons unexercised.",
}


def _ratio(covered: int, total: int | None) -> str:
    if total is None:
        return "–"
    return f"{100 * covered / total:.1f}%" if total else "–"


def _cell(covered: int, total: int | None) -> str:
    if total is None:
        return str(covered)
    return f"{covered}/{total} {100 * covered / total:.1f}%" if total else "0/0"


def layer_tables(report) -> list[Table]:
    """One table per criterion: a row per layer and the total, a column per parameter setting
    (what ``coverage measure`` prints and its page shows).
    """
    groups: dict[str, list] = {}
    for r in report.results:
        groups.setdefault(r.criterion, []).append(r)
    tables = []
    for name, results in groups.items():
        heads = [", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.params.items())
                 or name for r in results]
        unit = "distinct top-k sets per layer; total: patterns" if name == "tknp" else "covered/items"
        rows = [(la.name, la.size, *[_cell(*r.per_layer[la.name]) for r in results])
                for la in report.layout.layers]
        rows.append(("all", report.layout.num_neurons, *[_cell(r.covered, r.total) for r in results]))
        tables.append(Table(("layer", "units", *heads), rows, title=f"{name} ({unit})"))
    return tables


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
    from ..experiment.report import image_tag, section
    from .figures import save_figures

    folder = Path(folder)
    rows = [[r.label, f"{r.covered:,}", "–" if r.total is None else f"{r.total:,}",
             _ratio(r.covered, r.total)] for r in report.results]
    parts = [section(
        "summary", "Coverage per criterion",
        f"What the {report.num_inputs:,} inputs cover under each criterion and setting: items covered, items "
        "in all (neurons for NC, sections for KMNC, ...) and their ratio. TKNP counts distinct top-k "
        "patterns and has no total.",
        Table(["criterion", "covered", "total", "ratio"], rows).html())]
    parts.append(section(
        "layers", "Coverage per layer",
        "Each analysed layer's units and its coverage under each criterion, one table per criterion "
        "(covered/total and the ratio; the last row: every layer); a table scrolls sideways when there are "
        "many settings.",
        *[f"<h3>{html.escape(t.title)}</h3>{t.html()}" for t in layer_tables(report)]))
    nav = [("summary", "Coverage per criterion"), ("layers", "Coverage per layer")]
    figures = save_figures(report, folder)
    titles = {"growth": "Coverage against the number of inputs",
              "threshold": "Coverage against the threshold", "layers": "Coverage of each layer"}
    for key in CAPTIONS:  # the growth curve first: the question most readers bring
        path = next((p for p in figures if key in p.stem), None)
        if path is None:
            continue
        nav.append((f"figure-{key}", titles[key]))
        parts.append(section(f"figure-{key}", titles[key], CAPTIONS[key], image_tag(path, path.name)))
    meta = (f"{model_name} on {data_name}: {report.num_inputs:,} inputs, {len(report.layout.layers)} layers, "
            f"{report.layout.num_neurons:,} neurons, transform {report.transform}"
            + (f", {device}" if device else "") + f"; measured in {report.seconds:.2f} s.")
    return {"title": f"Coverage of {model_name}", "meta": meta, "html": "\n".join(parts), "nav": nav,
            "config": config, "provenance": provenance, "figures": figures}
