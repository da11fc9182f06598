"""The faults a campaign has found, kept as append-only parts (which checkpoints store as chunks)."""

from __future__ import annotations

import numpy as np

from .metrics import FAULT_KINDS, FaultTable

__all__ = ["FaultLog", "RFData"]

#: The regression faults' inputs ``(R, C, H, W)`` and both models' probabilities ``(R, classes)``.
RFData = tuple[np.ndarray, np.ndarray, np.ndarray]


class FaultLog:
    """The initial faults (seeds M2 already gets wrong) and the parts found since, in draw order.

    Args:
        initial: The initial faults' table.
        initial_rf: Their inputs and probabilities.
    """

    def __init__(self, initial: FaultTable, initial_rf: RFData):
        self.initial = initial
        self.initial_rf = initial_rf
        self.parts: list[FaultTable] = []
        self.rf_parts: list[RFData] = []
        self.counts = {"rf": 0, "gf": 0}

    def record(self, table: FaultTable, rf: RFData | None) -> None:
        """Append one step's faults (``rf``: the regression faults' data, ``None`` when there are none)."""
        self.parts.append(table)
        if rf is not None:
            self.rf_parts.append(rf)
        is_rf = int(np.count_nonzero(table.kind == FAULT_KINDS.index("rf")))
        self.counts["rf"] += is_rf
        self.counts["gf"] += len(table.kind)

    def take(self, start: int, rf_start: int) -> tuple[FaultTable | None, RFData | None]:
        """The parts from ``start`` (and regression-fault data from ``rf_start``), merged into one
        part each, which from now on replaces them in memory.
        """
        parts, rf_parts = self.parts[start:], self.rf_parts[rf_start:]
        table = FaultTable.concat(parts) if parts else None
        rf = _concat(rf_parts) if rf_parts else None
        if table is not None:
            self.parts[start:] = [table]
        if rf is not None:
            self.rf_parts[rf_start:] = [rf]
        return table, rf

    def add(self, table: FaultTable, rf: RFData | None) -> None:
        """Append a part that :meth:`take` returned (resuming); the counts come with the state."""
        self.parts.append(table)
        if rf is not None:
            self.rf_parts.append(rf)

    def table(self) -> FaultTable:
        """Every fault, the initial ones first."""
        return FaultTable.concat([self.initial, *self.parts])

    def rf_data(self) -> RFData:
        """The regression faults' inputs and probabilities (rows: the ``rf`` rows of :meth:`table`)."""
        return _concat([self.initial_rf, *self.rf_parts])


def _concat(parts: list[RFData]) -> RFData:
    return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
            np.concatenate([p[2] for p in parts]))
