"""The gate as Markdown: the verdict and its reasons, the numbers, the classes with flips; for a CI
job's summary (``$GITHUB_STEP_SUMMARY``) or a pull request's comment.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..experiment.tables import fmt, markdown_table

if TYPE_CHECKING:
    from .outcome import GateOutcome

__all__ = ["markdown_summary"]

_MARK = {"pass": "✅", "fail": "❌", "hold": "⏸️"}


def markdown_summary(outcome: GateOutcome) -> str:
    """The outcome as Markdown text."""
    m1, m2 = outcome.names
    lines = [
        f"## {_MARK[outcome.verdict]} deepfault gate: **{outcome.verdict.upper()}**",
        "",
        f"`{m2}` (challenger) against `{m1}` (champion).",
        "",
    ]
    lines += [
        markdown_table(
            ("check", "status", "reason"),
            [(f"`{c.name}`", c.status, c.reason.replace("|", "\\|")) for c in outcome.judgement.checks],
        ),
        "",
    ]
    h = outcome.heldout
    if h is not None and h.labelled and h.inputs:
        lines += [
            f"**Held-out** ({h.inputs:,} inputs): accuracy {h.accuracy_m1:.4f} → {h.accuracy_m2:.4f} "
            f"(delta {h.accuracy_delta:+.4f}, McNemar p = {h.mcnemar_p:.4g}); negative flips "
            f"{h.negative_flips:,} ({100 * (h.negative_flip_rate or 0):.2f}%), positive flips "
            f"{h.positive_flips:,}; disagreement {100 * h.disagreement_rate:.2f}%.",
            "",
        ]
        rows = [
            (
                c.label,
                c.name,
                c.support,
                c.negative_flips,
                fmt(100 * c.negative_flip_rate, 2),
                c.positive_flips,
                fmt(c.recall_delta, 4),
            )
            for c in outcome.flip_rows()
        ]
        if rows:
            lines += [
                markdown_table(
                    (
                        "class",
                        "name",
                        "inputs",
                        "negative flips",
                        "negative %",
                        "positive flips",
                        "recall delta",
                    ),
                    rows,
                ),
                "",
            ]
    elif h is not None:
        lines += [
            f"**Held-out** ({h.inputs:,} unlabelled inputs): disagreement {100 * h.disagreement_rate:.2f}% "
            f"({h.disagree:,}).",
            "",
        ]
    r = outcome.replay
    if r is not None:
        lines += [
            f"**Corpus** ({r.entries:,} entries): {r.failing:,} still wrong ({r.regressions:,} new since the "
            f"champion), {r.fixed:,} fixed.",
            "",
        ]
    f = outcome.fuzz
    if f is not None:
        lines += [f"**Fuzz** ({f.budget}): {f.faults:,} regression faults ({f.unique:,} unique).", ""]
    if outcome.corpus_added:
        lines += [f"Added {outcome.corpus_added:,} entries to the corpus.", ""]
    if outcome.interrupted:
        lines += [
            f"Interrupted during {outcome.interrupted}; finished: {', '.join(outcome.finished()) or 'none'}.",
            "",
        ]
    return "\n".join(lines)
