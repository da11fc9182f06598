"""How many CPU threads a small model's batch loop should use: the cores no other process is
using right now.

Measured on this project's 2-core machine (``docs/performance.md``): with the machine
quiet, two threads make the LeNet searches and campaigns 1.5-1.8x faster than one; with
the other core busy, two threads make them 6-25x slower (each small convolution is split
between threads that then wait for a core). So ``auto`` counts the busy cores first.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["SMALL_MODEL_PARAMETERS", "auto_threads", "busy_cores", "usable_cores"]

#: Models with at most this many parameters in all get :func:`auto_threads`' count; larger
#: ones keep PyTorch's setting (one thread was not measured faster there).
SMALL_MODEL_PARAMETERS = 2_000_000


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def busy_cores(samples: int = 5, interval: float = 0.01) -> float:
    """Cores other processes keep busy now: the kernel's count of running tasks less this
    one (``/proc/loadavg``), averaged over a few samples; elsewhere the 1-minute load.
    """
    counts = []
    for i in range(samples):
        try:
            with open("/proc/loadavg", encoding="ascii") as fh:
                running = int(fh.read().split()[3].split("/")[0])
        except (OSError, ValueError, IndexError):
            return os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
        counts.append(max(0, running - 1))
        if i + 1 < samples:
            time.sleep(interval)
    return sum(counts) / len(counts)


def auto_threads(models: Sequence[nn.Module], device) -> int | None:
    """The CPU thread count for a batch loop over small ``models``: the free cores (at least
    one, at most PyTorch's setting); ``None`` (leave PyTorch's setting) on a GPU or for
    models above :data:`SMALL_MODEL_PARAMETERS` parameters in all.
    """
    if torch.device(device).type != "cpu":
        return None
    if sum(p.numel() for m in models for p in m.parameters()) > SMALL_MODEL_PARAMETERS:
        return None
    free = usable_cores() - busy_cores()
    return max(1, min(torch.get_num_threads(), int(free + 0.5)))
