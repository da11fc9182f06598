"""The gate's HTML page (``deepfault gate --report DIR``): the verdict first, then the checks,
the flip table and a grid of the worst flipped inputs, each labelled with both predictions.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..experiment.tables import html_table

if TYPE_CHECKING:
    from .outcome import GateOutcome

__all__ = ["gate_page", "flip_grid"]


def flip_grid(outcome: GateOutcome, path: Path, *, columns: int = 8) -> Path | None:
    """A PNG grid of the worst flipped inputs (images only), each titled ``label / M1 / M2``;
    ``None`` when there is none or they are no images.
    """
    h = outcome.heldout
    if h is None or not len(h.flip_inputs):
        return None
    from ..experiment.figures import as_image  # noqa: PLC0415
    from ..experiment.report import new_figure, save_figure  # noqa: PLC0415

    shown = [as_image(x) for x in h.flip_inputs]
    images = [im for im in shown if im is not None]
    if len(images) != len(shown):
        return None
    n = len(images)
    cols = min(columns, n)
    rows = (n + cols - 1) // cols
    fig = new_figure(1.3 * cols, 1.5 * rows)
    lo, hi = outcome.bounds
    for k, (im, rec) in enumerate(zip(images, h.worst_flips, strict=True)):
        ax = fig.add_subplot(rows, cols, k + 1)
        ax.imshow(np.clip((im - lo) / max(hi - lo, 1e-12), 0, 1), cmap="gray" if im.ndim == 2 else None)
        ax.set_title(
            f"y {rec['label']}: M1 {rec['m1']}, M2 {rec['m2']}\n({rec['confidence']:.2f})", fontsize=6
        )
        ax.axis("off")
    return save_figure(fig, path)


def _verdict_section(outcome: GateOutcome) -> str:
    from ..experiment.report import section  # noqa: PLC0415

    checks = outcome.judgement.checks
    table = html_table(
        ("check", "status", "reason"),
        [(c.name, c.status.upper(), c.reason) for c in checks],
        classes=[("", "sig" if c.status == "fail" else "", "") for c in checks],
    )
    m1, m2 = outcome.names
    return section(
        "verdict",
        f"Verdict: {outcome.verdict.upper()}",
        f"{m2} against {m1}: " + "; ".join(outcome.reasons),
        table,
    )


def _flip_sections(outcome: GateOutcome, folder: Path) -> tuple[list[str], list[tuple[str, str]]]:
    from ..experiment.report import image_tag, section  # noqa: PLC0415

    if outcome.heldout is None:
        return [], []
    table = outcome.flip_table()
    parts = [
        section(
            "flips",
            "Flips per class",
            "; ".join(outcome.heldout_lines()) + ".",
            table.html() if table.rows else "<p>No flip.</p>",
        )
    ]
    nav = [("flips", "Flips per class")]
    grid = flip_grid(outcome, folder / "worst-flips.png")
    if grid is not None:
        parts.append(
            section(
                "worst",
                "The worst flipped inputs",
                "M2 most confident first; each titled with its label, both predictions and M2's confidence.",
                image_tag(grid),
            )
        )
        nav.append(("worst", "Worst flips"))
    return parts, nav


def gate_page(outcome: GateOutcome, folder) -> dict:
    """The page of one gate, for :func:`deepfault.experiment.report.write_page`: the verdict, the
    flip table, the grid of the worst flips, the other stages.

    Returns:
        ``dict(title, html, meta, nav, config, provenance)``.
    """
    from ..experiment.report import section  # noqa: PLC0415
    from ..provenance import provenance  # noqa: PLC0415

    flips, nav = _flip_sections(outcome, Path(folder))
    parts = [
        _verdict_section(outcome),
        *flips,
        section("stages", "Corpus and fuzz", "; ".join(outcome.stage_lines()) + "."),
    ]
    m1, m2 = outcome.names
    return {
        "title": f"Gate: {m2} against {m1}: {outcome.verdict.upper()}",
        "meta": outcome.headline(),
        "html": "\n".join(parts),
        "nav": [("verdict", "Verdict"), *nav, ("stages", "Corpus and fuzz")],
        "config": outcome.config.to_dict(),
        "provenance": provenance(),
    }
