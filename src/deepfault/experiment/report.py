"""One report system for every method: the page shell, the figure style and ``write_report``.

A method's package writes its own section (its tables and figures) and registers how
(:attr:`deepfault.experiment.method.Method.report`); this module owns what every report
shares: the self-contained HTML page, inlined PNGs, the matplotlib figure defaults, and
writing the report folder whole or not at all. matplotlib and jinja2 are imported inside
the functions that need them.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import DeepFaultError
from .method import get_method
from .store import ResultStore, choose_experiment

__all__ = ["ReportPaths", "write_report", "write_section", "render_page", "image_tag", "new_figure",
           "save_figure", "data_uri", "value_text", "tex_safe"]


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


def value_text(v) -> str:
    """A configuration or provenance value as text (JSON for anything but a string)."""
    return v if isinstance(v, str) else json.dumps(v, sort_keys=True)


def data_uri(path: Path) -> str:
    """A PNG file as a ``data:`` URI, so the page is one self-contained file."""
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


def tex_safe(text: str) -> str:
    """``text`` for a matplotlib label (a ``$`` would switch it to mathtext)."""
    return str(text).replace("$", r"\$")


def new_figure(width: float, height: float, layout: str | None = None):
    """A matplotlib figure in the report's style, drawn off-screen (no pyplot state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout=layout)
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig, path: Path) -> None:
    """Save ``fig`` as a PNG with no timestamp, so reruns write identical files."""
    fig.savefig(path, format="png", dpi=100, bbox_inches="tight", metadata={"Software": None})


def write_section(render: Callable, store_path: Path, experiment: dict, out: Path) -> ReportPaths:
    """Write a method's report from its section renderer.

    ``render(store, experiment_hash, out_dir)`` returns a dict with ``title``, ``markdown``,
    ``html`` (trusted, made by deepfault) and ``files``; this writes ``report.md`` and a
    ``report.html`` page around it.
    """
    with ResultStore(store_path, readonly=True) as store:
        section = render(store, experiment["config_hash"], out)
    md = out / "report.md"
    md.write_text(section["markdown"], encoding="utf-8")
    html = out / "report.html"
    page = render_page(section["title"], section["html"], experiment["provenance"])
    html.write_text(page, encoding="utf-8")
    files = {Path(f).stem: Path(f) for f in section.get("files", [])}
    return ReportPaths(out, experiment["config_hash"], html, md, {"report": md}, {}, files)


def render_page(title: str, body_html: str, provenance: dict | None = None) -> str:
    """A self-contained HTML page: ``body_html`` (trusted, made by deepfault) under ``title``,
    with a provenance table. Used by the method sections and by ``coverage measure --plot``.
    """
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
    rows = [(k, value_text(v)) for k, v in sorted((provenance or {}).items())]
    return page.render(title=title, body=jinja2.utils.markupsafe.Markup(body_html), provenance=rows)


def image_tag(path: Path, caption: str = "") -> str:
    """An ``<img>`` with the PNG inlined as a data URI, and its caption."""
    import html

    return (f"<figure><img src='{data_uri(Path(path))}' alt='{html.escape(Path(path).name)}'>"
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
        method = get_method(experiment["method"])
        if method.report is None:
            raise DeepFaultError(f"method {method.name!r} writes no report (experiment "
                                 f"{experiment['config_hash']})")
        paths = method.report(store_path, experiment, tmp)
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
