"""The executors' old home: they live in :mod:`deepfault.core.executors` now (the data-parallel
passes of the method packages use them too); this path keeps answering with the same objects.
"""

from __future__ import annotations

from ..core.executors import (
    CONNECT_TIMEOUT,
    EXECUTORS,
    Executor,
    Parallel,
    ProcessExecutor,
    RayExecutor,
    SerialExecutor,
    get_executor,
    list_executors,
)

__all__ = ["CONNECT_TIMEOUT", "EXECUTORS", "Executor", "Parallel", "ProcessExecutor", "RayExecutor",
           "SerialExecutor", "get_executor", "list_executors"]
