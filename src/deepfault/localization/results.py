"""DeepFault's cells in the results store: their key, their fields, and how they are read and written.

A cell is one (model, class, approach, k, repetition) of a grid; its store id is
``model/class/approach/k/repetition`` under the method ``"deepfault"``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

import numpy as np

from ..errors import DeepFaultError
from ..experiment.store import Record, ResultStore

__all__ = ["DEEPFAULT_METHOD", "Cell", "CellKey", "write_cell", "read_cells"]

#: The method name DeepFault's cells are stored under.
DEEPFAULT_METHOD = "deepfault"


@dataclass(frozen=True, order=True)
class CellKey:
    """A DeepFault grid cell; its store id is ``model/class/approach/k/repetition``."""

    model: str
    cls: int
    approach: str
    k: int
    repetition: int

    @property
    def id(self) -> str:
        return f"{self.model}/{self.cls}/{self.approach}/{self.k}/{self.repetition}"

    @classmethod
    def from_id(cls, cell_id: str) -> CellKey:
        model, c, approach, k, rep = cell_id.rsplit("/", 4)
        return cls(model, int(c), approach, int(k), int(rep))


@dataclass
class Cell:
    """Everything measured in one DeepFault cell.

    Per-input lists (``loss`` ... ``increased``) have one entry per synthesized input;
    ``increased_at`` maps ``k'`` (as a string) to such a list. ``examples`` holds
    ``originals`` and ``synthesized`` arrays for the first few inputs.
    """

    key: CellKey
    seed: int
    neurons: list[dict]
    layer_distribution: dict[str, int]
    layers: list[dict]
    num_passed: int
    num_failed: int
    spectrum_seconds: float
    synthesis_seconds: float
    input_indices: list[int]
    loss: list[float]
    correct: list[bool]
    pred_original: list[int]
    pred_synthesized: list[int]
    l1: list[float]
    l2: list[float]
    linf: list[float]
    increased: list[float]
    increased_at: dict[str, list[float]] = field(default_factory=dict)
    examples: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    def data(self) -> dict:
        out = asdict(self)
        out.pop("examples")
        out.pop("key")
        return out

    @classmethod
    def from_record(cls, record: Record) -> Cell:
        try:
            return cls(key=CellKey.from_id(record.cell_id), examples=record.arrays, **record.data)
        except (TypeError, ValueError) as err:
            raise DeepFaultError(
                f"cell {record.cell_id!r} in the results store does not have DeepFault's fields ({err})"
            ) from None


def write_cell(store: ResultStore, config_hash: str, cell: Cell) -> None:
    """Write one DeepFault cell (see :meth:`~deepfault.experiment.store.ResultStore.put`)."""
    store.put(config_hash, DEEPFAULT_METHOD, cell.key.id, cell.data(), cell.examples)


def read_cells(store: ResultStore, config_hash: str, *, examples: bool = True) -> Iterator[Cell]:
    """Every DeepFault cell of an experiment, in key order."""
    cells = [Cell.from_record(r) for r in store.records(config_hash, DEEPFAULT_METHOD, arrays=examples)]
    yield from sorted(cells, key=lambda c: c.key)
