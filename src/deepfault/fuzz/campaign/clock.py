"""A campaign's clock (fuzzing time summed over resumes, seconds per phase) and its timeline."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

__all__ = ["PHASES", "Clock", "Timeline"]

#: The phases of a step whose time :attr:`Clock.timings` adds up.
PHASES = ("select", "mutate", "check", "execute", "update", "checkpoint")


class Clock:
    """Fuzzing time (:meth:`now`: the previous sessions' ``elapsed`` plus the running one's) and
    the time per phase (:meth:`tick` charges the time since the last tick to a phase).
    """

    def __init__(self) -> None:
        self.elapsed = 0.0
        self.timings = dict.fromkeys(PHASES, 0.0)
        self._session_start: float | None = None
        self._t = time.perf_counter()

    def now(self) -> float:
        """Fuzzing seconds so far."""
        if self._session_start is None:
            return self.elapsed
        return self.elapsed + (time.perf_counter() - self._session_start)

    def start(self) -> float:
        """A fuzzing session begins (:meth:`run <.loop.Campaign.run>`); returns its start time."""
        self._session_start = time.perf_counter()
        return self._session_start

    def stop(self) -> None:
        """A session ends: its time joins ``elapsed`` (and the clock runs on from there)."""
        self.elapsed = self.now()
        self._session_start = time.perf_counter()

    def restart_tick(self) -> None:
        self._t = time.perf_counter()

    def tick(self, phase: str) -> None:
        """Charge the time since the last tick to ``phase``."""
        now = time.perf_counter()
        self.timings[phase] += now - self._t
        self._t = now

    def timed(self, phase: str, call: Callable[..., object], *args: object) -> float:
        """Call ``call(*args)``, charge its time to ``phase`` and return when it ended."""
        start = time.perf_counter()
        call(*args)
        end = time.perf_counter()
        self.timings[phase] += end - start
        return end


class Timeline:
    """Samples of a campaign's progress: at most one a second (or every 1% of the time so far)."""

    def __init__(self) -> None:
        self.samples: list[dict] = []

    def sample(self, now: float, progress: Callable[[], Any], queries: int, *, force: bool = False) -> None:
        """Append ``{elapsed, iterations, queries, rf, urf, seeds, gf, corpus}`` when one is due.

        Args:
            now: Fuzzing seconds so far.
            progress: Returns the campaign's :class:`~.config.CampaignProgress` (called only when due).
            queries: Queries so far.
            force: Sample even when none is due (the end of a run).
        """
        last = self.samples[-1]["elapsed"] if self.samples else -math.inf
        if force or now - last >= max(1.0, 0.01 * now):
            p = progress()
            self.samples.append({"elapsed": round(now, 3), "iterations": p.iterations, "queries": queries,
                                 "rf": p.rf, "urf": p.urf, "seeds": p.seeds, "gf": p.gf, "corpus": p.corpus})
