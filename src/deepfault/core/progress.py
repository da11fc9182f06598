"""One progress display for every long loop: a bar on a terminal, periodic lines in a log.

tqdm redraws its bar with carriage returns, which a log file keeps as one endless line of
overwritten states. :func:`progress_bar` gives tqdm's bar when standard error is a
terminal, and otherwise a :class:`LogProgress` that logs one plain line (done, total, rate,
time left) at most every ``interval`` seconds and once at the end (with ``first_line``, also
after the first step: the first estimate of the time left). Both take the same
calls (``update``, ``set_postfix``, ``close``, ``n``), so the loops do not care which.
"""

from __future__ import annotations

import logging
import sys
import time

__all__ = ["progress_bar", "LogProgress", "LOG_INTERVAL"]

log = logging.getLogger("deepfault.progress")

#: Seconds between two progress lines in a log.
LOG_INTERVAL = 30.0


class LogProgress:
    """tqdm's counting interface, reporting through :mod:`logging` instead of redrawing.

    Args:
        total: The number of steps (``None``: unknown).
        desc: What is counted, for the lines.
        unit: The unit of a step.
        initial: Steps already done (a resumed run).
        interval: Seconds between two lines (default :data:`LOG_INTERVAL`, read when the
            bar is made).
        clock: The time source (tests pass a fake one).
        first_line: Also log a line after the first update, whose time left is the first
            estimate (a long run says early how long it will take).
    """

    def __init__(self, total: int | None = None, *, desc: str = "", unit: str = "it", initial: int = 0,
                 interval: float | None = None, clock=time.monotonic, first_line: bool = False):
        self.total, self.desc, self.unit, self.n = total, desc or "progress", unit, int(initial)
        self._initial, self._clock = int(initial), clock
        self._interval = float(LOG_INTERVAL if interval is None else interval)
        self._start = self._last = clock()
        self._postfix = ""
        self._closed = False
        self._first_line = first_line
        self._last_n: int | None = None

    def update(self, n: int = 1) -> None:
        """Count ``n`` more steps; log a line when ``interval`` has passed since the last."""
        self.n += int(n)
        if self._first_line or self._clock() - self._last >= self._interval:
            self._first_line = False
            self._emit()

    def set_postfix(self, **values) -> None:
        """Values shown after the counts (``loss=0.31``)."""
        self._postfix = ", ".join(f"{k}={v}" for k, v in values.items())

    def set_postfix_str(self, text: str) -> None:
        self._postfix = str(text)

    def line(self) -> str:
        """The current state as one line."""
        elapsed = self._clock() - self._start
        done = self.n - self._initial
        rate = done / elapsed if elapsed > 0 else 0.0
        of = f"/{self.total}" if self.total is not None else ""
        left = ""
        if self.total is not None and rate > 0:
            left = f", about {(self.total - self.n) / rate:.0f} s left"
        extra = f" ({self._postfix})" if self._postfix else ""
        counts = f"{self.n}{of} {self.unit}, {elapsed:.0f} s, {rate:.3g} {self.unit}/s"
        return f"{self.desc}: {counts}{left}{extra}"

    def _emit(self) -> None:
        self._last = self._clock()
        self._last_n = self.n
        log.info("%s", self.line())

    def close(self) -> None:
        """Log the final line once (not when the last line already said it)."""
        if not self._closed:
            self._closed = True
            if self._last_n != self.n:
                self._emit()

    def __enter__(self) -> LogProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def progress_bar(total: int | None = None, *, desc: str = "", unit: str = "it", initial: int = 0,
                 leave: bool = True, stream=None, first_line: bool = False):
    """A tqdm bar on a terminal, a :class:`LogProgress` elsewhere (a log file, CI, a pipe).

    Args:
        total: The number of steps.
        desc: What is counted.
        unit: The unit of a step.
        initial: Steps already done.
        leave: Keep the bar on the terminal when it closes.
        stream: Where the bar would draw (default standard error); only its ``isatty`` is used.
        first_line: In a log, a line after the first step too (:class:`LogProgress`); a bar
            shows its estimate from the first step anyway.
    """
    stream = sys.stderr if stream is None else stream
    if getattr(stream, "isatty", lambda: False)():
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc or None, unit=unit, initial=initial, leave=leave,
                    dynamic_ncols=True)
    return LogProgress(total, desc=desc, unit=unit, initial=initial, first_line=first_line)
