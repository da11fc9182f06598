"""One table object, rendered for the terminal, an HTML page and Markdown.

A command's printed table and the same table on its ``--report`` page (or in a stored
experiment's report) come from one :class:`Table`, so the two cannot drift apart: the
cells are formatted once, where the table is built, and each renderer only lays them out.

Examples:
    >>> t = Table(("model", "accuracy %"), [("before", "97.50"), ("after", "98.25")])
    >>> print(t.text())
      model   accuracy %
      before       97.50
      after        98.25
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["Table", "html_table", "text_table", "markdown_table", "fmt"]


def fmt(value, digits: int = 3) -> str:
    """A cell's text: ``-`` for ``None``, ``inf``, a float with ``digits`` decimals, else ``str``."""
    if value is None:
        return "-"
    if isinstance(value, float):
        if value == float("inf"):
            return "inf"
        return f"{value:.{digits}f}"
    return str(value)


def _numeric(text: str) -> bool:
    try:
        float(text.rstrip("%"))
        return True
    except ValueError:
        return text in ("inf", "-", "n/a")


def text_table(headers: Sequence, rows: Sequence[Sequence], indent: str = "  ") -> str:
    """Aligned columns for a terminal: text left, numbers right (the first column always left)."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for r in cells:
        parts = [c.ljust(w) if i == 0 or not _numeric(c) else c.rjust(w)
                 for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        lines.append(indent + "  ".join(parts).rstrip())
    return "\n".join(lines)


def html_table(headers: Sequence, rows: Sequence[Sequence], *, classes: Sequence[Sequence[str]] | None = None
               ) -> str:
    """A table that scrolls inside its own box (never the page), its cells escaped.

    ``classes``: optional CSS classes per cell (``"best"``, ``"sig"``), same shape as ``rows``.
    """
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        cells = []
        for j, c in enumerate(row):
            cls = classes[i][j] if classes and classes[i][j] else ""
            cells.append(f"<td class='{cls}'>{html.escape(str(c))}</td>" if cls
                         else f"<td>{html.escape(str(c))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f"<div class='scroll'><table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody>"
            "</table></div>")


def markdown_table(headers: Sequence, rows: Sequence[Sequence]) -> str:
    """A GitHub-flavoured Markdown table."""
    lines = ["| " + " | ".join(str(h) for h in headers) + " |",
             "|" + "|".join(" --- " for _ in headers) + "|"]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])


@dataclass(frozen=True)
class Table:
    """Headers and rows of formatted cells, and a title and a note for whoever shows them.

    Attributes:
        headers: Column names.
        rows: One sequence of cells per row, as shown (format numbers before, e.g. with :func:`fmt`).
        title: What the table shows (a section title on a page, a line above it in a terminal).
        note: A caption (pages only).
    """

    headers: tuple[str, ...]
    rows: tuple[tuple, ...]
    title: str = ""
    note: str = field(default="", compare=False)

    def __init__(self, headers: Sequence, rows: Sequence[Sequence], *, title: str = "", note: str = ""):
        headers = tuple(str(h) for h in headers)
        rows = tuple(tuple(r) for r in rows)
        bad = next((r for r in rows if len(r) != len(headers)), None)
        if bad is not None:
            raise ValueError(f"a row of {len(bad)} cells in a table of {len(headers)} columns: {bad!r}")
        object.__setattr__(self, "headers", headers)
        object.__setattr__(self, "rows", rows)
        object.__setattr__(self, "title", title)
        object.__setattr__(self, "note", note)

    def text(self, indent: str = "  ") -> str:
        """The terminal's aligned columns (:func:`text_table`), without the title."""
        return text_table(self.headers, self.rows, indent)

    def html(self, classes: Sequence[Sequence[str]] | None = None) -> str:
        """The page's scrolling table (:func:`html_table`), without the title."""
        return html_table(self.headers, self.rows, classes=classes)

    def markdown(self) -> str:
        """The Markdown table (:func:`markdown_table`), without the title."""
        return markdown_table(self.headers, self.rows)

    def to_dict(self) -> dict:
        return {"title": self.title, "headers": list(self.headers), "rows": [list(r) for r in self.rows]}
