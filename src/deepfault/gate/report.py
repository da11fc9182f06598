"""The gate's HTML page (``deepfault gate --report DIR``): the verdict first, then the checks,
the flip table and a grid of the worst flipped inputs, each labelled with both predictions.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..experiment.tables import fmt, html_table

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


def gate_page(outcome: GateOutcome, folder) -> dict:
    """The page of one gate, for :func:`deepfault.experiment.report.write_page`.

    Returns:
        ``dict(title, html, meta, nav, config, provenance)``.
    """
    from ..experiment.report import image_tag, section  # noqa: PLC0415
    from ..provenance import provenance  # noqa: PLC0415

    m1, m2 = outcome.names
    checks = html_table(
        ("check", "status", "reason"),
        [(c.name, c.status.upper(), c.reason) for c in outcome.judgement.checks],
        classes=[("", "sig" if c.status == "fail" else "", "") for c in outcome.judgement.checks],
    )
    parts = [
        section(
            "verdict",
            f"Verdict: {outcome.verdict.upper()}",
            f"{m2} against {m1}: " + "; ".join(outcome.reasons),
            checks,
        )
    ]
    nav = [("verdict", "Verdict")]
    rows = [
        (
            c.label,
            c.name,
            c.support,
            c.negative_flips,
            fmt(100 * c.negative_flip_rate, 2),
            c.positive_flips,
            fmt(c.recall_m1, 4),
            fmt(c.recall_m2, 4),
            fmt(c.recall_delta, 4),
        )
        for c in outcome.flip_rows()
    ]
    h = outcome.heldout
    if h is not None:
        note = f"{h.inputs:,} held-out inputs; disagreement {100 * h.disagreement_rate:.2f}%." + (
            f" Accuracy {h.accuracy_m1:.4f} -> {h.accuracy_m2:.4f}, McNemar p = {h.mcnemar_p:.4g}."
            if h.labelled
            else ""
        )
        parts.append(
            section(
                "flips",
                "Flips per class",
                note,
                html_table(
                    (
                        "class",
                        "name",
                        "inputs",
                        "negative flips",
                        "negative %",
                        "positive flips",
                        "recall M1",
                        "recall M2",
                        "recall delta",
                    ),
                    rows,
                )
                if rows
                else "<p>No flip.</p>",
            )
        )
        nav.append(("flips", "Flips per class"))
        grid = flip_grid(outcome, Path(folder) / "worst-flips.png")
        if grid is not None:
            parts.append(
                section(
                    "worst",
                    "The worst flipped inputs",
                    "M2 most confident first; each titled with its label and both predictions.",
                    image_tag(grid),
                )
            )
            nav.append(("worst", "Worst flips"))
    r = outcome.replay
    if r is not None:
        parts.append(
            section(
                "corpus",
                "Corpus replay",
                f"{r.entries:,} entries: {r.failing:,} still wrong "
                f"({r.regressions:,} new since the champion), {r.fixed:,} fixed.",
            )
        )
        nav.append(("corpus", "Corpus"))
    return {
        "title": f"Gate: {m2} against {m1}: {outcome.verdict.upper()}",
        "meta": outcome.headline(),
        "html": "\n".join(parts),
        "nav": nav,
        "config": outcome.config.to_dict(),
        "provenance": provenance(),
    }
