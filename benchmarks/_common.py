"""What the benchmark scripts share."""

from __future__ import annotations

import time


def busy_fraction(seconds: float = 0.5) -> float | None:
    """Share of all CPUs busy while this process sleeps: the load from other processes
    (``None`` where ``/proc/stat`` cannot be read). Recorded beside every timing."""

    def ticks():
        with open("/proc/stat") as fh:
            vals = [int(v) for v in fh.readline().split()[1:]]
        idle = vals[3] + vals[4]
        return sum(vals) - idle, sum(vals)

    try:
        busy0, total0 = ticks()
        time.sleep(seconds)
        busy1, total1 = ticks()
    except OSError:
        return None
    return round((busy1 - busy0) / max(total1 - total0, 1), 3)


def call_times(fn, repeats: int, *, warmup: int = 1) -> list[float]:
    """Seconds of each of ``repeats`` calls of ``fn``, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times
