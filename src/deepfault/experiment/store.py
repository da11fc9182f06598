"""A resumable SQLite store of experiment results: one row per cell.

A *cell* is one (model, class, approach, k, repetition) of an experiment grid. Each cell
is written in its own transaction, so a run killed at any moment (``kill -9`` included)
leaves only whole cells behind, and rerunning the same experiment skips them. The key
includes the hash of the experiment's configuration: a changed configuration never
reuses old cells.

The schema is plain SQL on purpose, so that other executors (a cluster, a queue) can
write cells with nothing but ``sqlite3``:

- ``experiments(config_hash, name, config, provenance, created)``: JSON texts.
- ``cells(config_hash, model, cls, approach, k, repetition, seed, data, examples,
  created)``: ``data`` is the JSON of :class:`Cell` without ``examples``; ``examples``
  holds a few original/synthesized input pairs as an ``.npz`` blob.
"""

from __future__ import annotations

import io
import json
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..errors import DeepFaultError

__all__ = ["Cell", "CellKey", "ResultStore"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS experiments (
    config_hash TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    config      TEXT NOT NULL,
    provenance  TEXT NOT NULL,
    created     TEXT NOT NULL DEFAULT (datetime('now'))
);
CREATE TABLE IF NOT EXISTS cells (
    config_hash TEXT NOT NULL REFERENCES experiments(config_hash),
    model       TEXT NOT NULL,
    cls         INTEGER NOT NULL,
    approach    TEXT NOT NULL,
    k           INTEGER NOT NULL,
    repetition  INTEGER NOT NULL,
    seed        INTEGER NOT NULL,
    data        TEXT NOT NULL,
    examples    BLOB,
    created     TEXT NOT NULL DEFAULT (datetime('now')),
    PRIMARY KEY (config_hash, model, cls, approach, k, repetition)
);
"""


@dataclass(frozen=True, order=True)
class CellKey:
    model: str
    cls: int
    approach: str
    k: int
    repetition: int


@dataclass
class Cell:
    """Everything measured in one cell.

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
    def from_row(cls, key: CellKey, data: dict, examples: bytes | None) -> Cell:
        arrays = {}
        if examples:
            with np.load(io.BytesIO(examples), allow_pickle=False) as npz:
                arrays = {name: npz[name] for name in npz.files}
        return cls(key=key, examples=arrays, **data)


def _blob(arrays: dict[str, np.ndarray]) -> bytes | None:
    if not arrays:
        return None
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


class ResultStore:
    """The SQLite file behind an experiment; safe to open again after any interruption."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=60)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(SCHEMA)
        except sqlite3.DatabaseError as err:
            raise DeepFaultError(
                f"cannot use {str(self.path)!r} as a results store ({err}); choose another path"
            ) from err

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- writing -----------------------------------------------------------------

    def begin(self, config_hash: str, name: str, config: dict, provenance: dict) -> None:
        """Record an experiment (once; a rerun keeps the first provenance)."""
        with self._db:
            self._db.execute(
                "INSERT OR IGNORE INTO experiments (config_hash, name, config, provenance) "
                "VALUES (?, ?, ?, ?)",
                (config_hash, name, json.dumps(config, sort_keys=True), json.dumps(provenance)),
            )

    def write(self, config_hash: str, cell: Cell) -> None:
        """Write one cell atomically; writing a cell that exists already is a no-op."""
        k = cell.key
        with self._db:  # one transaction
            self._db.execute(
                "INSERT OR IGNORE INTO cells (config_hash, model, cls, approach, k, repetition, "
                "seed, data, examples) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (config_hash, k.model, k.cls, k.approach, k.k, k.repetition, cell.seed,
                 json.dumps(cell.data(), allow_nan=False), _blob(cell.examples)),
            )

    # --- reading -----------------------------------------------------------------

    def done(self, config_hash: str) -> set[CellKey]:
        rows = self._db.execute(
            "SELECT model, cls, approach, k, repetition FROM cells WHERE config_hash = ?",
            (config_hash,),
        )
        return {CellKey(*row) for row in rows}

    def experiments(self) -> list[dict]:
        rows = self._db.execute(
            "SELECT config_hash, name, config, provenance, created FROM experiments ORDER BY created"
        )
        return [
            {"config_hash": h, "name": n, "config": json.loads(c), "provenance": json.loads(p),
             "created": t}
            for h, n, c, p, t in rows
        ]

    def cells(self, config_hash: str, *, examples: bool = True) -> Iterator[Cell]:
        """Every cell of an experiment, in key order."""
        rows = self._db.execute(
            f"SELECT model, cls, approach, k, repetition, data, {'examples' if examples else 'NULL'} "
            "FROM cells WHERE config_hash = ? ORDER BY model, cls, approach, k, repetition",
            (config_hash,),
        )
        for model, cls, approach, k, rep, data, blob in rows:
            yield Cell.from_row(CellKey(model, cls, approach, k, rep), json.loads(data), blob)

    def count(self, config_hash: str) -> int:
        return self._db.execute(
            "SELECT COUNT(*) FROM cells WHERE config_hash = ?", (config_hash,)
        ).fetchone()[0]
