"""One report system for every method: the page shell, the figure style and ``write_report``.

A method's package writes its own section (its tables and figures) and registers how
(:attr:`deepfault.experiment.method.Method.report`); this module owns what every report
shares: the self-contained HTML page, inlined PNGs, the matplotlib figure defaults, and
writing the report folder whole or not at all. matplotlib and jinja2 are imported inside
the functions that need them.
"""

from __future__ import annotations

import base64
import importlib
import json
import logging
import os
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ..errors import DeepFaultError
from .method import get_method
from .store import ResultStore, choose_experiment
from .tables import html_table

log = logging.getLogger(__name__)

__all__ = ["ReportPaths", "write_report", "write_section", "section_report", "write_page", "render_page",
           "page_environment",
           "page_rows", "html_table", "section", "image_tag", "new_figure", "save_figure", "data_uri",
           "value_text", "tex_safe", "REPORT_COMMAND"]

#: ``deepfault report``'s help line and description.
REPORT_COMMAND = (
    "tables, figures and an HTML report from a results store",
    "Write the tables, figures and a self-contained report.html of one experiment in a results store (any "
    "method: DeepFault, DeepXplore, DRFuzz). The folder is written whole or not at all.")


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


def new_figure(width: float, height: float,
               layout: Literal["constrained", "compressed", "tight"] | None = None):
    """A matplotlib figure in the report's style, drawn off-screen (no pyplot state)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError("figures need matplotlib: pip install -e '.[report]'") from err

    fig = Figure(figsize=(width, height), dpi=100, layout=layout)
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig, path: Path) -> Path:
    """Save ``fig`` as a PNG with no timestamp, so reruns write identical files, atomically
    (a reader never sees half a file). Every report figure goes through here: one style.
    """
    from .._io import atomic_path

    path = Path(path)
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        fig.savefig(fh, format="png", dpi=100, bbox_inches="tight", metadata={"Software": None})
    return path


def write_section(render: Callable, store_path: Path, experiment: dict, out: Path) -> ReportPaths:
    """Write a method's report from its section renderer.

    ``render(store, experiment_hash, out_dir)`` returns a dict with ``title``, ``markdown``,
    ``html`` (trusted, made by deepfault), ``files`` and optionally ``meta`` (one line under
    the title) and ``nav`` (``(anchor, text)`` pairs); this writes ``report.md`` and a
    ``report.html`` page around it, with the experiment's configuration at the end.
    """
    with ResultStore(store_path, readonly=True) as store:
        section = render(store, experiment["config_hash"], out)
    md = out / "report.md"
    md.write_text(section["markdown"], encoding="utf-8")
    html = out / "report.html"
    meta = section.get("meta") or (f"Experiment {experiment['config_hash']} ({experiment.get('name', '')}), "
                                   f"created {experiment.get('created', '?')}.")
    page = render_page(section["title"], section["html"], experiment.get("provenance"),
                       config=experiment.get("config"), meta=meta, nav=section.get("nav"))
    html.write_text(page, encoding="utf-8")
    files = {Path(f).stem: Path(f) for f in section.get("files", [])}
    return ReportPaths(out, experiment["config_hash"], html, md, {"report": md}, {}, files)


def section_report(module: str) -> Callable[[Path, dict, Path], ReportPaths]:
    """A method's :attr:`~deepfault.experiment.method.Method.report`: the section
    ``module.render_report(store, experiment_hash, out_dir)`` renders (``module``: the method's
    report module, by name, imported only when a report is written), in the one page
    (:func:`write_section`).
    """

    def report(store_path: Path, experiment: dict, out: Path) -> ReportPaths:
        return write_section(importlib.import_module(module).render_report, store_path, experiment, out)

    return report


def page_environment(package: str | None = None):
    """A jinja2 environment that finds the page shell (``page.html.j2``) and, with
    ``package``, that package's own ``templates/`` (a section template starts with
    ``{% extends "page.html.j2" %}`` and fills ``{% block content %}``).
    """
    import jinja2

    loaders = [jinja2.PackageLoader("deepfault.experiment", "templates")]
    if package is not None:
        loaders.insert(0, jinja2.PackageLoader(package, "templates"))
    return jinja2.Environment(loader=jinja2.ChoiceLoader(loaders), autoescape=True,
                              undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def page_rows(values: dict | None) -> list[tuple[str, str]]:
    """``values`` as sorted ``(key, text)`` rows for the configuration table."""
    return [(str(k), value_text(v)) for k, v in sorted((values or {}).items())]


def render_page(title: str, body_html: str, provenance: dict | None = None, *, config: dict | None = None,
                meta: str = "", nav=None) -> str:
    """A self-contained HTML page in the one page shell of every report.

    Args:
        title: The page's one ``<h1>``.
        body_html: The method's section (trusted HTML made by deepfault).
        provenance: Where the results came from (shown collapsed at the end).
        config: The run's configuration (shown collapsed at the end, never first).
        meta: One line under the title.
        nav: ``(anchor, text)`` pairs of a table of contents.
    """
    import markupsafe

    return page_environment().get_template("page.html.j2").render(
        title=title, body=markupsafe.Markup(body_html), meta=meta, nav=list(nav or []),
        config=page_rows(config), provenance=page_rows(provenance))


def section(anchor: str, title: str, note: str = "", *parts: str) -> str:
    """An ``<h2>`` section: its title, a caption paragraph (escaped) and its trusted parts."""
    import html

    text = f"<p class='caption'>{html.escape(note)}</p>" if note else ""
    return f"<h2 id='{html.escape(anchor)}'>{html.escape(title)}</h2>{text}" + "".join(parts)


def write_page(out_dir, render: Callable[[Path], dict]) -> Path:
    """Write one run's self-contained ``report.html`` (and its PNGs) into ``out_dir``, whole or
    not at all: ``render(folder)`` writes its figures into ``folder`` and returns ``title``,
    ``html`` (trusted) and optionally ``meta``, ``nav``, ``config`` and ``provenance``.

    Returns:
        The path of ``report.html``.

    Raises:
        DeepFaultError: ``out_dir`` is a file or cannot be written.
    """
    out = Path(out_dir)
    with _atomic_folder(out) as tmp:
        page = render(tmp)
        text = render_page(page["title"], page["html"], page.get("provenance"), config=page.get("config"),
                           meta=page.get("meta", ""), nav=page.get("nav"))
        (tmp / "report.html").write_text(text, encoding="utf-8")
    return out / "report.html"


def image_tag(path: Path, caption: str = "") -> str:
    """An ``<img>`` with the PNG inlined as a data URI, and its caption."""
    import html

    return (f"<figure><img src='{data_uri(Path(path))}' alt='{html.escape(Path(path).name)}'>"
            f"<figcaption>{html.escape(caption)}</figcaption></figure>")


@contextmanager
def _atomic_folder(out: Path):
    """A temporary folder beside ``out``, renamed to ``out`` when the block ends without error;
    removed on any error or interrupt.

    A previous report in ``out`` is replaced, and only what its manifest
    (:data:`deepfault._io.REPORT_MANIFEST`) lists is deleted: ``out`` must be new, empty, or a
    folder that holds nothing else (:func:`deepfault.checks.check_report_dir`, checked again just
    before the swap, since the run may have put a file there meanwhile). The new folder gets its
    own manifest.
    """
    import shutil
    import tempfile

    from .._io import remove_listed, unlisted_files, write_manifest
    from ..checks import check_report_dir

    check_report_dir("report folder", out)
    if out.is_symlink():  # a link to a folder: the report replaces the folder, never the link
        out = Path(os.path.realpath(out))
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    except OSError as err:
        raise DeepFaultError(
            f"cannot write the report to {str(out)!r}: {err.strerror or err}; choose a writable folder"
        ) from None
    try:
        tmp.chmod(0o777 & ~_umask())
        yield tmp
        write_manifest(tmp)
        old = None
        if out.exists():
            foreign = unlisted_files(out, first=1)
            if foreign:
                raise DeepFaultError(
                    f"report folder {str(out)!r} now holds files no report wrote ({foreign[0]!r}), which "
                    "replacing it would delete; the report was not written: give a new folder")
            old = out.with_name(f".{out.name}.old-{tmp.name}")
            out.rename(old)
        tmp.rename(out)
        if old is not None:
            left = remove_listed(old)
            if left:  # a file came in between the check and the swap: kept, never deleted
                log.warning("report folder %s: %d file(s) no report wrote were kept in %s", out, len(left),
                            old)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


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
    for module in ("matplotlib", "jinja2"):
        try:
            __import__(module)
        except ModuleNotFoundError as err:
            raise ModuleNotFoundError(
                f"'deepfault report' needs {module}; install the extra: pip install -e '.[report]'"
            ) from err
    store_path, out = Path(store_path), Path(out_dir)
    with ResultStore(store_path, readonly=True) as store:
        experiment = choose_experiment(store, config_hash)
    method = get_method(experiment["method"])
    if method.report is None:
        raise DeepFaultError(f"method {method.name!r} writes no report (experiment "
                             f"{experiment['config_hash']})")
    with _atomic_folder(out) as tmp:
        paths = method.report(store_path, experiment, tmp)
    return _moved(paths, tmp, out)


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask
