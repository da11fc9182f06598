"""The gate as Markdown: the verdict and its checks, the numbers, the classes with flips; for a CI
job's summary (``$GITHUB_STEP_SUMMARY``) or a pull request's comment.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..experiment.tables import markdown_table

if TYPE_CHECKING:
    from .outcome import GateOutcome

__all__ = ["markdown_summary"]

_MARK = {"pass": "✅", "fail": "❌", "hold": "⏸️"}


def markdown_summary(outcome: GateOutcome) -> str:
    """The outcome as Markdown text."""
    m1, m2 = outcome.names
    checks = [(f"`{c.name}`", c.status, c.reason.replace("|", "\\|")) for c in outcome.judgement.checks]
    table = outcome.flip_table()
    parts = [
        f"## {_MARK[outcome.verdict]} deepfault gate: **{outcome.verdict.upper()}**",
        f"`{m2}` (challenger) against `{m1}` (champion).",
        markdown_table(("check", "status", "reason"), checks),
        "; ".join(outcome.heldout_lines()) + ".",
        *([table.markdown()] if table.rows else []),
        "; ".join(outcome.stage_lines()) + ".",
    ]
    return "\n\n".join(parts) + "\n"
