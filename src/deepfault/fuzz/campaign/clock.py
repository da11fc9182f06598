"""A campaign's clock (fuzzing time summed over resumes, seconds per phase), its timeline, and
the expected cost of a step (:class:`StepCost`, which keeps a time budget).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["PHASES", "Clock", "StepCost", "Timeline"]

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


class StepCost:
    """What a step is expected to cost, so that a time budget holds: the loop sizes its next step
    to the time left (:meth:`fit`) instead of starting a step that cannot be interrupted and ends
    far past the budget (a step of 64 inputs x 20 mutants through two ResNet-sized models takes
    minutes on a CPU).

    A step's size is measured in *units* that its cost is proportional to: the loop uses the
    forward passes its mutants take (they run in passes of a fixed number of rows, padded, so a
    step of one input costs a whole pass). The cost is ``a + b * units`` seconds, fitted by least
    squares to the last :attr:`WINDOW` steps (``a, b >= 0``; while every step had the same size,
    ``a = 0`` and ``b`` the median seconds per unit). Before any step it is ``prior`` seconds per
    unit (from the seeds' evaluation), or unknown.

    Examples:
        >>> cost = StepCost()
        >>> cost.add(8, 4.0)
        >>> cost.estimate(2)
        1.0
        >>> cost.fit(64, left=1.6, units=lambda k: k / 8)  # 64 iterations are 8 units
        25
    """

    WINDOW = 8

    def __init__(self, prior: float | None = None) -> None:
        self.prior = prior
        self.samples: list[tuple[float, float]] = []

    def add(self, units: float, seconds: float) -> None:
        """A step of ``units`` took ``seconds`` (everything between two budget checks)."""
        if units > 0:
            self.samples = [*self.samples, (float(units), float(seconds))][-self.WINDOW :]

    def line(self) -> tuple[float, float] | None:
        """``(a, b)``: seconds per step and per unit, or ``None`` while unknown."""
        if not self.samples:
            return None if self.prior is None else (0.0, self.prior)
        us = np.array([u for u, _ in self.samples], dtype=np.float64)
        ts = np.array([t for _, t in self.samples], dtype=np.float64)
        if np.ptp(us) > 0:
            b, a = np.polyfit(us, ts, 1)
            if b > 0 and a >= 0:
                return float(a), float(b)
        return 0.0, float(np.median(ts / us))

    def estimate(self, units: float) -> float | None:
        """Seconds a step of ``units`` is expected to take (``None`` while unknown)."""
        line = self.line()
        return None if line is None else line[0] + line[1] * units

    def fit(self, k: int, left: float, units: Callable[[int], float] = float) -> int:
        """The iterations (at most ``k``) of a step that ends by the budget, ``left`` seconds
        away, a step of ``i`` iterations being ``units(i)``: ``k`` when it fits (or nothing is
        known yet), else the most that fit; when not even one does, 1 if that ends nearer the
        budget than stopping now would, else 0 (stop).
        """
        line = self.line()
        if line is None or k <= 0:
            return k
        a, b = line
        lo, hi = 0, k  # the most iterations that fit: costs grow with the iterations
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if a + b * units(mid) <= left:
                lo = mid
            else:
                hi = mid - 1
        if lo >= 1:
            return lo
        return 1 if a + b * units(1) - left < left else 0
