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
