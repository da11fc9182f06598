"""How a regression campaign shows its progress: one line, and a legend for its abbreviations.

``Runtime(progress=True)`` gives :class:`Display`: on a terminal the line is redrawn in place
(standard error) at most every 0.5 s; elsewhere (a pipe, a log file) a line is written every
10 s. Before any work it says what the run does with the store
(:class:`~.campaign.resume.StoreState`, on standard output, where the summary follows), and
above the first progress line, once, what its abbreviations mean (:data:`PROGRESS_LEGEND`).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from .campaign.config import CampaignProgress
from .campaign.resume import StoreState

__all__ = ["PROGRESS_LEGEND", "Display", "display_for", "progress_line"]


def progress_line(p: CampaignProgress, *, top: int = 4) -> str:
    """One line for a terminal: elapsed, iterations, #RF, #URF, #Seed, #GF and the busiest rules."""
    shares = sorted(p.rule_shares.items(), key=lambda kv: -kv[1])[:top]
    rules = " ".join(f"{name} {share:.0%}" for name, share in shares if share > 0)
    return (f"{p.elapsed:7.1f}s  it {p.iterations:,}  RF {p.rf:,}  URF {p.urf:,}  Seed {p.seeds:,}  "
            f"GF {p.gf:,}  queue {p.corpus:,}  [{rules}]")


#: The legend of :func:`progress_line`'s abbreviations (shown once, above the first line).
PROGRESS_LEGEND = ("it: iterations; RF: generated inputs M1 gets right and M2 wrong; URF: distinct (seed, "
                   "M1 label, M2 label) among them; Seed: seeds with an RF; GF: generated inputs M2 gets "
                   "wrong; queue: inputs kept for mutation; [...]: the most chosen mutation rules")


class Display:
    """``progress=True``: the progress line on standard error (see the module's docstring)."""

    def __init__(self, stream=None):
        self.stream = stream if stream is not None else sys.stderr
        self.live = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last = 0.0
        self._legend = True
        self._drawn = False

    def __call__(self, record: Any) -> None:
        if isinstance(record, StoreState):  # with the summary's lines, which repeat it
            print(record.line(), file=sys.stdout, flush=True)
            return
        now = time.monotonic()
        if now - self._last < (0.5 if self.live else 10.0):
            return
        self._last = now
        if self._legend:
            self._legend = False
            print(f"progress: {PROGRESS_LEGEND}", file=self.stream)
        if self.live:
            self._drawn = True
            print("\r" + progress_line(record).ljust(110)[:160], end="", file=self.stream, flush=True)
        else:
            print(progress_line(record), file=self.stream, flush=True)

    def close(self) -> None:
        """End a line drawn in place."""
        if self._drawn:
            print(file=self.stream, flush=True)
            self._drawn = False


def display_for(progress: bool | str | Callable[..., Any] | None) -> Callable[[Any], None] | None:
    """The callable a run reports to: :class:`Display` for ``True`` (or a label), the caller's
    callable as it is (called with the :class:`~.campaign.resume.StoreState` before any work,
    then a :class:`~.campaign.config.CampaignProgress` after every step), ``None`` for none.
    """
    if progress is None or progress is False:
        return None
    if callable(progress):
        return progress
    return Display()
